"""Template search hits: :class:`TemplateHit` and the readers of the two formats AF2 and OpenFold keep
next to a chain's MSAs, HHsearch's ``pdb70_hits.hhr`` (:func:`parse_hhr`) and hmmsearch's
``hmm_output.sto`` / ``pdb_hits.sto`` (:func:`parse_hmmsearch_sto`).

Both give, per hit, the PDB chain (``<pdb_id>_<chain>``) and the query -> hit residue mapping that
AF2 builds in ``templates._build_query_to_hit_index_mapping``: ``mapping[i]`` is the 0-based index,
in the hit chain's full SEQRES, of the residue aligned to query residue ``i`` (-1 = none).

Formats:

* ``.hhr``: HH-suite's text output (Steinegger et al. 2019, HH-suite3 user guide, "hhr" result
  format): a summary table, then per hit ``No k``, ``>name description``, ``Probab=... E-value=...
  Score=... Aligned_cols=...`` and alignment blocks of ``Q <name> <start> <residues> <end> (<len>)``
  / ``T <name> <start> <residues> <end> (<len>)`` rows. Read with Biopython's ``Bio.SearchIO``
  (``hhsuite3-text``).
* hmmsearch ``-A`` Stockholm (HMMER 3 user guide, "Stockholm format"; AF2 v2.3
  ``parsers.parse_hmmsearch_sto``): one row per domain named ``<pdb_id>_<chain>/<start>-<end>``
  with a ``#=GS ... DE`` line holding the pdb_seqres description (``mol:protein length:N ...``);
  upper-case letters and ``-`` are the profile's match states (= query residues when the profile was
  built from the query's MSA, as AF2 does), lower-case letters are insertions, ``.`` pads. Read with
  ``Bio.AlignIO``. Rows whose description does not say ``mol:protein`` are skipped, as in AF2.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from Bio import AlignIO, SearchIO

from .errors import InputError, warn_input
from .text import text_source

__all__ = ["TemplateHit", "parse_hhr", "parse_hmmsearch_sto", "read_template_hits", "TEMPLATE_HIT_SUFFIXES"]

TEMPLATE_HIT_SUFFIXES = (".hhr", ".sto")
# AF2 parsers._parse_hmmsearch_description / hhr names: '1abc_A', '1ABC_A', '1abc_AA'.
_NAME = re.compile(r"^([A-Za-z0-9]{4})_(\w+)$")


@dataclass(frozen=True, eq=False)
class TemplateHit:
    """One template hit mapped onto the query.
    Attributes:
        name: ``<pdb_id>_<chain>`` as written in the hit file.
        pdb_id: lower-case PDB id; chain_id: author chain id.
        mapping: ``[N_res]`` int64: index (0-based, in the hit chain's SEQRES) of the residue aligned to
            each query residue, -1 where none.
        hit_sequence: the hit's residues in the aligned region (no gaps, upper case), starting at
            SEQRES index ``hit_start``.
        hit_start: 0-based SEQRES index of ``hit_sequence[0]``.
        aligned_cols: query residues aligned to a hit residue.
        evalue, score: as reported (``None`` if absent).
        rank: 1-based position in the file.
        source: ``path:line`` of the hit.
    """

    name: str
    pdb_id: str
    chain_id: str
    mapping: np.ndarray
    hit_sequence: str
    hit_start: int
    aligned_cols: int
    evalue: float | None
    score: float | None
    rank: int
    source: str

    def hit_residue(self, index: int) -> str:
        """One-letter code of SEQRES residue ``index`` as the hit file gives it ('' outside the region)."""
        k = index - self.hit_start
        return self.hit_sequence[k] if 0 <= k < len(self.hit_sequence) else ""


def _split_name(name: str, path: str, line: int | None) -> tuple[str, str] | None:
    m = _NAME.match(name.strip())
    if not m:
        warn_input(f"template hit name {name!r} is not '<pdb_id>_<chain>'; skipped", file=path, line=line)
        return None
    return m.group(1).lower(), m.group(2)


def _mapping_from_rows(
    query_row: str, hit_row: str, query_start: int, hit_start: int, n_res: int
) -> tuple[np.ndarray, str]:
    """Walk two aligned rows (``-`` = gap; in ``hit_row`` lower case = insertion, ``.`` = padding)."""
    mapping = np.full(n_res, -1, dtype=np.int64)
    qi, ti = query_start, hit_start
    residues = []
    for q, t in zip(query_row, hit_row):
        q_res = q not in "-."
        t_res = t not in "-."
        if q_res and t_res and qi < n_res and not t.islower():
            mapping[qi] = ti
        if t_res:
            residues.append(t.upper())
            ti += 1
        if q_res:
            qi += 1
    return mapping, "".join(residues)


def _line_numbers(opener, pattern: re.Pattern) -> list[int]:
    with opener() as fh:
        return [k for k, line in enumerate(fh, 1) if pattern.match(line)]


def parse_hhr(path, query_length: int | None = None, *, span=None, name: str | None = None) -> list[TemplateHit]:
    """Read an HHsearch/HHblits ``.hhr`` result (HH-suite 2/3 text format) with ``Bio.SearchIO``.
    Args:
        path: the ``.hhr`` file (optionally ``.gz``), or an alignment database shard with ``span``.
        query_length: ``N_res``; default: the file's ``Match_columns``.
        span, name: ``(start, size)`` and the stored file's name: the hits are those bytes of
            ``path`` (OpenFold's alignment database, :mod:`.alignment_db`).

    Returns:
        One :class:`TemplateHit` per alignment, in file order (HHsearch sorts by probability).

    Raises:
        InputError: the file cannot be parsed (one line naming it).
    """
    path, opener = text_source(path, span, name)
    try:
        with opener() as fh:
            results = list(SearchIO.parse(fh, "hhsuite3-text"))
    except (ValueError, RuntimeError, TypeError, AttributeError) as exc:
        raise InputError(f"cannot read HHsearch result: {' '.join(str(exc).split())[:200]}", file=path) from None
    if not results:
        return []
    result = results[0]
    n_res = query_length or result.seq_len
    if not n_res:
        raise InputError("no Match_columns line and no query length given", file=path)
    starts = _line_numbers(opener, re.compile(r"^No +\d+\s*$"))
    hsps = sorted((hsp for hit in result for hsp in hit.hsps), key=lambda h: h.output_index)
    hits = []
    for hsp in hsps:
        line = starts[hsp.output_index] if hsp.output_index < len(starts) else None
        ids = _split_name(hsp.hit_id, path, line)
        if ids is None:
            continue
        frag = hsp[0]
        mapping, residues = _mapping_from_rows(
            str(frag.query.seq), str(frag.hit.seq), frag.query_start, frag.hit_start, n_res
        )
        hits.append(
            TemplateHit(
                name=hsp.hit_id,
                pdb_id=ids[0],
                chain_id=ids[1],
                mapping=mapping,
                hit_sequence=residues,
                hit_start=frag.hit_start,
                aligned_cols=int((mapping >= 0).sum()),
                evalue=hsp.evalue,
                score=hsp.score,
                rank=hsp.output_index + 1,
                source=f"{path}:{line}" if line else path,
            )
        )
    return hits


def parse_hmmsearch_sto(path, query_length: int, *, span=None, name: str | None = None) -> list[TemplateHit]:
    """Read hmmsearch's ``-A`` Stockholm output against a ``pdb_seqres.txt``-style database.
    Args:
        path: the ``.sto`` file (optionally ``.gz``), or an alignment database shard with ``span``.
        query_length: ``N_res``: the profile's match states are the query's residues (AF2 builds the
            profile with ``hmmbuild --hand`` from the query's MSA). A row with more match states than
            ``N_res`` is cut at ``N_res`` with a warning.
        span, name: as :func:`parse_hhr`.

    Returns:
        One :class:`TemplateHit` per row (domain), in file order; rows not marked ``mol:protein`` are
        skipped (AF2).

    Raises:
        InputError: the file cannot be parsed, or a row name lacks its ``/<start>-<end>`` range.
    """
    path, opener = text_source(path, span, name)
    try:
        with opener() as fh:
            alignments = list(AlignIO.parse(fh, "stockholm"))
    except ValueError as exc:
        raise InputError(f"cannot read Stockholm alignment: {' '.join(str(exc).split())[:200]}", file=path) from None
    rows = [(r.id, r.description, str(r.seq)) for a in alignments for r in a]
    lines = {}
    with opener() as fh:
        for k, line in enumerate(fh, 1):
            if line.strip() and not line.startswith(("#", "//")):
                lines.setdefault(line.split()[0], k)
    hits = []
    for rank, (row_id, description, aligned) in enumerate(rows, 1):
        line = lines.get(row_id)
        m = re.match(r"^(.+)/(\d+)-(\d+)$", row_id)
        if not m:
            raise InputError(
                f"row name {row_id!r} lacks the '/<start>-<end>' range hmmsearch writes",
                file=path,
                record=row_id,
                line=line,
            )
        if "mol:protein" not in description:
            continue
        ids = _split_name(m.group(1), path, line)
        if ids is None:
            continue
        match_states = sum(1 for c in aligned if c.isupper() or c == "-")
        if match_states > query_length:
            warn_input(
                f"{match_states} match states but the query has {query_length} residues; the rest is ignored",
                file=path,
                record=row_id,
                line=line,
            )
        query_row = "".join("." if c.islower() or c == "." else "X" for c in aligned)
        hit_start = int(m.group(2)) - 1
        mapping, residues = _mapping_from_rows(query_row, aligned, 0, hit_start, query_length)
        hits.append(
            TemplateHit(
                name=m.group(1),
                pdb_id=ids[0],
                chain_id=ids[1],
                mapping=mapping,
                hit_sequence=residues,
                hit_start=hit_start,
                aligned_cols=int((mapping >= 0).sum()),
                evalue=None,
                score=None,
                rank=rank,
                source=f"{path}:{line}" if line else path,
            )
        )
    return hits


def read_template_hits(path, query_length: int, *, span=None, name: str | None = None) -> list[TemplateHit]:
    """:func:`parse_hhr` for ``.hhr``, :func:`parse_hmmsearch_sto` for ``.sto`` (optionally ``.gz``);
    with ``span``, the format is that of the stored file's ``name`` (OpenFold's alignment database).
    Raises:
        InputError: another suffix, or the format's parser's errors.
    """
    path = os.fspath(path)
    named = name if span is not None else path
    base = named[:-3] if named.lower().endswith(".gz") else named
    suffix = Path(base).suffix.lower()
    if suffix == ".hhr":
        return parse_hhr(path, query_length, span=span, name=name)
    if suffix == ".sto":
        return parse_hmmsearch_sto(path, query_length, span=span, name=name)
    raise InputError(
        f"unknown template hit format {suffix!r} (expected .hhr or .sto)", file=f"{path}[{name}]" if span else path
    )
