"""Prediction targets: collect FASTA records / alignment inputs / structure chains and their MSAs, and
validate all of them before any model work (which files are read: :mod:`.inputs`).

A FASTA file goes through :func:`alphafold_mem.data.parse_fasta` whole; only if it is rejected is it
split at its headers so that every other record still runs. MSAs are parsed once here to validate
them (count their rows, compute Neff at 80 % identity, :mod:`alphafold_mem.data.neff`) and parsed
again when the target runs, so a large batch never holds all of its alignments in memory. Every
rejection is one line naming file, record and position. An MSA that holds only the query gets the
single-sequence warning; ``min_msa_depth`` rejects targets with fewer distinct rows.
"""

from __future__ import annotations

import gzip
import itertools
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from ..data import InputError, parse_fasta, parse_fasta_string, parse_msa, read_structure
from ..data.alignment_layout import alignment_files, msa_row_cap
from ..data.errors import InputNote
from ..data.fasta import standard_residues, unknown_residue_message
from ..data.formats import FASTA, GZIP_SUFFIX, MSA, STRUCTURE, is_gzip, strip_gzip
from ..data.names import sanitize_name, unique_name
from ..data.neff import neff
from ..data.text import NotTextError
from .errors import PredictError
from .inputs import FASTA_SUFFIXES, MSA_SUFFIXES, input_files

__all__ = [
    "PredictError",
    "Target",
    "Rejected",
    "collect_targets",
    "measure_msa",
    "measure_searched",
    "FASTA_SUFFIXES",
    "MSA_SUFFIXES",
    "DESCRIPTION_CHARS",
    "DESCRIPTION_FULL_CHARS",
    "description_fields",
]

#: Characters of a header kept in the scores JSON's ``description`` (:func:`description_fields`).
DESCRIPTION_CHARS = 200
#: Characters of a longer header kept in ``description_full``.
DESCRIPTION_FULL_CHARS = 10_000


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
        neff: Neff at 80 % identity of those rows (:class:`alphafold_mem.data.neff.NeffResult`).
        order: position among the run's inputs (for the summary table).
        provenance: what produced (will produce) the outputs (:mod:`.provenance`), set by the run.
        record_paths: write local paths (inputs, weights) into the output files.
        input_id: the record id as the input gives it (first header token, ``<file stem>_<chain>``),
            before :func:`alphafold_mem.data.names.sanitize_name` made ``name`` from it.
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
    neff: Optional[object] = None
    provenance: dict = field(default_factory=dict, repr=False)
    record_paths: bool = False
    measured_files: tuple = field(default=(), repr=False)
    input_id: Optional[str] = field(default=None, repr=False)

    def description_fields(self) -> dict:
        """The description's fields of the scores JSON (:func:`description_fields`)."""
        return description_fields(self.description)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} more characters]"


def description_fields(description: str) -> dict:
    """A header for the scores JSON, capped: ``{"description": ...}`` with at most
    :data:`DESCRIPTION_CHARS` (200) characters; a longer header is cut there with the marker
    ``" [... N more characters]"`` and comes whole in ``"description_full"`` up to
    :data:`DESCRIPTION_FULL_CHARS` (10,000) characters (cut with the same marker past that), with its
    length in ``"description_length"`` (characters)."""
    if len(description) <= DESCRIPTION_CHARS:
        return {"description": description}
    return {
        "description": _cut(description, DESCRIPTION_CHARS),
        "description_full": _cut(description, DESCRIPTION_FULL_CHARS),
        "description_length": len(description),
    }


@dataclass(frozen=True)
class Rejected:
    """An input rejected before model work: ``message`` is one line naming file, record and position."""

    name: str
    message: str
    order: int
    length: Optional[int] = None


def _emit_warnings(caught, log) -> None:
    for w in caught:
        log(f"{'note' if issubclass(w.category, InputNote) else 'warning'}: {w.message}")


