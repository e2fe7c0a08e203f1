"""A3M and Stockholm alignment parsers (Biopython underneath), returning frozen :class:`Msa` records.

:func:`parse_a3m`, :func:`parse_stockholm`, :func:`parse_msa` (by extension) give an :class:`Msa`:
the aligned rows restricted to the query's columns plus AF2's deletion matrix (Jumper et al. 2021,
Suppl. 1.2.2 and Table 1: ``deletion_matrix[i, j]`` = residues of row ``i`` inserted relative to
the query immediately before query column ``j``). A3M records are split like FASTA (see
:mod:`.text`); Stockholm files are read with ``Bio.AlignIO``.

A3M rules: lower-case letters are insertions (deletion matrix), ``.`` is dropped, ``#`` lines are
ignored, wrapped rows are joined, non-printable bytes are rejected with their position, rows whose
match-column count differs from the query's are listed by number with the likely cause (upper-case
insertions, missing ``-``), exact duplicate rows are removed (first kept), and with ``query=`` the
first row must equal the query. All problems of one file are reported in one error (up to
:data:`MAX_PROBLEMS`). An empty alignment
gives a query-only MSA (with ``query=``) or an empty one, with a warning.

With ``max_sequences`` the readers stop at the cap: A3M records are read until that many unique rows
are found (problems in rows after them are not seen); a Stockholm file is scanned line by line and
only the lines of its first rows reach the parser. :func:`parse_msa` also reads an alignment stored
inside a larger file (``span=(start, size)``: OpenFold's alignment database, :mod:`.alignment_db`)
by seek, plain or gzip-compressed.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np
from Bio import AlignIO
from Bio.SeqIO.FastaIO import SimpleFastaParser

from .errors import InputError, note_input, warn_input
from .fasta import standard_residues
from .formats import ALIGNED, FASTA, MSA, require_format
from .names import sanitize_name
from .text import TrackedLines, describe_char, open_text, text_source

__all__ = ["Msa", "parse_a3m", "parse_a3m_string", "parse_stockholm", "parse_msa", "query_problem"]


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


def query_problem(first: str, query: str) -> str | None:
    """Why an MSA's first row (match columns) is not ``query``, or ``None`` when it is; letters a query
    reads as another residue (:data:`~alphafold_mem.data.fasta.NONSTANDARD`: ``J`` in the MSA, ``X`` in the
    query read from FASTA) count as that residue."""
    q = query.upper()
    if first == q or standard_residues(first)[0] == standard_residues(q)[0]:
        return None
    if len(first) != len(q):
        return f"first row has {len(first)} match columns but the query has {len(q)} residues"
    k = next(i for i, (a, b) in enumerate(zip(first, q)) if a != b)
    return f"first row differs from the query at position {k + 1} ({first[k]!r} in the MSA, {q[k]!r} in the query)"


def _check_query(msa: Msa, query: str, label: str) -> None:
    """Raise unless the MSA's first row equals ``query`` (upper case, insertions removed)."""
    problem = query_problem(msa.query, query)
    if problem:
        raise InputError(problem, file=msa.path, record=label, line=1 if "columns" in problem else None)


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
    msa = Msa(tuple(seqs[i] for i in keep), np.stack([dels[i] for i in keep]), tuple(descs[i] for i in keep), path)
    if query is not None:
        _check_query(msa, query, descs[0].split(maxsplit=1)[0] if descs[0].strip() else "query")
    return msa


#: At most this many problems of one alignment file are listed in its error.
MAX_PROBLEMS = 10


def _length_hint(row: str, width: int, n_match: int) -> str:
    """The likely cause of an A3M row whose match-column count differs from the query's."""
    if n_match > width:
        return (
            f"{n_match - width} more than the query: likely insertions written in upper case "
            "(a3m insertions are lower case)"
        )
    if any(c.islower() for c in row) or "-" in row:
        return f"{width - n_match} fewer than the query: likely missing '-' for deleted query columns"
    return (
        f"{width - n_match} fewer than the query: likely an unaligned (FASTA) sequence; a3m rows need "
        "one upper-case letter or '-' per query column"
    )


