"""Cropping of complexes for training as AF2-Multimer (Evans et al. 2022, Suppl. 7.2).

A complex longer than the crop size is cut to ``crop_size`` residues by one of two rules, drawn
per example: a **spatial crop** with probability ``spatial_crop_prob``, else a **contiguous crop**.

* Contiguous crop (Suppl. 7.2.1): the chains are visited in a random order; chain ``k`` (length
  ``n_k``) keeps one contiguous run of ``m_k`` residues, ``m_k`` uniform on
  ``[min(n_k, max(0, budget - remaining)), min(budget, n_k)]`` where ``budget`` is what is left of
  the crop size and ``remaining`` the residues of the chains not yet visited; the run's start is
  uniform. The crop is filled exactly when the complex is long enough, and every chain can get
  residues.
* Spatial crop (Suppl. 7.2.2): an interface residue is drawn uniformly among the residues whose
  resolved Cα lies within ``interface_threshold`` (Å) of a resolved Cα of another chain; the crop is
  the ``crop_size`` residues whose resolved Cα are closest to it (unresolved residues last, ties by
  position). A complex without an interface gets a contiguous crop.

Published values (:data:`MULTIMER_CROP`): spatial probability 0.5, interface threshold 10 Å, crop
size 384 for initial training and 640 for fine-tuning (the values of OpenFold's multimer
training config). The interface here is measured between Cα atoms.

The crop is a sorted index array over the residues of the concatenated complex;
:func:`apply_crop` takes those rows of every per-residue feature (and those columns of the MSA
features), so a residue's features (atoms, ``aatype``, ``residue_index``, ``asym_id``, ``entity_id``,
``sym_id``, MSA column) always travel together. Draws are a pure function of the generator given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..geometry import residue_constants as rc

__all__ = [
    "MultimerCrop",
    "MULTIMER_CROP",
    "CropChoice",
    "ca_contacts",
    "interface_residues",
    "contiguous_crop",
    "spatial_crop",
    "choose_crop",
    "apply_crop",
    "RESIDUE_KEYS",
    "MSA_KEYS",
]

_CA = rc.atom_order["CA"]


@dataclass(frozen=True)
class MultimerCrop:
    """Crop settings: ``crop_size`` residues, ``spatial_crop_prob``, ``interface_threshold`` (Å)."""

    crop_size: int = 384
    spatial_crop_prob: float = 0.5
    interface_threshold: float = 10.0

    def __post_init__(self):
        if self.crop_size < 1:
            raise ValueError(f"crop_size {self.crop_size}: expected a positive number of residues")
        if not 0.0 <= self.spatial_crop_prob <= 1.0:
            raise ValueError(f"spatial_crop_prob {self.spatial_crop_prob}: expected a probability in [0, 1]")


#: Published settings: initial training (384 residues) and fine-tuning (640 residues).
MULTIMER_CROP = {"initial_training": MultimerCrop(384), "fine_tuning": MultimerCrop(640)}


@dataclass(frozen=True)
class CropChoice:
    """One crop: ``index`` ``[N_crop]`` sorted int64 rows of the complex; ``mode`` ``"spatial"``,
    ``"contiguous"`` or ``"none"`` (complex not longer than the crop); ``centre``: the interface
    residue of a spatial crop, else -1."""

    index: np.ndarray
    mode: str
    centre: int = -1


def _chain_bounds(asym_id: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of equal ``asym_id`` (chains are contiguous in the complex)."""
    edges = np.flatnonzero(np.diff(asym_id)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [len(asym_id)]])
    return [(int(s), int(e)) for s, e in zip(starts, ends)]


def ca_contacts(positions: np.ndarray, mask: np.ndarray, asym_id: np.ndarray, threshold: float):
    """Residue pairs of different chains whose resolved Cα atoms are within ``threshold`` Å, both
    orders, computed in blocks of 512 rows (memory O(512 * N_res)).

    Args:
        positions: ``[N_res, 37, 3]`` (Å) atom37 coordinates; mask ``[N_res, 37]``; asym_id ``[N_res]``.

    Returns:
        ``(i, j)``: two ``[N_pairs]`` int64 arrays of residue indices.
    """
    asym_id = np.asarray(asym_id)
    ok = np.flatnonzero(np.asarray(mask)[:, _CA] > 0)
    ca = np.asarray(positions, dtype=np.float64)[ok, _CA]
    chain = asym_id[ok]
    found_i, found_j = [], []
    for start in range(0, len(ca), 512):
        d = np.linalg.norm(ca[start : start + 512, None] - ca[None], axis=-1)
        rows, cols = np.nonzero((d < threshold) & (chain[start : start + 512, None] != chain[None]))
        found_i.append(ok[start + rows])
        found_j.append(ok[cols])
    if not found_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(found_i).astype(np.int64), np.concatenate(found_j).astype(np.int64)