def _read_fasta(path: str, log) -> tuple[list, list[tuple[int, str]]]:
    """All valid records of a FASTA file and ``(header line, error line)`` per rejected record.

    The whole file goes through :func:`alphafold_mem.data.parse_fasta` first; only if it is
    rejected is the file split at its headers and every record parsed on its own (with its real line
    numbers), so that one bad record does not hide the others.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            records = list(parse_fasta(path))
            _emit_warnings(caught, log)
            return records, []
        except NotTextError as exc:  # binary, unreadable: one line for the file, no record to split
            return [], [(0, str(exc))]
        except InputError as exc:
            whole = exc
    opener = gzip.open if is_gzip(path) else open
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
            errors.append(
                (
                    i + 1,
                    str(
                        InputError(
                            f"text before the first FASTA header ('>'): {text[:30]!r}", file=path, line=i + 1, column=1
                        )
                    ),
                )
            )
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
    seen: dict[str, int] = {}
    for t in targets:
        new = unique_name(t.name, seen)
        if new != t.name:
            log(f"warning: {t.source}: record '{t.name}' repeats an id of this run; its outputs are named '{new}'")
            t.name = new


def _msa_files_in_dir(msa_dir: str, name: str) -> list[str]:
    found = []
    for suffix in MSA_SUFFIXES:
        for candidate in (f"{name}{suffix}", f"{name}{suffix}{GZIP_SUFFIX}"):
            path = os.path.join(msa_dir, candidate)
            if os.path.isfile(path):
                found.append(path)
    folder = os.path.join(msa_dir, name)
    if not found and os.path.isdir(folder):  # AF2/OpenFold chain folder: AF2's merge order
        found = [str(p) for p, _ in alignment_files(folder)]
    return found


#: What an input file gives, in file order: a :class:`Target`, or ``(record name, error line)`` for a
#: rejected record.
_Item = Union[Target, tuple[str, str]]


def _fasta_targets(path: str, log) -> list[_Item]:
    """The records of a FASTA file as targets, and its rejected records, in file order."""
    records, errors = _read_fasta(path, log)
    items = [(line, 0, message) for line, message in errors] + [(rec.line, 1, rec) for rec in records]
    out: list[_Item] = []
    for _, is_record, item in sorted(items, key=lambda x: (x[0], x[1])):  # file order
        if is_record:
            token = item.description.split(maxsplit=1)[0] if item.description.strip() else ""
            out.append(Target(item.name, item.sequence, item.description, f"{path}:{item.line}", input_id=token))
        else:
            out.append((_record_of(item) or Path(path).name, item))
    return out


def _alignment_target(path: str, log) -> list[_Item]:
    """An ``.a3m``/``.sto`` input: one target, its first row the query (or its rejection)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            parsed = parse_msa(path)
        except InputError as exc:
            _emit_warnings(caught, log)
            return [(Path(path).name, str(exc))]
    _emit_warnings(caught, log)
    if parsed.depth == 0:
        return [(Path(path).name, f"{path}: empty alignment, no query row")]
    query = parsed.query.replace("-", "")
    if len(query) != len(parsed.query):
        return [
            (
                Path(path).name,
                f"{path}:1: record '{parsed.descriptions[0][:40]}': the first row (the query) contains gaps",
            )
        ]
    description = parsed.descriptions[0]
    name = sanitize_name(description, Path(strip_gzip(path)).stem)
    _warn_unknown(query, f"{path}:1: record '{name}'", log)
    query, replaced = standard_residues(query.upper())  # J/B/Z/U/O read as a FASTA query's, with a note
    if replaced:
        log(f"note: {path}:1: record '{name}': {replaced}")
    token = description.split(maxsplit=1)[0] if description.strip() else ""
    return [Target(name, query, description, path, (path,), [parsed], from_alignment=True, input_id=token)]


def _structure_targets(path: str, log) -> list[_Item]:
    found, problem = _read_structure_targets(path, log)
    return found + ([(Path(path).name, problem)] if problem else [])


#: How each kind of input file (:func:`.inputs.input_files`, :mod:`alphafold_mem.data.formats`) becomes
#: targets.
_TARGETS_OF: dict[str, Callable[[str, Callable[[str], None]], list[_Item]]] = {
    FASTA: _fasta_targets,
    MSA: _alignment_target,
    STRUCTURE: _structure_targets,
}


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _log_renames(targets: list[Target], log) -> None:
    """One ``note:`` line per target whose record id was changed to make a file name."""
    for t in targets:
        if t.input_id is not None and sanitize_name(t.input_id, "") != t.input_id:
            log(
                f"note: {t.source}: record '{_shown(t.input_id)}' written as '{t.name}' (output file names "
                "keep only the letters A-Z a-z, digits and . _ -, at most 64 characters)"
            )


