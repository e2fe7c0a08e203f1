"""The recycling dimension of training features (Jumper et al. 2021, Suppl. 1.10; OpenFold's layout).

In training AF2 re-samples the MSA clusters (and the masked-MSA targets) for every recycling
iteration, so a training sample carries one set of MSA features per iteration. As in OpenFold,
every feature then has a trailing recycling dim ``R``; iteration ``i`` of
``AlphaFold.forward(batch, recycle_dim=-1)`` reads ``feature[..., i]``, and the loss reads the slice
of the last iteration run. Features that do not change between iterations (crop, templates, ground
truth) are the same in every slice.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import Tensor

__all__ = ["add_recycling_dim", "first_iterations", "last_iteration"]


def add_recycling_dim(features: Mapping[str, Tensor], slices: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """``features`` with a trailing recycling dim of size ``len(slices)``.

    Args:
        features: one sample, no recycling dim.
        slices: per iteration, the features that differ between iterations (same keys and shapes in
            every slice; e.g. ``msa_feat``, ``bert_mask``); every other feature is repeated.

    Returns:
        ``{key: [..., R]}`` (repeated features are expanded views, not copies).

    Raises:
        ValueError: no slices, or slices with different keys.
    """
    if not slices:
        raise ValueError("add_recycling_dim needs at least one slice")
    keys = set(slices[0])
    if any(set(s) != keys for s in slices[1:]):
        raise ValueError("every recycling slice must hold the same features")
    r = len(slices)
    out = {k: v.unsqueeze(-1).expand(*v.shape, r) for k, v in features.items() if k not in keys}
    out.update({k: torch.stack([s[k] for s in slices], dim=-1) for k in keys})
    return out


def first_iterations(features: Mapping[str, Tensor], n: int) -> dict[str, Tensor]:
    """The first ``n`` recycling slices of every feature ``[..., R]`` -> ``[..., n]``."""
    return {k: v[..., :n] for k, v in features.items()}


def last_iteration(features: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The slice of the last iteration, what the loss reads: ``[..., R]`` -> ``[...]``."""
    return {k: v[..., -1] for k, v in features.items()}
