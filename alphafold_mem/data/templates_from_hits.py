"""Templates from search hits (AF2 ``templates.TemplateHitFeaturizer``, Jumper et al. 2021, Suppl.
1.2.3): :func:`select_templates` checks each :class:`~.template_hits.TemplateHit` as AF2 does, loads
its chain from an mmCIF directory and returns ``(chain, mapping)`` pairs for
:func:`~.features.templates.make_template_features`; every hit it drops is reported with the reason.

Checks, in AF2's order (``templates._assess_hhsearch_hit``, ``_process_single_hit``):

1. obsolete ids are replaced by their successor from an optional ``obsolete.dat`` (wwPDB format:
   ``OBSLTE    31-JUL-94 116L     216L``, :func:`parse_obsolete`), followed to the end of the chain
   (``9aaa -> 9bbb -> 9ccc`` uses 9ccc); an entry withdrawn without successor at any step, or a
   chain of successors that loops, is dropped;
2. the mmCIF (``<dir>/<pdb_id>.cif[.gz]``, or the PDB mirror layout ``<dir>/<id[1:3]>/<pdb_id>.cif.gz``)
   must exist and parse;
3. release date (first release in the mmCIF) after ``max_template_date`` -> dropped; under a
   ``max_template_date``, a template whose mmCIF has no release date is **dropped** too (it cannot
   be shown to predate the cut-off), with the reason logged;
4. ``aligned_cols / N_res <= 0.1`` -> dropped (AF2 ``min_align_ratio``);
5. the hit's residues are a subsequence of the query and cover more than 95 % of its length ->
   dropped as identical to the query (AF2 ``max_subsequence_ratio``);
6. fewer than 10 hit residues -> dropped (AF2: "Template too short");
7. the chain is taken by author id (else label id); when the hit's residues differ from the mmCIF's
   SEQRES at the aligned positions (an outdated pdb_seqres/PDB70), the hit is re-aligned onto the
   mmCIF sequence with Biopython's ``PairwiseAligner`` (AF2 uses kalign) and dropped when fewer
   than 60 % of the residues agree (AF2 ``_realign_pdb_template_to_query``).

Hits are taken in file order until ``max_templates`` pass (AF2 inference: 4; training keeps up to 20
candidates and the feature pipeline samples 4 of them).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .errors import InputError
from .features.templates import align_template
from .mmcif import read_mmcif
from .structure import ProteinChain, Structure
from .template_hits import TemplateHit, read_template_hits
from .text import check_file, open_text

__all__ = [
    "TemplateChoice",
    "TemplateSelection",
    "select_templates",
    "templates_from_hit_file",
    "parse_obsolete",
    "find_mmcif",
    "MAX_SUBSEQUENCE_RATIO",
    "MIN_ALIGN_RATIO",
    "MIN_TEMPLATE_LENGTH",
    "MIN_REALIGN_IDENTITY",
]

MAX_SUBSEQUENCE_RATIO = 0.95  # AF2 templates.py _assess_hhsearch_hit
MIN_ALIGN_RATIO = 0.1  # AF2 templates.py _assess_hhsearch_hit
MIN_TEMPLATE_LENGTH = 10  # AF2 templates.py: "Template too short"
MIN_REALIGN_IDENTITY = 0.6  # AF2 templates.py _realign_pdb_template_to_query


@dataclass(frozen=True)
class TemplateChoice:
    """What happened to one hit: ``status`` ``"used"`` or ``"dropped"`` with ``reason``."""

    name: str
    status: str
    reason: str = ""
    rank: int = 0
    release_date: Optional[str] = None
    aligned_cols: int = 0

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass
class TemplateSelection:
    """Result of :func:`select_templates`: ``templates`` (chain, mapping) pairs for
    :func:`make_template_features` and one :class:`TemplateChoice` per hit looked at."""

    templates: list = field(default_factory=list)
    choices: list = field(default_factory=list)

    @property
    def used(self) -> list[str]:
        return [c.name for c in self.choices if c.status == "used"]

    @property
    def dropped(self) -> list[TemplateChoice]:
        return [c for c in self.choices if c.status == "dropped"]


def parse_obsolete(path) -> dict[str, Optional[str]]:
    """Obsolete PDB id -> successor id (``None`` when withdrawn without one), lower case.

    Format (wwPDB ``obsolete.dat``, fixed columns; AF2 ``templates._parse_obsolete``):
    ``OBSLTE    DD-MON-YY XXXX     YYYY``: old id in columns 21-24, successor in 30-33.
    """
    path = check_file(path)
    out: dict[str, Optional[str]] = {}
    with open_text(path) as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if not line.startswith("OBSLTE"):
                continue
            old = line[20:24].strip().lower()
            new = line[29:33].strip().lower() if len(line) > 30 else ""
            if old:
                out[old] = new or None
    return out


def find_mmcif(pdb_id: str, mmcif_dirs: Sequence) -> Optional[Path]:
    """``<dir>/<pdb_id>.cif`` (or ``.cif.gz``, ``.mmcif``, upper-case id, or the wwPDB mirror layout
    ``<dir>/<pdb_id[1:3]>/<pdb_id>.cif.gz``) in the first directory that has it."""
    pid = pdb_id.lower()
    names = [f"{p}{s}" for p in (pid, pid.upper()) for s in (".cif", ".cif.gz", ".mmcif", ".mmcif.gz")]
    for d in mmcif_dirs:
        d = Path(d)
        for sub in (d, d / pid[1:3]):
            for n in names:
                if (sub / n).is_file():
                    return sub / n
    return None


def _date(text: Optional[str]) -> Optional[_dt.date]:
    if not text:
        return None
    try:
        return _dt.date.fromisoformat(str(text)[:10])
    except ValueError:
        return None


def _successor(pdb_id: str, obsolete: dict) -> tuple[Optional[str], str]:
    """``(current id, note)`` following obsolete ids to the end; ``(None, reason)`` when an entry on
    the way is withdrawn without successor or the successors loop."""
    path = [pdb_id]
    while path[-1] in obsolete:
        nxt = obsolete[path[-1]]
        if nxt is None:
            return None, f"PDB entry {' -> '.join(path)} is obsolete without a successor (obsolete.dat)"
        if nxt in path:
            return None, f"obsolete successors loop ({' -> '.join(path + [nxt])}; obsolete.dat)"
        path.append(nxt)
    if len(path) == 1:
        return pdb_id, ""
    return path[-1], f"obsolete {' -> '.join(path[:-1])} replaced by {path[-1]}"


def _chain_for(structure: Structure, hit: TemplateHit) -> Optional[ProteinChain]:
    try:
        return structure.chain(hit.chain_id)
    except InputError:
        pass
    for chain in structure.chains.values():  # AF2 _find_template_in_pdb: any chain holding the residues
        if hit.hit_sequence and hit.hit_sequence in chain.sequence:
            return chain
    return None


def _mapping_on_chain(hit: TemplateHit, chain: ProteinChain) -> tuple[Optional[np.ndarray], str]:
    """Query -> chain SEQRES index for the hit; ``(None, reason)`` when it cannot be placed."""
    mapping = hit.mapping
    aligned = np.flatnonzero(mapping >= 0)
    idx = mapping[aligned]
    seq = chain.sequence
    if len(idx) and idx.max() < len(seq) and all(seq[j] == hit.hit_residue(int(j)) or seq[j] == "X" for j in idx):
        return mapping, ""
    offset = seq.find(hit.hit_sequence) if hit.hit_sequence else -1
    if offset >= 0:  # the same residues at another numbering
        out = mapping.copy()
        out[aligned] = idx - hit.hit_start + offset
        return out, "hit residues found at another SEQRES offset"
    # Re-align the hit's residues onto the mmCIF SEQRES (AF2: kalign).
    region_to_chain = align_template(hit.hit_sequence, seq)
    pairs = [(k, j) for k, j in enumerate(region_to_chain) if j >= 0]
    same = sum(hit.hit_sequence[k] == seq[j] for k, j in pairs)
    identity = same / max(1, min(len(hit.hit_sequence), len(seq)))
    if identity < MIN_REALIGN_IDENTITY:
        return None, (
            f"hit residues differ from the mmCIF SEQRES of chain {chain.chain_id} (realigned "
            f"identity {identity:.2f} < {MIN_REALIGN_IDENTITY})"
        )
    out = np.full_like(mapping, -1)
    rel = idx - hit.hit_start
    ok = (rel >= 0) & (rel < len(region_to_chain))
    out[aligned[ok]] = region_to_chain[rel[ok]]
    return out, f"re-aligned onto the mmCIF SEQRES (identity {identity:.2f})"


def select_templates(
    query: str,
    hits: Sequence[TemplateHit],
    mmcif_dirs,
    *,
    max_templates: int = 4,
    max_template_date: Optional[str] = None,
    obsolete: Optional[dict] = None,
    log: Optional[Callable[[str], None]] = None,
    structure_cache: Optional[dict] = None,
) -> TemplateSelection:
    """Check hits in order and featurise-ready the first ``max_templates`` that pass (AF2 rules above).

    Args:
        query: the query sequence (``N_res``); every hit's mapping has length ``N_res``.
        hits: from :func:`~.template_hits.read_template_hits` or the search.
        mmcif_dirs: one directory or a list, searched in order (:func:`find_mmcif`).
        max_templates: how many to keep (AF2: 4 at inference, 20 candidates in training).
        max_template_date: ``YYYY-MM-DD``; templates released later, or without a release date, are
            dropped.
        obsolete: :func:`parse_obsolete` output.
        log: receives one line per dropped hit (``template <name>: dropped: <reason>``).
        structure_cache: dict reused across calls (pdb id -> parsed :class:`Structure`).

    Returns:
        :class:`TemplateSelection`.

    Raises:
        InputError: ``max_template_date`` is not a date.
    """
    dirs = [mmcif_dirs] if isinstance(mmcif_dirs, (str, os.PathLike)) else list(mmcif_dirs or [])
    cutoff = _date(max_template_date)
    if max_template_date and cutoff is None:
        raise InputError(f"--max-template-date {max_template_date!r}: expected YYYY-MM-DD")
    obsolete = obsolete or {}
    cache = structure_cache if structure_cache is not None else {}
    n_res = len(query)
    out = TemplateSelection()

    def drop(hit: TemplateHit, reason: str, date: Optional[str] = None) -> None:
        out.choices.append(TemplateChoice(hit.name, "dropped", reason, hit.rank, date, hit.aligned_cols))
        if log:
            log(f"template {hit.name} ({hit.source}): dropped: {reason}")

    for hit in hits:
        if len(out.templates) >= max_templates:
            break
        if len(hit.mapping) != n_res:
            drop(hit, f"mapping covers {len(hit.mapping)} residues, the query has {n_res}")
            continue
        pdb_id, note = _successor(hit.pdb_id, obsolete)
        if pdb_id is None:
            drop(hit, note)
            continue
        path = find_mmcif(pdb_id, dirs)
        if path is None:
            drop(hit, f"no mmCIF for {pdb_id} in {', '.join(map(str, dirs)) or '(no --mmcif-dir)'}")
            continue
        if pdb_id not in cache:
            try:
                cache[pdb_id] = read_mmcif(path)
            except (InputError, OSError, ValueError) as exc:
                cache[pdb_id] = exc
        structure = cache[pdb_id]
        if isinstance(structure, Exception):
            drop(hit, f"mmCIF unreadable: {structure}")
            continue
        date = structure.release_date
        if cutoff is not None and _date(date) is None:
            drop(
                hit, f"no release date in {path.name}, so not shown to predate --max-template-date {cutoff.isoformat()}"
            )
            continue
        if cutoff is not None and _date(date) > cutoff:
            drop(hit, f"released {date}, after --max-template-date {cutoff.isoformat()}", date)
            continue
        if hit.aligned_cols / n_res <= MIN_ALIGN_RATIO:
            drop(hit, f"aligns {hit.aligned_cols} of {n_res} query residues (<= {MIN_ALIGN_RATIO:.0%})", date)
            continue
        if hit.hit_sequence in query and len(hit.hit_sequence) / n_res > MAX_SUBSEQUENCE_RATIO:
            drop(
                hit,
                f"identical to the query over {len(hit.hit_sequence)} of {n_res} residues "
                f"(> {MAX_SUBSEQUENCE_RATIO:.0%}; AF2 drops such templates)",
                date,
            )
            continue
        if len(hit.hit_sequence) < MIN_TEMPLATE_LENGTH:
            drop(hit, f"only {len(hit.hit_sequence)} hit residues (< {MIN_TEMPLATE_LENGTH})", date)
            continue
        chain = _chain_for(structure, hit)
        if chain is None:
            drop(hit, f"chain {hit.chain_id} not found in {path}", date)
            continue
        mapping, how = _mapping_on_chain(hit, chain)
        if mapping is None:
            drop(hit, how, date)
            continue
        out.templates.append((chain, mapping))
        reason = "; ".join(x for x in (note, how) if x)
        out.choices.append(TemplateChoice(hit.name, "used", reason, hit.rank, date, int((mapping >= 0).sum())))
    return out


def templates_from_hit_file(
    query: str, hits_path, mmcif_dirs, *, log: Callable[[str], None], **options
) -> Optional[TemplateSelection]:
    """:func:`~.template_hits.read_template_hits` then :func:`select_templates` (``options``: its
    keyword arguments). A hit file that cannot be read (damaged or truncated ``.hhr``/``.sto``)
    degrades the target to no templates: one ``warning:`` line naming the file goes to ``log`` and
    the result is ``None``; the target still runs.

    Raises:
        InputError: as :func:`select_templates` (a bad ``max_template_date``).
    """
    try:
        hits = read_template_hits(hits_path, len(query))
    except (InputError, OSError) as exc:
        log(f"warning: {' '.join(str(exc).split())}; running without templates")
        return None
    return select_templates(query, hits, mmcif_dirs, log=log, **options)
