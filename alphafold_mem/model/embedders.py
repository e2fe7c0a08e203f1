"""Input, relative-position, recycling and extra-MSA embedders (Jumper et al. 2021, Suppl. Alg. 3-5, 32).

Each embedder declares its output as a step (``memory_spec``): the MSA embeddings along residue
columns, the pair embeddings along pair rows. Chunking then bounds their transients (the
relative-position one-hot, the distogram), and device sharding makes every device embed only its
own columns / rows from the inputs, which all devices hold whole.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..memory.axes import WHOLE, Shard, Slice, Split, declare, run_split
from .primitives import LayerNorm, Linear


def dgram_from_positions(x: Tensor, num_bins: int, min_bin: float, max_bin: float,
                         x_j: Optional[Tensor] = None) -> Tensor:
    """One-hot distogram of pairwise distances (Suppl. Alg. 32 line 1; template features 1.7.1).

    Args:
        x: positions ``[*, N, 3]`` in Å (the rows i).
        num_bins, min_bin, max_bin: ``num_bins`` lower edges evenly spaced from ``min_bin`` to
            ``max_bin`` (Å); the last bin is open-ended.
        x_j: positions of the columns j ``[*, M, 3]`` (default: x).

    Returns:
        ``[*, N, M, num_bins]`` (dtype of x).
    """
    x_j = x if x_j is None else x_j
    lower = torch.linspace(min_bin, max_bin, num_bins, device=x.device, dtype=x.dtype) ** 2
    upper = torch.cat([lower[1:], lower.new_tensor([1e8])])
    d2 = ((x[..., :, None, :] - x_j[..., None, :, :]) ** 2).sum(-1, keepdim=True)  # [*, N, M, 1]
    return ((d2 > lower) & (d2 < upper)).to(x.dtype)


class InputEmbedder(nn.Module):
    """Embeds target_feat and msa_feat into m and z, with relative position encoding (Alg. 3-4).

    Forward: target_feat ``[*, N_res, tf_dim]``, residue_index ``[*, N_res]``,
    msa_feat ``[*, N_seq, N_res, msa_dim]``. Returns m ``[*, N_seq, N_res, c_m]`` and
    z ``[*, N_res, N_res, c_z]``.
    """

    memory_spec = declare(splits={
        # m[s, i] reads msa_feat[s, i] and target_feat[i]
        "msa": Split("msa_column", (Slice(-2), Slice(-2)), output=Shard(-2, columns=True)),
        # z[i, j] reads target_feat and residue_index at i and at j
        "pair": Split("pair_row", (Slice(-2), WHOLE, Slice(-1), WHOLE), output=-3),
    })
    chunk_size: Optional[int] = None

    def __init__(self, tf_dim: int, msa_dim: int, c_m: int, c_z: int, relpos_k: int):
        super().__init__()
        self.relpos_k = relpos_k
        self.preprocess_1d = Linear(tf_dim, c_m)
        self.preprocess_msa = Linear(msa_dim, c_m)
        self.left_single = Linear(tf_dim, c_z)
        self.right_single = Linear(tf_dim, c_z)
        self.pair_activations = Linear(2 * relpos_k + 1, c_z)  # AF2 name: pair_activiations

    def relpos(self, residue_index: Tensor, dtype: torch.dtype, residue_index_j: Optional[Tensor] = None) -> Tensor:
        """Alg. 4: one-hot of clip(r_i - r_j, -k, k) + k, projected to c_z (``residue_index_j``: the
        columns' indices, default the same)."""
        r_j = residue_index if residue_index_j is None else residue_index_j
        d = residue_index[..., :, None] - r_j[..., None, :]  # [*, N_res, N_res]
        d = torch.clamp(d, -self.relpos_k, self.relpos_k) + self.relpos_k
        return self.pair_activations(F.one_hot(d.long(), 2 * self.relpos_k + 1).to(dtype))

    def forward(self, target_feat: Tensor, residue_index: Tensor, msa_feat: Tensor) -> tuple[Tensor, Tensor]:
        m = run_split(self, "msa", self._msa, msa_feat, target_feat)  # [*, N_seq, N_res, c_m]
        z = run_split(self, "pair", self._pair, target_feat, target_feat, residue_index, residue_index)
        return m, z  # z: [*, N_res, N_res, c_z]

    def _msa(self, msa_feat: Tensor, target_feat: Tensor) -> Tensor:
        return self.preprocess_msa(msa_feat) + self.preprocess_1d(target_feat)[..., None, :, :]

    def _pair(self, tf_i: Tensor, tf_j: Tensor, ri_i: Tensor, ri_j: Tensor) -> Tensor:
        z = self.left_single(tf_i)[..., :, None, :] + self.right_single(tf_j)[..., None, :, :]
        return z + self.relpos(ri_i, z.dtype, ri_j)


class RecyclingEmbedder(nn.Module):
    """Embeds the previous iteration's m[0], z and pseudo-beta positions (Suppl. Alg. 32).

    Forward: m0_prev ``[*, N_res, c_m]``, z_prev ``[*, N_res, N_res, c_z]``, x_prev (pseudo-beta
    positions) ``[*, N_res, 3]`` in Å. Returns the updates for m[0] and z.
    """

    memory_spec = declare(splits={
        # z_update[i, j] reads z_prev[i, j] and the positions of i and j
        "pair": Split("pair_row", (Shard(-3), Slice(-2), WHOLE), output=-3),
    })
    chunk_size: Optional[int] = None

    def __init__(self, c_m: int, c_z: int, num_bins: int, min_bin: float, max_bin: float):
        super().__init__()
        self.num_bins, self.min_bin, self.max_bin = num_bins, min_bin, max_bin
        self.prev_pos_linear = Linear(num_bins, c_z)
        self.prev_msa_first_row_norm = LayerNorm(c_m)
        self.prev_pair_norm = LayerNorm(c_z)

    def forward(self, m0_prev: Tensor, z_prev: Tensor, x_prev: Tensor) -> tuple[Tensor, Tensor]:
        z_update = run_split(self, "pair", self._pair, z_prev, x_prev, x_prev)
        return self.prev_msa_first_row_norm(m0_prev), z_update

    def _pair(self, z_prev: Tensor, x_i: Tensor, x_j: Tensor) -> Tensor:
        dgram = dgram_from_positions(x_i, self.num_bins, self.min_bin, self.max_bin, x_j)
        return self.prev_pos_linear(dgram) + self.prev_pair_norm(z_prev)


class ExtraMsaEmbedder(nn.Module):
    """Embeds the extra MSA (Suppl. Alg. 2 line 14): [one_hot(extra_msa, 23), has_deletion,
    deletion_value] (25 channels) -> c_e.

    Forward: extra_msa ``[*, N_extra, N_res]`` (int, 0-21), extra_has_deletion and
    extra_deletion_value ``[*, N_extra, N_res]``. Returns ``[*, N_extra, N_res, c_e]``.
    """

    memory_spec = declare(splits={
        "columns": Split("msa_column", (Slice(-1), Slice(-1), Slice(-1)), output=Shard(-2, columns=True))})
    chunk_size: Optional[int] = None

    def __init__(self, c_e: int, num_classes: int = 23):
        super().__init__()
        self.num_classes = num_classes
        self.extra_msa_activations = Linear(num_classes + 2, c_e)

    def forward(self, extra_msa: Tensor, extra_has_deletion: Tensor, extra_deletion_value: Tensor) -> Tensor:
        return run_split(self, "columns", self._embed, extra_msa, extra_has_deletion, extra_deletion_value)

    def _embed(self, extra_msa: Tensor, extra_has_deletion: Tensor, extra_deletion_value: Tensor) -> Tensor:
        dtype = extra_has_deletion.dtype
        feat = torch.cat(
            [F.one_hot(extra_msa.long(), self.num_classes).to(dtype),
             extra_has_deletion[..., None], extra_deletion_value[..., None]], dim=-1)  # [*, N_extra, N_res, 25]
        return self.extra_msa_activations(feat)
