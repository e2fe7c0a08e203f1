"""FASTA parser for protein inputs (Biopython underneath), returning frozen records.

:func:`parse_fasta` / :func:`parse_fasta_string` give one :class:`FastaRecord` per record. Records
are split by Biopython's ``SimpleFastaParser`` (see :mod:`.text`); this module adds the rules a
structure predictor needs and reports every rejection with file, record and 1-based line:column.

FASTA rules: wrapped lines, blank lines, CRLF and a missing final newline are accepted; ``;``,
``#`` and ``!`` lines are comments (Pearson/BLAST conventions); lower case is upper-cased with a
notice; one trailing ``*`` is stripped; ``X`` is unknown; ``U``->``C``, ``O``->``K`` and
``B``/``Z``/``J``->``X`` are mapped with a warning listing the positions; nucleic-acid records
(``mol:na`` or only ``ACGTUN``) are skipped with a warning. Errors: gap characters, an internal
``*``, digits or other symbols, an empty record, non-comment text before the first header, an
empty file. Record names are the first header token sanitised for file names (``[A-Za-z0-9._-]``,
at most 64 characters, :mod:`.names`); duplicates get ``_2``, ``_3``... with a warning; the full
header is kept.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Iterable

from .errors import InputError, warn_input
from .names import NAME_MAX, sanitize_name, unique_name
from .text import check_file, describe_char, open_text, split_records

__all__ = ["FastaRecord", "parse_fasta", "parse_fasta_string"]

_STANDARD = frozenset("ARNDCQEGHILKMFPSTWYV")
_MAPPED = {"U": "C", "O": "K", "B": "X", "Z": "X", "J": "X"}
_ACCEPTED = _STANDARD | {"X"} | set(_MAPPED)
_NUCLEIC = frozenset("ACGTUN")


@dataclass(frozen=True)
class FastaRecord:
    """One protein sequence from a FASTA file.

    Attributes:
        name: sanitised record id (see :func:`sanitize_name`), unique within the file.
        description: the whole header line without ``>`` and trailing whitespace.
        sequence: upper-case one-letter codes (20 standard + X), length ``N_res``; ``:`` separates
            chains only when parsed with ``allow_chain_breaks=True``.
        line: 1-based line number of the header in ``path``.
        path: the source file, or a label such as ``"<string>"`` for in-memory text.
    """

    name: str
    description: str
    sequence: str
    line: int
    path: str | None = None

    def __len__(self) -> int:
        return len(self.sequence)


def _looks_nucleic(description: str, sequence: str) -> bool:
    if "mol:na" in description.split():
        return True
    return len(sequence) >= 10 and set(sequence) <= _NUCLEIC


def _fasta_from_lines(lines: Iterable[str], path: str, *, skip_nucleic: bool,
                      allow_chain_breaks: bool) -> tuple[FastaRecord, ...]:
    tracked, raw = split_records(lines)
    if tracked.preamble is not None:
        number, text = tracked.preamble
        raise InputError(f"text before the first FASTA header ('>'): {text.strip()[:30]!r}",
                         file=path, line=number, column=1)
    if not raw:
        raise InputError("empty file: no FASTA records", file=path)
    allowed = _ACCEPTED | {":"} if allow_chain_breaks else _ACCEPTED
    out: list[FastaRecord] = []
    names: dict[str, int] = {}
    for i, (title, seq) in enumerate(raw):
        line = tracked.headers[i]
        name = sanitize_name(title, f"record_{i + 1}")
        if not seq:
            raise InputError("empty record: header without a sequence", file=path, record=name, line=line)
        if seq.endswith("*"):
            seq = seq[:-1]
        upper = seq.upper()
        bad = next((k for k, c in enumerate(upper) if c not in allowed), None)
        if bad is not None:
            ch = upper[bad]
            where = tracked.position(i, bad)
            if ch == ":":
                reason = ("':' chain separator (ColabFold complex syntax) is not supported by the "
                          "monomer pipeline; give one chain per record")
            elif ch == "*":
                reason = "'*' (stop) inside the sequence"
            elif ch in "-.":
                reason = f"gap character {ch!r} in a FASTA input (alignments go in an .a3m file)"
            elif ch.isdigit():
                reason = f"digit {ch!r} in a protein sequence"
            else:
                reason = f"invalid character {describe_char(ch)} in a protein sequence (expected A-Z)"
            raise InputError(f"{reason} (residue {bad + 1})", file=path, record=name,
                             line=where[0], column=where[1])
        if _looks_nucleic(title, upper):
            if not skip_nucleic:
                raise InputError("nucleic-acid record in a protein-only input", file=path, record=name,
                                 line=line)
            warn_input("skipping nucleic-acid record (protein-only pipeline)", file=path, record=name,
                       line=line, stacklevel=4)
            continue
        if upper != seq:
            warn_input("lower-case letters upper-cased", file=path, record=name, line=line, stacklevel=4)
        mapped = [(k + 1, c, _MAPPED[c]) for k, c in enumerate(upper) if c in _MAPPED]
        if mapped:
            listed = ", ".join(f"{c}{k}->{m}" for k, c, m in mapped[:20])
            more = f" and {len(mapped) - 20} more" if len(mapped) > 20 else ""
            warn_input(f"non-standard residues mapped: {listed}{more}", file=path, record=name, line=line,
                       stacklevel=4)
            upper = "".join(_MAPPED.get(c, c) for c in upper)
        new = unique_name(name, names, NAME_MAX)
        if new != name:
            warn_input(f"duplicate record name; renamed to '{new}'", file=path, record=name, line=line,
                       stacklevel=4)
            name = new
        out.append(FastaRecord(name=name, description=title, sequence=upper, line=line, path=path))
    if not out:
        raise InputError("no protein FASTA records (only nucleic-acid records)", file=path)
    return tuple(out)


def parse_fasta(path, *, skip_nucleic: bool = True, allow_chain_breaks: bool = False
                ) -> tuple[FastaRecord, ...]:
    """Parse a protein FASTA file (optionally ``.gz``) under the rules of the module docstring.

    Args:
        path: the file.
        skip_nucleic: skip (warn) instead of rejecting nucleic-acid records.
        allow_chain_breaks: keep ColabFold's ``:`` chain separator in ``sequence`` (multimer use);
            the monomer pipeline rejects it.

    Returns:
        The protein records in file order.

    Raises:
        InputError: missing or empty file, text before the first header, an empty record, no protein
            record, or an invalid character; the message names file, record and line:column.
    """
    path = check_file(path)
    with open_text(path) as handle:
        return _fasta_from_lines(handle, path, skip_nucleic=skip_nucleic,
                                 allow_chain_breaks=allow_chain_breaks)


def parse_fasta_string(text: str, *, label: str = "<string>", skip_nucleic: bool = True,
                       allow_chain_breaks: bool = False) -> tuple[FastaRecord, ...]:
    """:func:`parse_fasta` for in-memory text; ``label`` stands in for the path in messages."""
    return _fasta_from_lines(io.StringIO(text), label, skip_nucleic=skip_nucleic,
                             allow_chain_breaks=allow_chain_breaks)
