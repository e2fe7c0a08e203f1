"""Kinds of input files as prediction targets: a FASTA file (one target per record; a rejected record
does not hide the others), an ``.a3m``/``.sto`` alignment (its first row is the query) and an
mmCIF/PDB file (one target per protein chain). Which files are read: :mod:`.inputs`; the targets of a
run: :func:`.targets.collect_targets`."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path
from typing import Callable, Optional, Union

from ..data import InputError, parse_fasta, parse_fasta_string, parse_msa, read_structure
from ..data.errors import InputNote
from ..data.fasta import standard_residues, unknown_residue_message
from ..data.formats import FASTA, MSA, STRUCTURE, is_gzip, strip_gzip
from ..data.names import sanitize_name
from ..data.text import NotTextError
from .target import Target

__all__ = ["TARGETS_OF", "emit_warnings"]


def emit_warnings(caught, log) -> None:
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
            emit_warnings(caught, log)
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
    emit_warnings(caught, log)
    return records, errors


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
            emit_warnings(caught, log)
            return [(Path(path).name, str(exc))]
    emit_warnings(caught, log)
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
TARGETS_OF: dict[str, Callable[[str, Callable[[str], None]], list[_Item]]] = {
    FASTA: _fasta_targets,
    MSA: _alignment_target,
    STRUCTURE: _structure_targets,
}


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
            emit_warnings(caught, log)
            return [], str(exc) if isinstance(exc, InputError) else f"{path}: cannot read structure ({exc})"
    emit_warnings(caught, log)
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