def _raise_problems(problems: list[tuple], path: str) -> None:
    """One :class:`InputError` for every problem found in one file (up to :data:`MAX_PROBLEMS`);
    ``problems`` holds ``(line, column, record, text)``. A single problem keeps its exact location."""
    if not problems:
        return
    problems = sorted(problems, key=lambda p: (p[0] is None, p[0] or 0))
    if len(problems) == 1:
        line, column, record, text = problems[0]
        raise InputError(text, file=path, line=line, column=column, record=record)
    parts = []
    for line, column, record, text in problems[:MAX_PROBLEMS]:
        where = f"line {line}" + (f":{column}" if column else "") if line else ""
        who = f"row '{record}'" if record else ""
        parts.append(" ".join(p for p in (where, who) if p) + f": {text}")
    more = f"; and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
    raise InputError(f"{len(problems)} problems: {'; '.join(parts)}{more}", file=path, line=problems[0][0])


def _check_preamble(tracked: TrackedLines, path: str) -> None:
    if tracked.preamble is not None:
        number, text = tracked.preamble
        raise InputError(
            f"text before the first A3M header ('>'): {text.strip()[:30]!r}", file=path, line=number, column=1
        )


def _msa_from_lines(lines: Iterable[str], path: str, query: str | None, max_sequences: int | None) -> Msa:
    tracked = TrackedLines(lines)
    raw = SimpleFastaParser(iter(tracked))  # lazy: records are read only up to the cap
    unique: set[str] = set()
    seqs: list[str] = []
    dels: list[np.ndarray] = []
    descs: list[str] = []
    width = None
    problems: list[tuple] = []  # (line, column, record, text): all problems of the file, reported at once
    for i, (title, row) in enumerate(raw):
        if i == 0:
            _check_preamble(tracked, path)
        if max_sequences is not None and len(unique) >= max(1, int(max_sequences)):
            break
        name = sanitize_name(title, f"row_{i + 1}")
        if i == 0 and row.endswith("*"):
            row = row[:-1]
            note_input(
                "one trailing '*' (stop) removed from the query row",
                file=path,
                record=name,
                line=tracked.headers[i],
                stacklevel=5,
            )
        aligned, d, bad = _a3m_row(row)
        if bad >= 0:
            line, column = tracked.position(i, bad)
            problems.append((line, column, name, f"invalid character {describe_char(row[bad])} in A3M row {i + 1}"))
            if i == 0:
                break  # without a usable query row the others cannot be checked
            continue
        if width is None:
            width = len(aligned)
            if width == 0:
                raise InputError(
                    "first row (query) has no match columns", file=path, record=name, line=tracked.headers[i]
                )
        elif len(aligned) != width:
            problems.append(
                (
                    tracked.headers[i],
                    None,
                    name,
                    f"row {i + 1} has {len(aligned)} match columns, {_length_hint(row, width, len(aligned))}",
                )
            )
            continue
        seqs.append(aligned.decode("ascii"))
        dels.append(d)
        descs.append(title)
        unique.add(seqs[-1])
    if not seqs:
        _check_preamble(tracked, path)
    if query is not None and width is not None and seqs:
        mismatch = query_problem(seqs[0], query)
        if mismatch:
            problems.append((tracked.headers[0], None, sanitize_name(descs[0], "query"), mismatch))
    _raise_problems(problems, path)
    return _finish_msa(seqs, dels, descs, path, query, max_sequences)


def parse_a3m(path, *, query: str | None = None, max_sequences: int | None = None, span=None, name=None) -> Msa:
    """Parse an A3M alignment (HHblits / MMseqs2 / ColabFold; optionally ``.gz``).

    Args:
        path: the file.
        query: if given, the first row must equal it (else :class:`InputError` naming the first
            differing position); an empty file then yields a query-only MSA.
        max_sequences: keep only the first (deduplicated) rows; reading stops there.
        span: ``(start, size)``: the alignment is those bytes of ``path`` (an alignment database),
            named ``name`` (its suffix says whether it is gzip-compressed).
        name: the stored file's name, with ``span``.

    Returns:
        :class:`Msa` with ``N_seq`` unique rows of ``N_res`` = query match columns.

    Raises:
        InputError: invalid or non-printable character (line:column), rows of the wrong length
            (listed by row number), a first row that differs from ``query``.
    """
    path, opener = text_source(path, span, name)
    with opener() as handle:
        return _msa_from_lines(handle, path, query, max_sequences)


def parse_a3m_string(
    text: str, *, label: str = "<string>", query: str | None = None, max_sequences: int | None = None
) -> Msa:
    """:func:`parse_a3m` for in-memory text."""
    return _msa_from_lines(io.StringIO(text), label, query, max_sequences)


# ----------------------------------------------------------------------------------------------
# Stockholm


def _stockholm_line_of(path: str, name: str) -> int | None:
    with open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if line.startswith(name) and not line.startswith("#"):
                return number
    return None


