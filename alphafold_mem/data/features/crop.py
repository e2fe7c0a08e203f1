"""Residue-dimension sizing: training crops (:func:`crop_start`, :func:`crop_indices`; Jumper et al.
2021, Suppl. 1.2.8, plus an optional cheap spatial crop) and zero-padding of a finished sample to
fixed sizes per symbolic dim (:func:`pad_features`, dims from :mod:`.spec`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from ...geometry import residue_constants as rc
from ..structure import ProteinChain
from .spec import symbolic_dims

__all__ = ["crop_start", "crop_indices", "pad_features"]


def crop_start(num_res: int, crop_size: int, rng: np.random.Generator) -> int:
    """Start of a contiguous crop of ``crop_size`` residues, uniform over valid starts
    (AF2 Suppl. 1.2.8); 0 when the chain already fits."""
    if num_res <= crop_size:
        return 0
    return int(rng.integers(0, num_res - crop_size + 1))


def crop_indices(
    n_res: int, crop_size: int, rng: np.random.Generator, structure: ProteinChain | None, spatial_prob: float
) -> np.ndarray:
    """Residue indices of a training crop: contiguous (AF2 monomer, Suppl. 1.2.8), or with
    probability ``spatial_prob`` the ``crop_size`` residues whose CA is nearest to a random resolved
    residue's CA (cheap O(N_res) spatial crop; unresolved residues are ranked last)."""
    if n_res <= crop_size:
        return np.arange(n_res)
    if structure is not None and spatial_prob > 0 and rng.random() < spatial_prob:
        ca = rc.atom_order["CA"]
        resolved = np.flatnonzero(structure.atom37_mask[:, ca] > 0)
        if resolved.size:
            centre = structure.atom37_positions[rng.choice(resolved), ca]
            d = np.linalg.norm(structure.atom37_positions[:, ca] - centre, axis=-1)
            d[structure.atom37_mask[:, ca] == 0] = np.inf
            return np.sort(np.argsort(d, kind="stable")[:crop_size])
    start = crop_start(n_res, crop_size, rng)
    return np.arange(start, start + crop_size)


def pad_features(features: Mapping[str, Tensor], sizes: Mapping[str, int]) -> dict[str, Tensor]:
    """Zero-pad every feature to fixed sizes (padding rows/residues get zero masks).

    Args:
        features: one sample, no batch dim, keys of :data:`~.spec.FEATURES` (unknown keys pass
            through).
        sizes: target size per symbolic dim, e.g. ``{"N_res": 256, "N_seq": 128, "N_extra": 1024,
            "N_templ": 4}``; dims not given keep their size.

    Raises:
        ValueError: a feature is larger than the requested size (naming key, dim and sizes).
    """
    out = {}
    for key, value in features.items():
        dims = symbolic_dims(key)
        if not dims or not isinstance(value, Tensor):
            out[key] = value
            continue
        pad = []
        for axis, dim in enumerate(dims):
            target = sizes.get(dim, value.shape[axis])
            if value.shape[axis] > target:
                raise ValueError(f"feature '{key}' has {dim}={value.shape[axis]} > requested {target}")
            pad.append(target - value.shape[axis])
        if any(pad):
            spec = [0, 0] * (value.dim() - len(dims))
            for p in reversed(pad):
                spec += [0, p]
            value = torch.nn.functional.pad(value, spec)
        out[key] = value
    return out
