"""FASTA parser for protein inputs (Biopython underneath), returning frozen records.

:func:`parse_fasta` / :func:`parse_fasta_string` give one :class:`FastaRecord` per record. Records
are split by Biopython's ``SimpleFastaParser`` (see :mod:`.text`); this module adds the rules a
structure predictor needs and reports every rejection with file, record and 1-based line:column.

FASTA rules: wrapped lines, blank lines, CRLF and a missing final newline are accepted; ``;``,
``#`` and ``!`` lines are comments (Pearson/BLAST conventions); lower case is upper-cased with a
notice; one trailing ``*`` is stripped with a note; ``X`` is unknown (a warning lists its
positions); ``U``->``C``, ``O``->``K`` and ``B``/``Z``/``J``->``X`` are replaced
(:func:`standard_residues`) with one note per record listing the letters and positions. Every
record is classified (protein / nucleic / other, :mod:`.molecule`)
before its letters are checked; non-protein records (``mol:na``, Boltz ``|dna``/``|smiles``, or
only ``ACGTUN``) are skipped with one warning each. With ``allow_chain_breaks`` an empty chain in
the ``:`` complex syntax (``A::B``, a leading or trailing ``:``) is an error naming the chain.
Errors: gap characters, an internal ``*``, digits or other symbols, an empty record, non-comment
text before the first header, an empty file. Record names are the first header token sanitised for file names
(``[A-Za-z0-9._-]``,
at most 64 characters, :mod:`.names`); duplicates get ``_2``, ``_3``... with a warning; the full
header is kept.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Iterable

from .errors import InputError, note_input, warn_input
from .molecule import NUCLEIC, PROTEIN, classify_record, nucleic_hint
from .names import NAME_MAX, sanitize_name, unique_name
from .text import check_file, describe_char, open_text, split_records

__all__ = [
    "FastaRecord",
    "NONSTANDARD",
    "parse_fasta",
    "parse_fasta_string",
    "empty_chains",
    "standard_residues",
    "unknown_residue_message",
]

_STANDARD = frozenset("ARNDCQEGHILKMFPSTWYV")
#: Letters read as another residue (AF2's reading of a query): selenocysteine ``U`` as ``C``, pyrrolysine
#: ``O`` as ``K``, the ambiguous ``B`` (D or N), ``Z`` (E or Q) and ``J`` (I or L) as unknown ``X``.
NONSTANDARD = {"U": "C", "O": "K", "B": "X", "Z": "X", "J": "X"}
_MAPPED = NONSTANDARD
_REPLACE = str.maketrans(NONSTANDARD)
_ACCEPTED = _STANDARD | {"X"} | set(_MAPPED)


def standard_residues(sequence: str, limit: int = 20) -> tuple[str, str | None]:
    """``sequence`` (upper case) with the :data:`NONSTANDARD` letters replaced, and one sentence naming
    each replaced letter with its 1-based position (at most ``limit`` listed), e.g.
    ``"non-standard residues replaced: J11->X"``; ``None`` when there is none."""
    replaced = sequence.translate(_REPLACE)
    if replaced == sequence:
        return sequence, None
    mapped = [(k + 1, c, _MAPPED[c]) for k, c in enumerate(sequence) if c in _MAPPED]
    listed = ", ".join(f"{c}{k}->{m}" for k, c, m in mapped[:limit])
    more = f" and {len(mapped) - limit} more" if len(mapped) > limit else ""
    return replaced, f"non-standard residues replaced: {listed}{more}"


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


def empty_chains(sequence: str) -> list[tuple[int, int, int]]:
    """Empty chains of ColabFold's ``:`` complex syntax (``A::B``, a leading or trailing ``:``).

    Returns ``(chain number, number of chains, 0-based index of the ':' next to it)`` per empty
    chain (1-based chain numbers), ``[]`` when every chain has residues or there is no ``:``.
    """
    if ":" not in sequence:
        return []
    chains = sequence.split(":")
    out, start = [], 0
    for k, chain in enumerate(chains):
        if not chain:
            out.append((k + 1, len(chains), start if k < len(chains) - 1 else start - 1))
        start += len(chain) + 1
    return out


def _ranges(positions: list[int]) -> str:
    """``[1, 31, 32, 33]`` -> ``"1, 31-33"`` (1-based positions)."""
    parts, k = [], 0
    while k < len(positions):
        j = k
        while j + 1 < len(positions) and positions[j + 1] == positions[j] + 1:
            j += 1
        parts.append(str(positions[k]) if j == k else f"{positions[k]}-{positions[j]}")
        k = j + 1
    return ", ".join(parts)


def unknown_residue_message(sequence: str, limit: int = 30) -> str | None:
    """The warning for ``X`` in a query: their 1-based positions (runs as ranges, at most ``limit``
    runs), or ``None`` without X."""
    positions = [k + 1 for k, c in enumerate(sequence) if c == "X"]
    if not positions:
        return None
    listed = _ranges(positions)
    runs = listed.split(", ")
    if len(runs) > limit:
        listed = ", ".join(runs[:limit]) + f" and {len(runs) - limit} more runs"
    return (
        f"unknown residue 'X' at position{'s' if len(positions) > 1 else ''} {listed} ({len(positions)} of "
        f"{len(sequence)}): modelled as UNK, written with backbone atoms N, CA, C, O only"
    )


def _bad_character(upper: str, k: int, allow_chain_breaks: bool) -> str:
    ch = upper[k]
    if ch == ":":
        empty = empty_chains(upper)
        extra = f"; chain {empty[0][0]} of {empty[0][1]} is also empty" if empty else ""
        return (
            "':' chain separator (ColabFold complex syntax) is not supported by the monomer pipeline; "
            f"give one chain per record{extra}"
        )
    if ch == "*":
        return "'*' (stop) inside the sequence"
    if ch in "-.":
        return f"gap character {ch!r} in a FASTA input (alignments go in an .a3m file)"
    hint = nucleic_hint(upper)
    if ch.isdigit():
        return f"digit {ch!r} in a protein sequence{hint}"
    return f"invalid character {describe_char(ch)} in a protein sequence (expected A-Z){hint}"


def _fasta_from_lines(
    lines: Iterable[str], path: str, *, skip_nucleic: bool, allow_chain_breaks: bool
) -> tuple[FastaRecord, ...]:
    tracked, raw = split_records(lines)
    if tracked.preamble is not None:
        number, text = tracked.preamble
        raise InputError(
            f"text before the first FASTA header ('>'): {text.strip()[:30]!r}", file=path, line=number, column=1
        )
    if not raw:
        raise InputError("empty file: no FASTA records", file=path)
    allowed = _ACCEPTED | {":"} if allow_chain_breaks else _ACCEPTED
    out: list[FastaRecord] = []
    names: dict[str, int] = {}
    skipped = 0
    for i, (title, seq) in enumerate(raw):
        line = tracked.headers[i]
        name = sanitize_name(title, f"record_{i + 1}")
        if not seq:
            raise InputError("empty record: header without a sequence", file=path, record=name, line=line)
        # The molecule kind is decided before any letter is validated (see .molecule).
        kind, why = classify_record(title, seq)
        if kind != PROTEIN:
            what = "nucleic-acid" if kind == NUCLEIC else "non-protein"
            if not skip_nucleic:
                raise InputError(f"{what} record ({why}) in a protein-only input", file=path, record=name, line=line)
            warn_input(
                f"skipping {what} record ({why}): the pipeline predicts proteins only",
                file=path,
                record=name,
                line=line,
                stacklevel=4,
            )
            skipped += 1
            continue
        if seq.endswith("*"):
            seq = seq[:-1]
            if not seq:
                raise InputError("empty record: only a '*'", file=path, record=name, line=line)
            note_input("one trailing '*' (stop) removed", file=path, record=name, line=line, stacklevel=4)
        upper = seq.upper()
        empty = empty_chains(upper) if allow_chain_breaks else []
        if empty:
            number, total, k = empty[0]
            where = tracked.position(i, k)
            raise InputError(
                f"empty chain {number} of {total} in the ':' complex syntax (residue {k + 1} is "
                "a ':' with no residues on one side)",
                file=path,
                record=name,
                line=where[0],
                column=where[1],
            )
        bad = next((k for k, c in enumerate(upper) if c not in allowed), None)
        if bad is not None:
            where = tracked.position(i, bad)
            raise InputError(
                f"{_bad_character(upper, bad, allow_chain_breaks)} (residue {bad + 1})",
                file=path,
                record=name,
                line=where[0],
                column=where[1],
            )
        if upper != seq:
            warn_input("lower-case letters upper-cased", file=path, record=name, line=line, stacklevel=4)
        upper, replaced = standard_residues(upper)
        if replaced:
            note_input(replaced, file=path, record=name, line=line, stacklevel=4)
        unknown = unknown_residue_message(seq.upper())
        if unknown:
            warn_input(unknown, file=path, record=name, line=line, stacklevel=4)
        new = unique_name(name, names, NAME_MAX)
        if new != name:
            warn_input(f"duplicate record name; renamed to '{new}'", file=path, record=name, line=line, stacklevel=4)
            name = new
        out.append(FastaRecord(name=name, description=title, sequence=upper, line=line, path=path))
    if not out:
        raise InputError(
            f"no protein FASTA records (all {skipped} records are nucleic-acid or other non-protein records)", file=path
        )
    return tuple(out)


def parse_fasta(path, *, skip_nucleic: bool = True, allow_chain_breaks: bool = False) -> tuple[FastaRecord, ...]:
    """Parse a protein FASTA file (optionally ``.gz``) under the rules of the module docstring.

    Args:
        path: the file.
        skip_nucleic: skip (one warning each) instead of rejecting non-protein records (nucleic acids,
            ligands; :mod:`.molecule`).
        allow_chain_breaks: keep ColabFold's ``:`` chain separator in ``sequence`` (multimer use);
            the monomer pipeline rejects it.

    Returns:
        The protein records in file order.

    Raises:
        InputError: missing, empty or binary file (:func:`~.text.check_file`), text before the first
            header, an empty record, no protein record, or an invalid character; the message names
            file, record and line:column.
    """
    path = check_file(path, "FASTA text")
    with open_text(path) as handle:
        return _fasta_from_lines(handle, path, skip_nucleic=skip_nucleic, allow_chain_breaks=allow_chain_breaks)


def parse_fasta_string(
    text: str, *, label: str = "<string>", skip_nucleic: bool = True, allow_chain_breaks: bool = False
) -> tuple[FastaRecord, ...]:
    """:func:`parse_fasta` for in-memory text; ``label`` stands in for the path in messages."""
    return _fasta_from_lines(io.StringIO(text), label, skip_nucleic=skip_nucleic, allow_chain_breaks=allow_chain_breaks)
