"""Prediction targets: collect FASTA records / alignment inputs and their MSAs, and validate all of
them before any model work.

A FASTA file goes through :func:`alphafold_mem.data.parse_fasta` whole; only if it is rejected is it
split at its headers so that every other record still runs. MSAs are parsed once here to validate
them (and count their rows) and parsed again when the target runs, so a large batch never holds all
of its alignments in memory. Every rejection is one line naming file, record and position.
"""

from __future__ import annotations

import gzip
import itertools
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

__all__ = ["PredictError", "Target", "Rejected", "collect_targets", "FASTA_SUFFIXES", "MSA_SUFFIXES"]

FASTA_SUFFIXES = (".fasta", ".fa", ".faa", ".fas", ".fsa", ".seq")
MSA_SUFFIXES = (".a3m", ".sto", ".stockholm")


class PredictError(ValueError):
    """A problem with the run as a whole (options, weights, no usable input): one line."""


@dataclass
class Target:
    """One prediction target after validation.

    Attributes:
        name: sanitised record id, unique in the run (names the output files).
        sequence: one-letter query sequence (``N_res``).
        description: the FASTA header (or the alignment's first description).
        source: ``path:line`` of the record (or the alignment path).
        msa_files: alignment files for this target (merged in order); empty = single-sequence.
        from_alignment: the input itself was an ``.a3m``/``.sto`` (its first row is the query).
        msa_depth: distinct rows of the merged MSA, query included (1 without MSA).
        order: position among the run's inputs (for the summary table).
    """

    name: str
    sequence: str
    description: str
    source: str
    msa_files: tuple[str, ...] = ()
    msas: list = field(default_factory=list, repr=False)  # parsed Msa records, only during validation
    from_alignment: bool = False  # the input itself was an .a3m/.sto
    msa_depth: int = 1
    order: int = 0


@dataclass(frozen=True)
class Rejected:
    """An input rejected before model work: ``message`` is one line naming file, record and position."""

    name: str
    message: str
    order: int
    length: Optional[int] = None


def _is_msa_file(path: str) -> bool:
    base = path[:-3] if path.endswith(".gz") else path
    return base.lower().endswith(MSA_SUFFIXES)


def _is_fasta_file(path: str) -> bool:
    base = path[:-3] if path.endswith(".gz") else path
    return base.lower().endswith(FASTA_SUFFIXES)


def _input_files(inputs) -> list[str]:
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not items:
        raise PredictError("no input given")
    files = []
    for item in items:
        path = os.fspath(item)
        if os.path.isdir(path):
            found = sorted(os.path.join(path, f) for f in os.listdir(path)
                           if _is_fasta_file(f) and os.path.isfile(os.path.join(path, f)))
            if not found:
                raise PredictError(f"{path}: directory without FASTA files ({', '.join(FASTA_SUFFIXES)})")
            files.extend(found)
        elif not os.path.exists(path):
            raise PredictError(f"{path}: input not found")
        else:
            files.append(path)
    return files


def _emit_warnings(caught, log) -> None:
    for w in caught:
        log(f"warning: {w.message}")


def _read_fasta(path: str, log) -> tuple[list, list[tuple[int, str]]]:
    """All valid records of a FASTA file and ``(header line, error line)`` per rejected record.

    The whole file goes through :func:`alphafold_mem.data.parse_fasta` first; only if it is
    rejected is the file split at its headers and every record parsed on its own (with its real line
    numbers), so that one bad record does not hide the others.
    """
    from ..data import InputError, parse_fasta, parse_fasta_string

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            records = list(parse_fasta(path))
            _emit_warnings(caught, log)
            return records, []
        except InputError as exc:
            whole = exc
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as fh:
            lines = list(fh)
    except OSError as exc:
        return [], [(0, f"{path}: cannot be read ({exc.strerror or exc})")]
    starts = [i for i, line in enumerate(lines) if line.startswith(">")]
    if not starts:
        return [], [(0, str(whole))]
    errors: list[tuple[int, str]] = []
    for i in range(starts[0]):
        text = lines[i].strip()
        if text and not text.startswith((";", "#", "!")):
            errors.append((i + 1, str(InputError(f"text before the first FASTA header ('>'): {text[:30]!r}",
                                                 file=path, line=i + 1, column=1))))
            break
    records = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(lines)
            # Blank lines in front keep the parser's line numbers equal to the file's.
            text = "\n" * start + "".join(lines[start:end])
            try:
                records.extend(parse_fasta_string(text, label=path))
            except InputError as exc:
                if exc.reason.startswith("no protein FASTA records"):
                    continue  # a skipped nucleic-acid record (the warning says so)
                errors.append((start + 1, str(exc)))
    _emit_warnings(caught, log)
    return records, errors


def _unique_names(targets: list[Target], log) -> None:
    from ..data.names import unique_name

    seen: dict[str, int] = {}
    for t in targets:
        new = unique_name(t.name, seen)
        if new != t.name:
            log(f"warning: {t.source}: record '{t.name}' repeats an id of this run; its outputs are named '{new}'")
            t.name = new


