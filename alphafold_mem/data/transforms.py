"""Per-sample feature transforms: MSA block deletion, crop, cluster sampling, masked MSA, cluster
summaries, msa_feat, padding and batching (Jumper et al. 2021, Suppl. 1.2.6-1.2.9).

The MSA transforms work on numpy arrays with an explicit ``np.random.Generator`` (reproducible per
sample, cheap in data-loader workers); :func:`pad_features` and :func:`collate` work on the final
torch tensors. Token alphabet of ``msa``: 0-19 amino acids (``restypes`` order), 20 = X, 21 = gap,
22 = the masked-MSA mask token (AF2 Suppl. 1.2.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "block_delete_msa", "crop_start", "sample_msa", "make_hhblits_profile", "make_masked_msa",
    "nearest_neighbor_clusters", "summarize_clusters", "make_msa_feat", "deletion_value",
    "pad_features", "Sample", "Batch", "collate",
]

NUM_MSA_CLASSES = 23  # 20 aa + X + gap + mask token
GAP = 21
MASK_TOKEN = 22


def block_delete_msa(num_seq: int, rng: np.random.Generator, *, fraction_per_block: float = 0.3,
                     num_blocks: int = 5) -> np.ndarray:
    """Rows kept after MSA block deletion (AF2 Suppl. 1.2.6, training only).

    ``num_blocks`` blocks of ``floor(fraction_per_block * num_seq)`` consecutive rows start at random
    rows and are deleted; the query (row 0) is always kept.

    Returns:
        Sorted int64 row indices, starting with 0.
    """
    block = int(num_seq * fraction_per_block)
    if num_seq <= 1 or block == 0:
        return np.arange(num_seq)
    starts = rng.integers(0, num_seq, size=num_blocks)
    deleted = np.clip(starts[:, None] + np.arange(block)[None, :], 0, num_seq - 1).ravel()
    keep = np.ones(num_seq, dtype=bool)
    keep[deleted] = False
    keep[0] = True
    return np.flatnonzero(keep)


def crop_start(num_res: int, crop_size: int, rng: np.random.Generator) -> int:
    """Start of a contiguous crop of ``crop_size`` residues, uniform over valid starts
    (AF2 Suppl. 1.2.8); 0 when the chain already fits."""
    if num_res <= crop_size:
        return 0
    return int(rng.integers(0, num_res - crop_size + 1))


def sample_msa(num_seq: int, max_clusters: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split MSA rows into cluster centres and the rest (AF2 Suppl. 1.2.7, ``sample_msa``).

    The query stays first; the other rows are shuffled; the first ``max_clusters`` rows become the
    cluster centres (``msa_feat`` rows), the remainder the extra MSA, in shuffled order.

    Returns:
        ``(cluster_rows, extra_rows)`` int64 index arrays into the MSA.
    """
    order = np.concatenate([[0], 1 + rng.permutation(max(num_seq - 1, 0))]).astype(np.int64)
    n = max(1, min(max_clusters, num_seq))
    return order[:n], order[n:]


def make_hhblits_profile(msa: np.ndarray) -> np.ndarray:
    """Per-column amino-acid frequencies over all rows, ``[N_res, 22]`` float32 (AF2
    ``make_hhblits_profile``: mean of ``one_hot(msa, 22)``)."""
    num_seq, num_res = msa.shape
    counts = np.zeros((num_res, 22), dtype=np.float32)
    np.add.at(counts, (np.broadcast_to(np.arange(num_res), msa.shape), np.minimum(msa, 21)), 1.0)
    return counts / max(num_seq, 1)


