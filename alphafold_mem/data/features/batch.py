"""Samples and batches: :class:`Sample` (one example's feature tensors and its id), :class:`Batch`
(stacked samples with a leading batch dim) and :func:`collate`, which zero-pads every symbolic dim
(:mod:`.spec`) to the largest in the batch with :func:`~.crop.pad_features` and stacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import Tensor

from .crop import pad_features
from .spec import symbolic_dims

__all__ = ["Sample", "Batch", "collate"]


@dataclass
class Sample:
    """One training/prediction example: tensors only in ``features``, the id beside them."""

    sample_id: str
    features: dict


@dataclass
class Batch:
    """Stacked samples: ``features[key]`` has a leading batch dim ``B``; ``sample_ids`` has length B."""

    sample_ids: list
    features: dict

    def to(self, device) -> "Batch":
        """Move every tensor to ``device`` (returns a new Batch)."""
        return Batch(list(self.sample_ids), {k: v.to(device) for k, v in self.features.items()})


def collate(samples: Sequence[Sample | Mapping[str, Tensor]]) -> Batch:
    """Stack samples into a batch, zero-padding each symbolic dim to the largest in the batch.

    Accepts :class:`Sample` objects or plain feature dicts (ids then ``"sample_<i>"``). Every
    sample must have the same keys.
    """
    if not samples:
        raise ValueError("collate() needs at least one sample")
    ids, feats = [], []
    for i, s in enumerate(samples):
        if isinstance(s, Sample):
            ids.append(s.sample_id)
            feats.append(s.features)
        else:
            ids.append(f"sample_{i}")
            feats.append(dict(s))
    keys = set(feats[0])
    for i, f in enumerate(feats[1:], 1):
        if set(f) != keys:
            raise ValueError(
                f"sample {ids[i]!r} has keys {sorted(set(f) ^ keys)} that sample {ids[0]!r} does not share"
            )
    sizes: dict[str, int] = {}
    for f in feats:
        for key, value in f.items():
            for axis, dim in enumerate(symbolic_dims(key)):
                sizes[dim] = max(sizes.get(dim, 0), int(value.shape[axis]))
    padded = [pad_features(f, sizes) for f in feats]
    return Batch(ids, {k: torch.stack([p[k] for p in padded]) for k in feats[0]})