def _msa_files_in_dir(msa_dir: str, name: str) -> list[str]:
    found = []
    for suffix in MSA_SUFFIXES:
        for candidate in (f"{name}{suffix}", f"{name}{suffix}.gz"):
            path = os.path.join(msa_dir, candidate)
            if os.path.isfile(path):
                found.append(path)
    folder = os.path.join(msa_dir, name)
    if not found and os.path.isdir(folder):  # AF2/OpenFold chain folder: AF2's merge order
        from ..data.alignment_layout import alignment_files
        found = [str(p) for p, _ in alignment_files(folder)]
    return found


def collect_targets(inputs, msa=None, msa_dir=None, log: Callable[[str], None] = print
                    ) -> tuple[list[Target], list[Rejected]]:
    """Parse and validate every input and MSA before any model work.

    Args:
        inputs: a FASTA file, a directory of FASTA files, an ``.a3m``/``.sto`` (first row = query), or
            a list of these.
        msa: one alignment file for a single-target input.
        msa_dir: directory with ``<id>.a3m``/``<id>.sto`` or a folder ``<id>/`` of alignment files.
        log: receives ``error:``/``warning:`` lines as they are found.

    Returns:
        The valid targets (unique names) and one :class:`Rejected` per rejected record or MSA.

    Raises:
        PredictError: no usable input at all, or MSA options that do not fit the input.
    """
    from ..data import InputError, parse_msa
    from ..data.names import sanitize_name

    targets: list[Target] = []
    rejected: list[Rejected] = []

    counter = itertools.count()

    def reject(name: str, message: str, order: Optional[int] = None, length: Optional[int] = None) -> None:
        log(f"error: {message}")
        rejected.append(Rejected(name, message, next(counter) if order is None else order, length))

    for path in _input_files(inputs):
        if _is_msa_file(path):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    parsed = parse_msa(path)
                except InputError as exc:
                    _emit_warnings(caught, log)
                    reject(Path(path).name, str(exc))
                    continue
            _emit_warnings(caught, log)
            if parsed.depth == 0:
                reject(Path(path).name, f"{path}: empty alignment, no query row")
                continue
            query = parsed.query.replace("-", "")
            if len(query) != len(parsed.query):
                reject(Path(path).name, f"{path}:1: record '{parsed.descriptions[0][:40]}': the first row "
                                        "(the query) contains gaps")
                continue
            stem = Path(path[:-3] if path.endswith(".gz") else path).stem
            name = sanitize_name(parsed.descriptions[0], stem)
            targets.append(Target(name, query, parsed.descriptions[0], path, (path,), [parsed],
                                   from_alignment=True, order=next(counter)))
            continue
        records, errors = _read_fasta(path, log)
        items = [(line, 0, message) for line, message in errors] + [(rec.line, 1, rec) for rec in records]
        for _, is_record, item in sorted(items, key=lambda x: (x[0], x[1])):  # file order
            if is_record:
                targets.append(Target(item.name, item.sequence, item.description, f"{path}:{item.line}",
                                      order=next(counter)))
            else:
                reject(_record_of(item) or Path(path).name, item)

    _unique_names(targets, log)

    if msa is not None:
        from_a3m = [t for t in targets if t.from_alignment]
        if from_a3m:
            raise PredictError(f"--msa {msa} given with an alignment input ({from_a3m[0].source}); give one of them")
        if len(targets) + len(rejected) != 1:
            raise PredictError(f"--msa {msa} is for a single target but the input holds "
                               f"{len(targets) + len(rejected)}; use --msa-dir with <record id>.a3m files")
        if not os.path.isfile(os.fspath(msa)):
            raise PredictError(f"{os.fspath(msa)}: MSA file not found")
        for t in targets:
            t.msa_files = (os.fspath(msa),)
    elif msa_dir is not None:
        msa_dir = os.fspath(msa_dir)
        if not os.path.isdir(msa_dir):
            raise PredictError(f"{msa_dir}: --msa-dir is not a directory")
        keep = []
        for t in targets:
            if t.from_alignment:
                keep.append(t)
                continue
            files = _msa_files_in_dir(msa_dir, t.name)
            if not files:
                reject(t.name, f"{t.source}: record '{t.name}': no alignment in {msa_dir} (looked for "
                               f"{t.name}.a3m, {t.name}.sto and a folder {t.name}/)", t.order, len(t.sequence))
                continue
            t.msa_files = tuple(files)
            keep.append(t)
        targets = keep

    valid = []
    for t in targets:
        if t.msa_files and not t.msas:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    t.msas = [parse_msa(f, query=t.sequence) for f in t.msa_files]
                except InputError as exc:
                    _emit_warnings(caught, log)
                    message = str(exc)
                    if exc.record is None:
                        message = f"{message} (MSA for record '{t.name}')"
                    reject(t.name, message, t.order, len(t.sequence))
                    continue
            _emit_warnings(caught, log)
        rows = [t.sequence] + [s for m in t.msas for s in m.sequences]
        t.msa_depth = len(dict.fromkeys(rows))
        t.msas = []  # parsed again when the target runs: a large batch never holds every MSA at once
        valid.append(t)
    return valid, rejected


def _record_of(message: str) -> Optional[str]:
    marker = "record '"
    i = message.find(marker)
    if i < 0:
        return None
    j = message.find("'", i + len(marker))
    return message[i + len(marker):j] if j > 0 else None