def collect_targets(
    inputs,
    msa=None,
    msa_dir=None,
    log: Callable[[str], None] = print,
    *,
    single_sequence: bool = False,
    min_msa_depth: int = 0,
) -> tuple[list[Target], list[Rejected]]:
    """Parse and validate every input and MSA before any model work.

    Args:
        inputs: a FASTA file, an ``.a3m``/``.sto`` (first row = query), an mmCIF/PDB file (one target
            per protein chain), a directory of such files (:mod:`.inputs`), or a list of these.
        msa: one alignment file for a single-target input.
        msa_dir: directory with ``<id>.a3m``/``<id>.sto`` or a folder ``<id>/`` of alignment files.
        log: receives ``error:``/``warning:``/``note:`` lines as they are found (a ``note:`` per record
            id changed to make a file name: ``record 'X' written as 'Y'``).
        single_sequence: ignore alignments (alignment inputs give their query only).
        min_msa_depth: reject targets whose MSA has fewer distinct rows (query included; 1 without
            an MSA).

    Returns:
        The valid targets (unique names) and one :class:`Rejected` per rejected record or MSA.

    Raises:
        PredictError: no usable input at all, or MSA options that do not fit the input.
    """
    targets: list[Target] = []
    rejected: list[Rejected] = []
    counter = itertools.count()

    def reject(name: str, message: str, order: Optional[int] = None, length: Optional[int] = None) -> None:
        log(f"error: {message}")
        rejected.append(Rejected(name, message, next(counter) if order is None else order, length))

    for path, kind in input_files(inputs, log):
        for item in _TARGETS_OF[kind](path, log):
            if isinstance(item, Target):
                item.order = next(counter)
                targets.append(item)
            else:
                reject(*item)
    _log_renames(targets, log)
    _unique_names(targets, log)
    targets = _attach_msas(targets, msa, msa_dir, len(rejected), reject)
    valid = []
    for t in targets:
        problem = _read_msas(t, single_sequence, log) or measure_msa(t, min_msa_depth, log)
        if problem:
            reject(t.name, problem, t.order, len(t.sequence))
        else:
            valid.append(t)
    return valid, rejected


def _attach_msas(targets: list[Target], msa, msa_dir, n_rejected: int, reject) -> list[Target]:
    """Give the targets their ``--msa`` file or ``--msa-dir`` alignments; those without one in
    ``msa_dir`` are rejected. Alignment inputs keep their own."""
    if msa is not None:
        from_a3m = [t for t in targets if t.from_alignment]
        if from_a3m:
            raise PredictError(f"--msa {msa} given with an alignment input ({from_a3m[0].source}); give one of them")
        if len(targets) + n_rejected != 1:
            raise PredictError(
                f"--msa {msa} is for a single target but the input holds "
                f"{len(targets) + n_rejected}; use --msa-dir with <record id>.a3m files"
            )
        if not os.path.isfile(os.fspath(msa)):
            raise PredictError(f"{os.fspath(msa)}: MSA file not found")
        for t in targets:
            t.msa_files = (os.fspath(msa),)
        return targets
    if msa_dir is None:
        return targets
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
            reject(
                t.name,
                f"{t.source}: record '{t.name}': no alignment in {msa_dir} (looked for "
                f"{t.name}.a3m, {t.name}.sto and a folder {t.name}/)",
                t.order,
                len(t.sequence),
            )
            continue
        t.msa_files = tuple(files)
        keep.append(t)
    return keep


def _read_msas(t: Target, single_sequence: bool, log) -> Optional[str]:
    """Parse ``t``'s MSA files (none with ``single_sequence``) into ``t.msas``; the error line of the
    first that does not parse, else None."""
    if single_sequence:
        t.msa_files, t.msas = (), []
    if not t.msa_files or t.msas:
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            t.msas = [parse_msa(f, query=t.sequence, max_sequences=msa_row_cap(f)) for f in t.msa_files]
        except InputError as exc:
            _emit_warnings(caught, log)
            message = str(exc)
            return message if exc.record is not None else f"{message} (MSA for record '{t.name}')"
    _emit_warnings(caught, log)
    return None


