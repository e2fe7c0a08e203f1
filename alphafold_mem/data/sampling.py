"""Which training chains are used and how often they are drawn (AF2 Suppl. 1.2.5, OpenFold's
``OpenFoldDataset`` filters and cluster weights, AF2 Suppl. 1.3 self-distillation).

* :class:`ChainFilters`: the chain filters of a training set, each with its drop reason
  (:mod:`.drops`) -- resolution (``--max-resolution``), release date (``--max-release-date``), a chain
  list (``--filter-file``), obsolete entries (``--obsolete``), and chains without an alignment folder.
  **Unknown resolution** (the structure has no resolution item, e.g. solution NMR) **passes**, as in
  OpenFold: its mmCIF parser records such entries as 0.0 Å and its ``resolution_filter``
  (``resolution <= max``) keeps them.
* :func:`read_cluster_file` / :func:`cluster_sizes`: an MMseqs2 / OpenFold cluster file (one cluster
  per line, chain ids ``<pdbid>_<chain>`` separated by spaces; e.g. the 40 % identity clusters of
  ``mmseqs easy-cluster --min-seq-id 0.4``); a chain's sampling weight is 1 / (size of its cluster)
  (a chain in no cluster is its own cluster of size 1).
* :func:`length_factor`: AF2's ``max(min(N_res, 512), 256) / 512``.
* :func:`draw_source`: self-distillation mixing, one uniform draw per sample against
  ``distillation_prob`` (OpenFold's default 0.75).
* :func:`mask_low_plddt`: AF2's self-distillation filter: residues whose predicted pLDDT (the
  B-factor column of the distillation structures) is below 70 leave the loss (their atoms masked).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from .errors import InputError
from .text import check_file, open_text

__all__ = [
    "ChainFilters",
    "read_cluster_file",
    "read_chain_list",
    "cluster_sizes",
    "length_factor",
    "draw_source",
    "has_alignments",
    "mask_low_plddt",
    "DISTILLATION_PROB",
    "MIN_DISTILLATION_PLDDT",
    "NO_ALIGNMENT_REASON",
]

#: OpenFold ``config.data.train.distillation_prob``.
DISTILLATION_PROB = 0.75
#: AF2 Suppl. 1.3: residues of a self-distillation structure predicted with pLDDT below this are masked.
MIN_DISTILLATION_PLDDT = 70.0
#: The report reason of a chain without an alignment folder.
NO_ALIGNMENT_REASON = "no alignment folder"


def _date(text, what: str) -> Optional[_dt.date]:
    if text in (None, ""):
        return None
    try:
        return _dt.date.fromisoformat(str(text)[:10])
    except ValueError as exc:
        raise InputError(f"{what} {text!r}: expected YYYY-MM-DD") from exc


def read_chain_list(path: str | os.PathLike) -> set[str]:
    """Chain ids (``<pdbid>_<chain>``, first word of each non-empty line; ``#`` comments skipped) of a
    ``--filter-file``; the PDB id is lower-cased, the chain id kept as written."""
    path = check_file(path)
    out = set()
    with open_text(path) as fh:
        for line in fh:
            words = line.split("#", 1)[0].split()
            if words:
                out.add(_chain_key(words[0]))
    return out


def _chain_key(name: str) -> str:
    pdb, sep, chain = name.partition("_")
    return f"{pdb.lower()}{sep}{chain}"


def read_cluster_file(path: str | os.PathLike) -> list[list[str]]:
    """Clusters of an MMseqs2 / OpenFold cluster file: one cluster per line, chain ids separated by
    whitespace. Raises :class:`InputError` (file and line) when a chain id appears twice."""
    path = check_file(path)
    clusters, seen = [], {}
    with open_text(path) as fh:
        for number, line in enumerate(fh, 1):
            members = [_chain_key(w) for w in line.split()]
            for m in members:
                if m in seen:
                    raise InputError(f"chain {m} is in two clusters (lines {seen[m]} and {number})", file=path)
                seen[m] = number
            if members:
                clusters.append(members)
    return clusters


def cluster_sizes(clusters: Sequence[Sequence[str]]) -> dict[str, int]:
    """Chain id -> the number of chains in its cluster (as listed in the cluster file)."""
    return {m: len(c) for c in clusters for m in c}


def length_factor(n_res: int) -> float:
    """AF2 Suppl. 1.2.5: ``max(min(N_res, 512), 256) / 512``."""
    return max(min(n_res, 512), 256) / 512


@dataclass(frozen=True)
class ChainFilters:
    """Chain filters of a training set (each returns a :mod:`.drops` reason).

    Attributes:
        max_resolution: Å; chains above are dropped (AF2 Suppl. 1.2.5: 9 Å). Unknown passes (see the
            module docstring).
        max_release_date: ``YYYY-MM-DD``; chains released later (or without a release date under a
            cut-off) are dropped.
        chains: keep only these chain ids (``--filter-file``); ``None``: all.
        obsolete: obsolete PDB id -> successor (:func:`~.templates_from_hits.parse_obsolete`): chains of
            an obsolete entry are dropped (their successor is indexed in its own right).
        require_alignments: drop chains without alignments (neither an alignment folder nor an entry
            in the alignment database: :func:`has_alignments`); otherwise they are kept (single
            sequence) and counted as a note.
    """

    max_resolution: float = 9.0
    max_release_date: Optional[str] = None
    chains: Optional[frozenset] = None
    obsolete: Optional[Mapping[str, Optional[str]]] = None
    require_alignments: bool = False

    def __post_init__(self):
        _date(self.max_release_date, "--max-release-date")  # fail at start-up, not per chain

    def reason(self, entry: dict) -> Optional[tuple[str, str]]:
        """``(reason, detail)`` when ``entry`` (an index entry) is filtered out, else None."""
        res = entry.get("resolution")
        if res is not None and res > self.max_resolution:
            return "resolution above the limit", f"resolution {res} Å > {self.max_resolution} Å"
        cutoff = _date(self.max_release_date, "--max-release-date")
        if cutoff is not None:
            try:
                released = _date(entry.get("release_date"), "release date")
            except InputError:
                released = None
            if released is None:
                return "no release date", f"no release date, so not shown to predate {cutoff.isoformat()}"
            if released > cutoff:
                return "released after the cut-off", f"released {released.isoformat()} > {cutoff.isoformat()}"
        if self.chains is not None and _chain_key(entry.get("name", "")) not in self.chains:
            return "not in the chain list", "not listed in --filter-file"
        pdb_id = str(entry.get("pdb_id", "")).lower()
        if self.obsolete and pdb_id in self.obsolete:
            successor = self.obsolete[pdb_id]
            return "obsolete entry", f"{pdb_id} is obsolete" + (f" (replaced by {successor})" if successor else "")
        if self.require_alignments and not has_alignments(entry):
            return NO_ALIGNMENT_REASON, "no alignment folder (--require-alignments)"
        return None


def has_alignments(entry: dict) -> bool:
    """Whether an index entry has alignments: an alignment folder (``alignment_dir``) or an entry of
    OpenFold's alignment database (``alignment_db``)."""
    return bool(entry.get("alignment_dir") or entry.get("alignment_db"))


def draw_source(rng: np.random.Generator, distillation_prob: float) -> bool:
    """One draw: True = take this sample from the self-distillation set (probability
    ``distillation_prob``), False = from the PDB set."""
    return bool(rng.random() < distillation_prob)


def mask_low_plddt(atom37_mask: np.ndarray, b_factors: np.ndarray, threshold: float = MIN_DISTILLATION_PLDDT):
    """``[N_res, 37]`` atom mask with every residue whose pLDDT (mean B-factor of its present atoms, as
    predicted structures store it) is below ``threshold`` set to 0. Returns ``(mask, plddt [N_res])``."""
    mask = np.asarray(atom37_mask, dtype=np.float32)
    present = mask.sum(-1)
    plddt = (np.asarray(b_factors, dtype=np.float32) * mask).sum(-1) / np.maximum(present, 1)
    keep = (plddt >= threshold) & (present > 0)
    return mask * keep[:, None].astype(np.float32), plddt
