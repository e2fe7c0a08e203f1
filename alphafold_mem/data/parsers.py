"""FASTA, A3M and Stockholm parsers (Biopython underneath), returning frozen records.

* :func:`parse_fasta` / :func:`parse_fasta_string`: protein inputs, one :class:`FastaRecord` per
  record. Records are split by Biopython's ``SimpleFastaParser``; this module adds the rules a
  structure predictor needs and reports every rejection with file, record and 1-based line:column.
* :func:`parse_a3m`, :func:`parse_stockholm`, :func:`parse_msa`: alignments as an :class:`Msa`: the
  aligned rows restricted to the query's columns plus AF2's deletion matrix (Jumper et al. 2021,
  Suppl. 1.2.2 and Table 1: ``deletion_matrix[i, j]`` = residues of row ``i`` inserted relative to
  the query immediately before query column ``j``). Stockholm files are read with ``Bio.AlignIO``.

FASTA rules: wrapped lines, blank lines, CRLF and a missing final newline are accepted; ``;``,
``#`` and ``!`` lines are comments (Pearson/BLAST conventions); lower case is upper-cased with a
notice; one trailing ``*`` is stripped; ``X`` is unknown; ``U``->``C``, ``O``->``K`` and
``B``/``Z``/``J``->``X`` are mapped with a warning listing the positions; nucleic-acid records
(``mol:na`` or only ``ACGTUN``) are skipped with a warning. Errors: gap characters, an internal
``*``, digits or other symbols, an empty record, non-comment text before the first header, an
empty file. Record names are the first header token sanitised for file names (``[A-Za-z0-9._-]``,
at most 64 characters); duplicates get ``_2``, ``_3``... with a warning; the full header is kept.

A3M rules: lower-case letters are insertions (deletion matrix), ``.`` is dropped, ``#`` lines are
ignored, wrapped rows are joined, non-printable bytes are rejected with their position, rows whose
match-column count differs from the query's are listed by number, exact duplicate rows are
removed (first kept), and with ``query=`` the first row must equal the query. An empty alignment
gives a query-only MSA (with ``query=``) or an empty one, with a warning.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from Bio import AlignIO
from Bio.SeqIO.FastaIO import SimpleFastaParser

from .errors import InputError, warn_input

__all__ = [
    "FastaRecord", "Msa", "parse_fasta", "parse_fasta_string", "parse_a3m", "parse_a3m_string",
    "parse_stockholm", "parse_msa", "sanitize_name", "unique_name",
]

_STANDARD = frozenset("ARNDCQEGHILKMFPSTWYV")
_MAPPED = {"U": "C", "O": "K", "B": "X", "Z": "X", "J": "X"}
_ACCEPTED = _STANDARD | {"X"} | set(_MAPPED)
_NUCLEIC = frozenset("ACGTUN")
_COMMENT_STARTS = (";", "#", "!")
_NAME_MAX = 64


def unique_name(name: str, seen: dict[str, int], max_len: int | None = None) -> str:
    """``name`` if ``seen`` does not hold it yet, else ``<name>_<k>`` with the next free k >= 2 (the
    stem cut to ``max_len - 4`` characters when ``max_len`` is given). Records the result in ``seen``
    (name -> last number used)."""
    if name in seen:
        stem = name if max_len is None else name[:max_len - 4]
        seen[name] += 1
        new = f"{stem}_{seen[name]}"
        while new in seen:
            seen[name] += 1
            new = f"{stem}_{seen[name]}"
        name = new
    seen.setdefault(name, 1)
    return name


def sanitize_name(title: str, fallback: str) -> str:
    """First whitespace token of a header, reduced to ``[A-Za-z0-9._-]`` (others -> ``_``), at most
    64 characters; ``fallback`` when nothing is left."""
    token = title.split(maxsplit=1)[0] if title.strip() else ""
    token = re.sub(r"[^A-Za-z0-9._-]", "_", token)[:_NAME_MAX].strip("._")
    return token or fallback


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


@dataclass(frozen=True, eq=False)
class Msa:
    """A multiple sequence alignment restricted to the query's columns (AF2 Suppl. 1.2.2).

    Attributes:
        sequences: ``N_seq`` aligned rows of length ``N_res`` (upper-case letters and ``-``);
            row 0 is the query. May be empty (``N_seq = 0``) for an empty alignment file.
        deletion_matrix: ``[N_seq, N_res]`` int32, residues deleted before each column.
        descriptions: ``N_seq`` header strings.
        path: source file or ``None``.
    """

    sequences: tuple[str, ...]
    deletion_matrix: np.ndarray
    descriptions: tuple[str, ...]
    path: str | None = None

    def __post_init__(self):
        dm = np.asarray(self.deletion_matrix, dtype=np.int32)
        if dm.ndim != 2 or dm.shape[0] != len(self.sequences):
            raise ValueError(f"deletion_matrix shape {dm.shape} does not match {len(self.sequences)} sequences")
        dm.setflags(write=False)
        object.__setattr__(self, "deletion_matrix", dm)

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def depth(self) -> int:
        """``N_seq``."""
        return len(self.sequences)

    @property
    def length(self) -> int:
        """``N_res`` (query columns)."""
        return len(self.sequences[0]) if self.sequences else 0

    @property
    def query(self) -> str:
        """The first row ('' for an empty MSA)."""
        return self.sequences[0] if self.sequences else ""

    def truncate(self, max_sequences: int) -> "Msa":
        """The first ``max_sequences`` rows (AF2 keeps the best hits, which come first)."""
        n = max(1, int(max_sequences))
        return Msa(self.sequences[:n], self.deletion_matrix[:n], self.descriptions[:n], self.path)


# ----------------------------------------------------------------------------------------------
# Line tracking around Biopython's record splitter


class _TrackedLines:
    """Feeds lines to ``SimpleFastaParser`` while remembering where every record came from.

    Comment lines (``;``, ``#``, ``!`` in column 1) are dropped; CRLF endings are normalised.
    ``headers[i]`` is the 1-based line of record ``i``'s header and ``body[i]`` the list of
    ``(line_number, text)`` of its non-blank sequence lines; ``preamble`` is the first non-blank,
    non-comment line before the first header.
    """

    def __init__(self, lines: Iterable[str]):
        self._lines = lines
        self.headers: list[int] = []
        self.body: list[list[tuple[int, str]]] = []
        self.preamble: tuple[int, str] | None = None

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(self._lines, 1):
            line = line.rstrip("\r\n")
            first = line[:1]
            if first == ">":
                self.headers.append(number)
                self.body.append([])
            elif first and first in _COMMENT_STARTS:
                continue
            elif line.strip():
                if self.headers:
                    self.body[-1].append((number, line))
                elif self.preamble is None:
                    self.preamble = (number, line)
            yield line + "\n"

    def position(self, record: int, index: int) -> tuple[int | None, int | None]:
        """Line and column of character ``index`` (0-based) of ``record``'s joined sequence, counted
        the way ``SimpleFastaParser`` joins lines (trailing whitespace, spaces and CR removed)."""
        k = -1
        for number, text in self.body[record]:
            for column, ch in enumerate(text.rstrip(), 1):
                if ch in " \r":
                    continue
                k += 1
                if k == index:
                    return number, column
        return self.headers[record] if record < len(self.headers) else None, None


def _open_text(path) -> io.TextIOBase:
    path = os.fspath(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return open(path, "r", encoding="utf-8", errors="replace", newline="")


def _check_file(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("file not found", file=path)
    if os.path.isdir(path):
        raise InputError("is a directory, expected a file", file=path)
    return path


def _records(lines: Iterable[str]) -> tuple[_TrackedLines, list[tuple[str, str]]]:
    tracked = _TrackedLines(lines)
    records = list(SimpleFastaParser(iter(tracked)))
    return tracked, records


def _describe_char(ch: str) -> str:
    return repr(ch) if ch.isprintable() else f"non-printable byte 0x{ord(ch):02x}"


# ----------------------------------------------------------------------------------------------
# FASTA


def _looks_nucleic(description: str, sequence: str) -> bool:
    if "mol:na" in description.split():
        return True
    return len(sequence) >= 10 and set(sequence) <= _NUCLEIC


def _fasta_from_lines(lines: Iterable[str], path: str, *, skip_nucleic: bool,
                      allow_chain_breaks: bool) -> tuple[FastaRecord, ...]:
    tracked, raw = _records(lines)
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
                reason = f"invalid character {_describe_char(ch)} in a protein sequence (expected A-Z)"
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
        new = unique_name(name, names, _NAME_MAX)
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
    path = _check_file(path)
    with _open_text(path) as handle:
        return _fasta_from_lines(handle, path, skip_nucleic=skip_nucleic,
                                 allow_chain_breaks=allow_chain_breaks)


def parse_fasta_string(text: str, *, label: str = "<string>", skip_nucleic: bool = True,
                       allow_chain_breaks: bool = False) -> tuple[FastaRecord, ...]:
    """:func:`parse_fasta` for in-memory text; ``label`` stands in for the path in messages."""
    return _fasta_from_lines(io.StringIO(text), label, skip_nucleic=skip_nucleic,
                             allow_chain_breaks=allow_chain_breaks)


# ----------------------------------------------------------------------------------------------
# A3M

_LOWER_A, _LOWER_Z, _UPPER_A, _UPPER_Z = ord("a"), ord("z"), ord("A"), ord("Z")
_DOT, _DASH = ord("."), ord("-")


def _a3m_row(row: str) -> tuple[bytes, np.ndarray, int]:
    """Split an A3M row into match columns and deletion counts.

    Returns ``(aligned_bytes, deletions[int32], first_bad_index)``; ``first_bad_index`` is -1 when
    every character is a letter, ``-`` or ``.``.
    """
    b = np.frombuffer(row.encode("utf-8", errors="replace"), dtype=np.uint8)
    lower = (b >= _LOWER_A) & (b <= _LOWER_Z)
    upper = (b >= _UPPER_A) & (b <= _UPPER_Z)
    invalid = ~(lower | upper | (b == _DASH) | (b == _DOT))
    if invalid.any():
        bad_byte = int(np.argmax(invalid))
        return b"", np.zeros(0, np.int32), len(b[:bad_byte].tobytes().decode("utf-8", errors="replace"))
    keep = upper | (b == _DASH)
    inserted_before = np.cumsum(lower)[keep]  # lower-case residues up to each match column
    deletions = np.diff(inserted_before, prepend=0).astype(np.int32)
    return b[keep].tobytes(), deletions, -1


def _check_query(msa: Msa, query: str, label: str) -> None:
    """Raise unless the MSA's first row equals ``query`` (upper case, insertions removed)."""
    q = query.upper()
    first = msa.query
    if first == q:
        return
    if len(first) != len(q):
        raise InputError(f"first row has {len(first)} match columns but the query has {len(q)} "
                         "residues", file=msa.path, record=label, line=1)
    k = next(i for i, (a, b) in enumerate(zip(first, q)) if a != b)
    raise InputError(f"first row differs from the query at position {k + 1} "
                     f"({first[k]!r} in the MSA, {q[k]!r} in the query)", file=msa.path, record=label)


def _finish_msa(seqs, dels, descs, path, query, max_sequences) -> Msa:
    """Deduplicate rows (first kept), cap depth, handle the empty case, validate the query."""
    if not seqs:
        if query is None:
            warn_input("empty alignment", file=path, stacklevel=4)
            return Msa((), np.zeros((0, 0), np.int32), (), path)
        warn_input("empty alignment; using the query alone", file=path, stacklevel=4)
        return Msa((query.upper(),), np.zeros((1, len(query)), np.int32), ("query",), path)
    seen: set[str] = set()
    keep = []
    for i, s in enumerate(seqs):
        if s not in seen:
            seen.add(s)
            keep.append(i)
    if max_sequences is not None:
        keep = keep[: max(1, int(max_sequences))]
    msa = Msa(tuple(seqs[i] for i in keep), np.stack([dels[i] for i in keep]),
              tuple(descs[i] for i in keep), path)
    if query is not None:
        _check_query(msa, query, descs[0].split(maxsplit=1)[0] if descs[0].strip() else "query")
    return msa


def _msa_from_lines(lines: Iterable[str], path: str, query: str | None, max_sequences: int | None) -> Msa:
    tracked, raw = _records(lines)
    if tracked.preamble is not None:
        number, text = tracked.preamble
        raise InputError(f"text before the first A3M header ('>'): {text.strip()[:30]!r}",
                         file=path, line=number, column=1)
    seqs: list[str] = []
    dels: list[np.ndarray] = []
    descs: list[str] = []
    width = None
    wrong: list[tuple[int, int, int]] = []  # (row number, header line, match columns)
    for i, (title, row) in enumerate(raw):
        name = sanitize_name(title, f"row_{i + 1}")
        if i == 0 and row.endswith("*"):
            row = row[:-1]
        aligned, d, bad = _a3m_row(row)
        if bad >= 0:
            line, column = tracked.position(i, bad)
            raise InputError(f"invalid character {_describe_char(row[bad])} in A3M row {i + 1}",
                             file=path, record=name, line=line, column=column)
        if width is None:
            width = len(aligned)
            if width == 0:
                raise InputError("first row (query) has no match columns", file=path, record=name,
                                 line=tracked.headers[i])
        elif len(aligned) != width:
            wrong.append((i + 1, tracked.headers[i], len(aligned)))
            continue
        seqs.append(aligned.decode("ascii"))
        dels.append(d)
        descs.append(title)
    if wrong:
        listed = ", ".join(f"row {r} (line {ln}: {n})" for r, ln, n in wrong[:10])
        more = f" and {len(wrong) - 10} more" if len(wrong) > 10 else ""
        raise InputError(f"{len(wrong)} rows have a match-column count different from the query's "
                         f"{width}: {listed}{more}", file=path, line=wrong[0][1])
    return _finish_msa(seqs, dels, descs, path, query, max_sequences)


def parse_a3m(path, *, query: str | None = None, max_sequences: int | None = None) -> Msa:
    """Parse an A3M alignment (HHblits / MMseqs2 / ColabFold; optionally ``.gz``).

    Args:
        path: the file.
        query: if given, the first row must equal it (else :class:`InputError` naming the first
            differing position); an empty file then yields a query-only MSA.
        max_sequences: keep only the first (deduplicated) rows.

    Returns:
        :class:`Msa` with ``N_seq`` unique rows of ``N_res`` = query match columns.

    Raises:
        InputError: invalid or non-printable character (line:column), rows of the wrong length
            (listed by row number), a first row that differs from ``query``.
    """
    path = _check_file(path)
    with _open_text(path) as handle:
        return _msa_from_lines(handle, path, query, max_sequences)


def parse_a3m_string(text: str, *, label: str = "<string>", query: str | None = None,
                     max_sequences: int | None = None) -> Msa:
    """:func:`parse_a3m` for in-memory text."""
    return _msa_from_lines(io.StringIO(text), label, query, max_sequences)


# ----------------------------------------------------------------------------------------------
# Stockholm


def _stockholm_line_of(path: str, name: str) -> int | None:
    with _open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if line.startswith(name) and not line.startswith("#"):
                return number
    return None


def parse_stockholm(path, *, query: str | None = None, max_sequences: int | None = None) -> Msa:
    """Parse a Stockholm alignment (jackhmmer / HMMER output, AF2 ``*_hits.sto``) with ``Bio.AlignIO``.

    The first sequence is the query; columns where it has a gap (``-`` or ``.``) are insert columns:
    residues there count as deletions before the next query column, as in AF2
    ``parsers.parse_stockholm``. Letters are upper-cased and ``.`` becomes ``-``. Duplicate rows are
    removed; ``query`` and ``max_sequences`` as in :func:`parse_a3m` (AF2 caps: UniRef90 10,000,
    MGnify 501).

    Raises:
        InputError: unreadable alignment, an invalid character, a first row that differs from ``query``.
    """
    path = _check_file(path)
    try:
        with _open_text(path) as handle:
            alignment = AlignIO.read(handle, "stockholm")
    except ValueError as exc:  # Biopython: "No records found in handle", malformed blocks ...
        if "No records found" in str(exc):
            return _finish_msa([], [], [], path, query, max_sequences)
        raise InputError(f"cannot read Stockholm alignment: {exc}", file=path) from exc
    records = list(alignment)
    rows = [str(r.seq) for r in records]
    width = len(rows[0])
    mat = np.frombuffer("".join(rows).encode("utf-8", errors="replace"), dtype=np.uint8)
    if mat.size != len(rows) * width:
        raise InputError("non-ASCII character in Stockholm alignment", file=path)
    mat = mat.reshape(len(rows), width)
    is_gap = (mat == _DASH) | (mat == _DOT)
    is_letter = ((mat >= _UPPER_A) & (mat <= _UPPER_Z)) | ((mat >= _LOWER_A) & (mat <= _LOWER_Z))
    bad = ~(is_gap | is_letter)
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        name = records[i].id
        raise InputError(f"invalid character {_describe_char(chr(mat[i, j]))} in Stockholm row {i + 1} "
                         f"(alignment column {j + 1})", file=path, record=name,
                         line=_stockholm_line_of(path, name))
    keep = ~is_gap[0]
    if not keep.any():
        raise InputError("query row is all gaps", file=path, record=records[0].id)
    # Residues in insert columns are deletions counted into the next query column (AF2).
    inserted = np.cumsum(is_letter & ~keep[None, :], axis=1)[:, keep]
    deletions = np.diff(inserted, axis=1, prepend=0).astype(np.int32)
    aligned = mat[:, keep].copy()
    aligned[aligned == _DOT] = _DASH
    lower = (aligned >= _LOWER_A) & (aligned <= _LOWER_Z)
    aligned[lower] -= 32
    seqs = [row.tobytes().decode("ascii") for row in aligned]
    descs = [r.id if r.description in ("", r.id) else f"{r.id} {r.description}" for r in records]
    return _finish_msa(seqs, list(deletions), descs, path, query, max_sequences)


def parse_msa(path, *, query: str | None = None, max_sequences: int | None = None) -> Msa:
    """Parse an alignment by extension: ``.a3m`` / ``.fasta`` / ``.fa`` (A3M rules) or ``.sto`` /
    ``.stockholm`` (optionally ``.gz``). See :func:`parse_a3m`, :func:`parse_stockholm`.

    Raises:
        InputError: unknown extension, or any error of the format's parser.
    """
    name = os.fspath(path)
    base = name[:-3] if name.endswith(".gz") else name
    suffix = Path(base).suffix.lower()
    if suffix in (".a3m", ".fasta", ".fa", ".afa", ".aln"):
        return parse_a3m(name, query=query, max_sequences=max_sequences)
    if suffix in (".sto", ".stockholm", ".stk"):
        return parse_stockholm(name, query=query, max_sequences=max_sequences)
    raise InputError(f"unknown alignment format {suffix!r} (expected .a3m or .sto)", file=name)