def interface_residues(positions: np.ndarray, mask: np.ndarray, asym_id: np.ndarray, threshold: float) -> np.ndarray:
    """Residues with a resolved Cα within ``threshold`` Å of a resolved Cα of another chain
    (:func:`ca_contacts`).

    Args:
        positions: ``[N_res, 37, 3]`` (Å) atom37 coordinates; mask ``[N_res, 37]``; asym_id ``[N_res]``.

    Returns:
        ``[N_int]`` int64 sorted residue indices.
    """
    return np.unique(ca_contacts(positions, mask, asym_id, threshold)[0]).astype(np.int64)


def contiguous_crop(asym_id: np.ndarray, crop_size: int, rng: np.random.Generator) -> np.ndarray:
    """Suppl. 7.2.1 (module docstring). Returns sorted ``[min(crop_size, N_res)]`` int64 rows."""
    bounds = _chain_bounds(np.asarray(asym_id))
    remaining = sum(e - s for s, e in bounds)
    budget = crop_size
    picks = []
    for k in rng.permutation(len(bounds)):
        start, end = bounds[k]
        n = end - start
        remaining -= n
        hi = min(budget, n)
        lo = min(n, max(0, budget - remaining))
        m = int(rng.integers(lo, hi + 1))
        first = int(rng.integers(0, n - m + 1))
        picks.append(np.arange(start + first, start + first + m))
        budget -= m
    return np.sort(np.concatenate(picks)).astype(np.int64)


def spatial_crop(
    positions: np.ndarray,
    mask: np.ndarray,
    asym_id: np.ndarray,
    crop_size: int,
    threshold: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, int]:
    """Suppl. 7.2.2 (module docstring). Returns ``(sorted rows, centre)``; ``centre`` -1 (and a
    contiguous crop) when the complex has no interface."""
    candidates = interface_residues(positions, mask, asym_id, threshold)
    if candidates.size == 0:
        return contiguous_crop(asym_id, crop_size, rng), -1
    centre = int(candidates[rng.integers(candidates.size)])
    ca = positions[:, _CA].astype(np.float64)
    d = np.linalg.norm(ca - ca[centre], axis=-1)
    d[mask[:, _CA] <= 0] = np.inf
    return np.sort(np.argsort(d, kind="stable")[:crop_size]).astype(np.int64), centre


def choose_crop(
    positions: np.ndarray, mask: np.ndarray, asym_id: np.ndarray, settings: MultimerCrop, rng: np.random.Generator
) -> CropChoice:
    """Draw the crop of one complex (``[N_res, 37, 3]`` positions, ``[N_res, 37]`` mask, ``[N_res]``
    asym_id): spatial with probability ``settings.spatial_crop_prob``, else contiguous; the whole
    complex when it has at most ``crop_size`` residues (the draw is still taken, so the stream of
    draws does not depend on the length)."""
    asym_id = np.asarray(asym_id)
    spatial = bool(rng.random() < settings.spatial_crop_prob)
    n_res = asym_id.shape[0]
    if n_res <= settings.crop_size:
        return CropChoice(np.arange(n_res, dtype=np.int64), "none")
    if spatial:
        index, centre = spatial_crop(positions, mask, asym_id, settings.crop_size, settings.interface_threshold, rng)
        return CropChoice(index, "spatial" if centre >= 0 else "contiguous", centre)
    return CropChoice(contiguous_crop(asym_id, settings.crop_size, rng), "contiguous")


#: Features whose first dim is the residue.
RESIDUE_KEYS = (
    "aatype",
    "residue_index",
    "asym_id",
    "entity_id",
    "sym_id",
    "seq_mask",
    "deletion_mean",
    "all_atom_positions",
    "all_atom_mask",
)
#: Features whose second dim is the residue (``[N_seq, N_res]``).
MSA_KEYS = ("msa", "deletion_matrix", "msa_mask", "bert_mask")


def apply_crop(features: Mapping[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Rows ``index`` of every :data:`RESIDUE_KEYS` feature and columns ``index`` of every
    :data:`MSA_KEYS` feature; ``seq_length`` becomes the crop length; other keys pass unchanged.

    Raises:
        ValueError: ``index`` outside the complex, or a residue feature of another length.
    """
    n_res = int(np.asarray(features["aatype"]).shape[0])
    index = np.asarray(index, dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() >= n_res):
        raise ValueError(f"crop rows {index.min()}..{index.max()} are outside a complex of {n_res} residues")
    out = dict(features)
    for k in RESIDUE_KEYS:
        if k in out:
            if out[k].shape[0] != n_res:
                raise ValueError(f"feature {k!r} has {out[k].shape[0]} rows, expected {n_res} (one per residue)")
            out[k] = out[k][index]
    for k in MSA_KEYS:
        if k in out:
            out[k] = out[k][:, index]
    out["seq_length"] = np.asarray(index.size, np.int64)
    return out