def parse_stockholm(path, *, query: str | None = None, max_sequences: int | None = None, span=None, name=None) -> Msa:
    """Parse a Stockholm alignment (jackhmmer / HMMER output, AF2 ``*_hits.sto``) with ``Bio.AlignIO``.

    The first sequence is the query; columns where it has a gap (``-`` or ``.``) are insert columns:
    residues there count as deletions before the next query column, as in AF2
    ``parsers.parse_stockholm``. Letters are upper-cased and ``.`` becomes ``-``. Duplicate rows are
    removed; ``query``, ``max_sequences``, ``span`` and ``name`` as in :func:`parse_a3m` (AF2 caps:
    UniRef90 10,000, MGnify 501). With a cap only the lines of the first rows are parsed (read
    again with more rows when duplicates leave fewer unique rows than the cap).

    Raises:
        InputError: unreadable alignment, an invalid character, a first row that differs from ``query``.
    """
    path, opener = text_source(path, span, name)
    budget = None if max_sequences is None else max(1, int(max_sequences))
    while True:
        alignment, more = _read_stockholm(opener, path, budget)
        if alignment is None or not more or budget is None:
            break
        n_unique = len({str(r.seq) for r in alignment})
        if n_unique >= max(1, int(max_sequences)):
            break
        budget *= 4  # duplicates among the first rows: read further
    if alignment is None:
        return _finish_msa([], [], [], path, query, max_sequences)
    records = list(alignment)
    return _stockholm_msa(records, path, query, max_sequences, span is None)


def _read_stockholm(opener, path: str, budget: int | None):
    """``(alignment or None when it has no records, rows were left out)``."""
    try:
        with opener() as handle:
            if budget is None:
                alignment, more = AlignIO.read(handle, "stockholm"), False
            else:
                lines, more = _stockholm_head(handle, budget)
                alignment = AlignIO.read(io.StringIO("".join(lines)), "stockholm")
    except ValueError as exc:  # Biopython: "No records found in handle", malformed blocks ...
        if "No records found" in str(exc):
            return None, False
        raise InputError(f"cannot read Stockholm alignment: {exc}", file=path) from exc
    return alignment, more


def _stockholm_head(handle, budget: int) -> tuple[list[str], bool]:
    """The lines of a Stockholm file that concern its first ``budget`` rows (all blocks), and whether
    rows were left out. Other rows' lines are skipped on their first word, without parsing."""
    kept: set[str] = set()
    gs: dict[str, list[str]] = {}
    out: list[str] = []
    more = False
    for line in handle:
        if line.startswith("#=GS ") or line.startswith("#=GR "):
            parts = line.split(None, 2)
            who = parts[1] if len(parts) > 1 else ""
            if line.startswith("#=GS "):
                gs.setdefault(who, []).append(line)  # written before the rows: placed when the row is
            elif who in kept:
                out.append(line)
            continue
        if not line.strip() or line.startswith("#") or line.startswith("//"):
            out.append(line)
            continue
        who = line.split(None, 1)[0]
        if who not in kept:
            if len(kept) >= budget:
                more = True
                continue
            kept.add(who)
            out.extend(gs.pop(who, ()))
        out.append(line)
    return out, more


def _stockholm_msa(records, path: str, query, max_sequences, locatable: bool) -> Msa:
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
        raise InputError(
            f"invalid character {describe_char(chr(mat[i, j]))} in Stockholm row {i + 1} (alignment column {j + 1})",
            file=path,
            record=name,
            line=_stockholm_line_of(path, name) if locatable else None,
        )
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


def parse_msa(
    path, *, query: str | None = None, max_sequences: int | None = None, span=None, name: str | None = None
) -> Msa:
    """Parse an alignment by its suffix (:mod:`.formats`, optionally ``.gz``): A3M rules for ``.a3m``,
    aligned FASTA (``.afa``, ``.aln``) and the FASTA suffixes; :func:`parse_stockholm` for ``.sto``,
    ``.stockholm``, ``.stk``. See :func:`parse_a3m` (``span``/``name``: an alignment stored in a
    database file, its suffix taken from ``name``).

    Raises:
        InputError: unknown suffix (one line listing the accepted ones), or any error of the format's
            parser.
    """
    found = require_format(name if span is not None else os.fspath(path), MSA, ALIGNED, FASTA, what="alignment")
    reader = parse_stockholm if found.reader == "parse_stockholm" else parse_a3m  # FASTA: A3M rules
    return reader(os.fspath(path), query=query, max_sequences=max_sequences, span=span, name=name)