def make_masked_msa(msa: np.ndarray, profile: np.ndarray, rng: np.random.Generator, *,
                    replace_fraction: float = 0.15, uniform_prob: float = 0.1,
                    profile_prob: float = 0.1, same_prob: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style MSA corruption (AF2 Suppl. 1.2.7, ``make_masked_msa``).

    Each position is selected with probability ``replace_fraction``; a selected token becomes a
    uniformly random amino acid (``uniform_prob``), a sample of the column profile
    (``profile_prob``), stays the same (``same_prob``) or becomes the mask token 22 (the rest).

    Args:
        msa: ``[N_seq, N_res]`` int tokens 0-21.
        profile: ``[N_res, 22]`` from :func:`make_hhblits_profile`.

    Returns:
        ``(masked_msa [N_seq, N_res] int64, bert_mask [N_seq, N_res] float32)``.
    """
    num_seq, num_res = msa.shape
    mask_prob = 1.0 - uniform_prob - profile_prob - same_prob
    probs = np.zeros((num_seq, num_res, NUM_MSA_CLASSES), dtype=np.float32)
    probs[..., :20] = uniform_prob / 20.0
    probs[..., :22] += profile_prob * profile[None]
    np.put_along_axis(probs, msa[..., None], np.take_along_axis(probs, msa[..., None], -1) + same_prob, -1)
    probs[..., MASK_TOKEN] = mask_prob
    cum = np.cumsum(probs, axis=-1)
    u = rng.random((num_seq, num_res, 1), dtype=np.float32) * cum[..., -1:]
    replacement = np.minimum((cum < u).sum(-1), NUM_MSA_CLASSES - 1)
    bert_mask = rng.random((num_seq, num_res)) < replace_fraction
    masked = np.where(bert_mask, replacement, msa).astype(np.int64)
    return masked, bert_mask.astype(np.float32)


def nearest_neighbor_clusters(msa: np.ndarray, msa_mask: np.ndarray, extra_msa: np.ndarray,
                              extra_mask: np.ndarray) -> np.ndarray:
    """Assign every extra row to the cluster centre it agrees with most (AF2
    ``nearest_neighbor_clusters`` with gap agreement weight 0): agreement counts positions where both
    rows carry the same amino acid or X; gaps and mask tokens do not count.

    Args:
        msa: ``[N_clust, N_res]`` centre tokens (after masking), ``msa_mask`` likewise;
        extra_msa: ``[N_extra, N_res]`` tokens, ``extra_mask`` likewise.

    Returns:
        ``[N_extra]`` int64 centre index (ties: lowest index).
    """
    if extra_msa.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    agreement = np.zeros((extra_msa.shape[0], msa.shape[0]), dtype=np.float32)
    centre_ok = msa_mask > 0
    extra_ok = extra_mask > 0
    for token in range(21):  # 20 amino acids + X; gap (21) and mask (22) carry weight 0
        c = ((msa == token) & centre_ok).astype(np.float32)
        if not c.any():
            continue
        e = ((extra_msa == token) & extra_ok).astype(np.float32)
        agreement += e @ c.T  # [N_extra, N_res] @ [N_res, N_clust]
    return agreement.argmax(axis=1).astype(np.int64)


def summarize_clusters(msa: np.ndarray, msa_mask: np.ndarray, deletion_matrix: np.ndarray,
                       extra_msa: np.ndarray, extra_mask: np.ndarray, extra_deletion: np.ndarray,
                       assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cluster profiles and mean deletions over each centre and its assigned extra rows (AF2
    ``summarize_clusters``; counts carry a 1e-6 floor).

    Returns:
        ``cluster_profile [N_clust, N_res, 23]`` and ``cluster_deletion_mean [N_clust, N_res]``,
        float32.
    """
    num_clust, num_res = msa.shape
    res = np.arange(num_res)
    counts = 1e-6 + msa_mask.astype(np.float32)
    profile = np.zeros((num_clust, num_res, NUM_MSA_CLASSES), dtype=np.float32)
    np.put_along_axis(profile, msa[..., None], 1.0, axis=-1)
    del_sum = deletion_matrix.astype(np.float32).copy()
    if extra_msa.shape[0]:
        w = extra_mask.astype(np.float32)
        flat = (assignment[:, None] * num_res + res[None, :]) * NUM_MSA_CLASSES + extra_msa
        profile += np.bincount(flat.ravel(), weights=w.ravel(),
                               minlength=num_clust * num_res * NUM_MSA_CLASSES
                               ).reshape(profile.shape).astype(np.float32)
        cell = (assignment[:, None] * num_res + res[None, :]).ravel()
        counts += np.bincount(cell, weights=w.ravel(), minlength=num_clust * num_res
                              ).reshape(num_clust, num_res).astype(np.float32)
        del_sum += np.bincount(cell, weights=(w * extra_deletion).ravel(), minlength=num_clust * num_res
                               ).reshape(num_clust, num_res).astype(np.float32)
    return profile / counts[..., None], del_sum / counts


def deletion_value(d: np.ndarray) -> np.ndarray:
    return (np.arctan(d / 3.0) * (2.0 / np.pi)).astype(np.float32)


def make_msa_feat(msa: np.ndarray, deletion_matrix: np.ndarray, cluster_profile: np.ndarray,
                  cluster_deletion_mean: np.ndarray) -> np.ndarray:
    """``msa_feat [N_clust, N_res, 49]`` float32 (AF2 Suppl. 1.2.9, Table 1): ``one_hot(msa, 23)``,
    ``has_deletion``, ``atan(d/3)*2/pi``, ``cluster_profile`` (23), ``atan(mean_d/3)*2/pi``."""
    n, r = msa.shape
    one_hot = np.zeros((n, r, NUM_MSA_CLASSES), dtype=np.float32)
    np.put_along_axis(one_hot, msa[..., None], 1.0, axis=-1)
    return np.concatenate([
        one_hot,
        np.clip(deletion_matrix, 0.0, 1.0).astype(np.float32)[..., None],
        deletion_value(deletion_matrix)[..., None],
        cluster_profile.astype(np.float32),
        deletion_value(cluster_deletion_mean)[..., None],
    ], axis=-1)


# ----------------------------------------------------------------------------------------------
# Padding and batching

def _symbolic_dims(key: str) -> tuple[str, ...]:
    """Leading symbolic dims of a feature (from ``features.FEATURES``; imported late: no cycle)."""
    from .features import FEATURES

    spec = FEATURES.get(key)
    if spec is None:
        return ()
    return tuple(d for d in spec.shape if isinstance(d, str))


def pad_features(features: Mapping[str, Tensor], sizes: Mapping[str, int]) -> dict[str, Tensor]:
    """Zero-pad every feature to fixed sizes (padding rows/residues get zero masks).

    Args:
        features: one sample, no batch dim, keys of ``features.FEATURES`` (unknown keys pass through).
        sizes: target size per symbolic dim, e.g. ``{"N_res": 256, "N_seq": 128, "N_extra": 1024,
            "N_templ": 4}``; dims not given keep their size.

    Raises:
        ValueError: a feature is larger than the requested size (naming key, dim and sizes).
    """
    out = {}
    for key, value in features.items():
        dims = _symbolic_dims(key)
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
            raise ValueError(f"sample {ids[i]!r} has keys {sorted(set(f) ^ keys)} that sample {ids[0]!r} "
                             "does not share")
    sizes: dict[str, int] = {}
    for f in feats:
        for key, value in f.items():
            for axis, dim in enumerate(_symbolic_dims(key)):
                sizes[dim] = max(sizes.get(dim, 0), int(value.shape[axis]))
    padded = [pad_features(f, sizes) for f in feats]
    return Batch(ids, {k: torch.stack([p[k] for p in padded]) for k in feats[0]})