def measure_searched(
    targets: list[Target], min_msa_depth: int, log: Callable[[str], None] = print
) -> tuple[list[Target], list[Rejected]]:
    """After a search stage gave targets their MSAs: depth, Neff and ``min_msa_depth`` again
    (:func:`measure_msa`), as :func:`collect_targets` does for given MSAs; targets whose MSA files
    were measured already are not read again. An MSA that does not parse rejects its target."""
    kept, rejected = [], []
    for t in targets:
        try:
            problem = (
                measure_msa(t, min_msa_depth, log)
                if t.measured_files != t.msa_files
                else _depth_problem(t, min_msa_depth)
            )
        except InputError as exc:
            problem = str(exc) if exc.record else f"{exc} (MSA for record '{t.name}')"
        if problem:
            log(f"error: {problem}")
            rejected.append(Rejected(t.name, problem, t.order, len(t.sequence)))
        else:
            kept.append(t)
    return kept, rejected


def measure_msa(t: Target, min_msa_depth: int = 0, log: Callable[[str], None] = print) -> Optional[str]:
    """Set ``t.msa_depth`` (distinct rows, query included, AF2's per-file row caps) and ``t.neff``
    from ``t.msas`` (parsed here from ``t.msa_files`` when empty), warn when an MSA holds only the
    query, and return the rejection message when the depth is below ``min_msa_depth`` (else None).

    Raises:
        InputError: an MSA file that does not parse (only when ``t.msas`` is empty).
    """
    if t.msa_files and not t.msas:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reported when the file was first read
            t.msas = [parse_msa(f, query=t.sequence, max_sequences=msa_row_cap(f)) for f in t.msa_files]
    queries = [standard_residues(m.query)[0] for m in t.msas if m.depth]  # a J in row 0 is the query's X
    rows = list(dict.fromkeys([t.sequence] + queries + [s for m in t.msas for s in m.sequences[1:]]))
    t.msa_depth = len(rows)
    t.neff = neff(rows)
    t.msas = []  # parsed again when the target runs: a large batch never holds every MSA at once
    t.measured_files = t.msa_files
    if t.msa_files and t.msa_depth == 1:
        log(
            f"warning: {t.source}: record '{t.name}': the MSA ({', '.join(Path(f).name for f in t.msa_files)}) "
            "holds only the query (depth 1): this is single-sequence mode (expect low confidence)"
        )
    return _depth_problem(t, min_msa_depth)


def _depth_problem(t: Target, min_msa_depth: int) -> Optional[str]:
    if t.msa_depth < min_msa_depth:
        return (
            f"{t.source}: record '{t.name}': MSA depth {t.msa_depth} (Neff {t.neff.describe()}) "
            f"is below --min-msa-depth {min_msa_depth}"
        )
    return None


def _warn_unknown(sequence: str, where: str, log) -> None:
    message = unknown_residue_message(sequence)
    if message:
        log(f"warning: {where}: {message}")


def _read_structure_targets(path: str, log) -> tuple[list[Target], Optional[str]]:
    """One target per protein chain of an mmCIF/PDB file (its SEQRES, or the modelled residues when
    the file has none); ``(targets, error line or None)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            structure = read_structure(path)
        except (InputError, OSError, ValueError) as exc:
            _emit_warnings(caught, log)
            return [], str(exc) if isinstance(exc, InputError) else f"{path}: cannot read structure ({exc})"
    _emit_warnings(caught, log)
    for chain_id, reason in structure.dropped:
        log(f"warning: {path}: record '{chain_id}': protein chain not predicted: {reason}")
    out = []
    stem = Path(strip_gzip(path)).stem
    for chain in structure.chains.values():
        token = f"{stem}_{chain.chain_id}"
        name = sanitize_name(token, f"chain_{chain.chain_id}")
        _warn_unknown(chain.sequence, f"{path}: record '{name}'", log)
        description = f"{structure.pdb_id} chain {chain.chain_id} ({Path(path).name})"
        out.append(Target(name, chain.sequence, description, path, input_id=token))
    return out, None


def _record_of(message: str) -> Optional[str]:
    marker = "record '"
    i = message.find(marker)
    if i < 0:
        return None
    j = message.find("'", i + len(marker))
    return message[i + len(marker) : j] if j > 0 else None
