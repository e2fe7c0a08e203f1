"""Input, relative-position, recycling and extra-MSA embedders (Jumper et al. 2021, Suppl. Alg. 3-5, 32)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..memory.axes import exempt
from .primitives import LayerNorm, Linear


def dgram_from_positions(x: Tensor, num_bins: int, min_bin: float, max_bin: float) -> Tensor:
    """One-hot distogram of pairwise distances (Suppl. Alg. 32 line 1; template features 1.7.1).

    Args:
        x: positions ``[*, N, 3]`` in Å.
        num_bins, min_bin, max_bin: ``num_bins`` lower edges evenly spaced from ``min_bin`` to
            ``max_bin`` (Å); the last bin is open-ended.

    Returns:
        ``[*, N, N, num_bins]`` (dtype of x).
    """
    lower = torch.linspace(min_bin, max_bin, num_bins, device=x.device, dtype=x.dtype) ** 2
    upper = torch.cat([lower[1:], lower.new_tensor([1e8])])
    d2 = ((x[..., :, None, :] - x[..., None, :, :]) ** 2).sum(-1, keepdim=True)  # [*, N, N, 1]
    return ((d2 > lower) & (d2 < upper)).to(x.dtype)


class InputEmbedder(nn.Module):
    """Embeds target_feat and msa_feat into m and z, with relative position encoding (Alg. 3-4).

    Forward: target_feat ``[*, N_res, tf_dim]``, residue_index ``[*, N_res]``,
    msa_feat ``[*, N_seq, N_res, msa_dim]``. Returns m ``[*, N_seq, N_res, c_m]`` and
    z ``[*, N_res, N_res, c_z]``.
    """

    memory_spec = exempt("writes m and z once per iteration; not chunked (its largest transient is the "
                         "[*, N_res, N_res, 2k+1] relative-position one-hot)")

    def __init__(self, tf_dim: int, msa_dim: int, c_m: int, c_z: int, relpos_k: int):
        super().__init__()
        self.relpos_k = relpos_k
        self.preprocess_1d = Linear(tf_dim, c_m)
        self.preprocess_msa = Linear(msa_dim, c_m)
        self.left_single = Linear(tf_dim, c_z)
        self.right_single = Linear(tf_dim, c_z)
        self.pair_activations = Linear(2 * relpos_k + 1, c_z)  # AF2 name: pair_activiations

    def relpos(self, residue_index: Tensor, dtype: torch.dtype) -> Tensor:
        """Alg. 4: one-hot of clip(r_i - r_j, -k, k) + k, projected to c_z."""
        d = residue_index[..., :, None] - residue_index[..., None, :]  # [*, N_res, N_res]
        d = torch.clamp(d, -self.relpos_k, self.relpos_k) + self.relpos_k
        return self.pair_activations(F.one_hot(d.long(), 2 * self.relpos_k + 1).to(dtype))

    def forward(self, target_feat: Tensor, residue_index: Tensor, msa_feat: Tensor) -> tuple[Tensor, Tensor]:
        tf_m = self.preprocess_1d(target_feat)  # [*, N_res, c_m]
        m = self.preprocess_msa(msa_feat) + tf_m[..., None, :, :]  # [*, N_seq, N_res, c_m]
        z = self.left_single(target_feat)[..., :, None, :] + self.right_single(target_feat)[..., None, :, :]
        z = z + self.relpos(residue_index, z.dtype)  # [*, N_res, N_res, c_z]
        return m, z


class RecyclingEmbedder(nn.Module):
    """Embeds the previous iteration's m[0], z and pseudo-beta positions (Suppl. Alg. 32).

    Forward: m0_prev ``[*, N_res, c_m]``, z_prev ``[*, N_res, N_res, c_z]``, x_prev (pseudo-beta
    positions) ``[*, N_res, 3]`` in Å. Returns the updates for m[0] and z.
    """

    memory_spec = exempt("once per iteration; not chunked (its largest transient is the [*, N_res, N_res, 15] "
                         "distogram)")

    def __init__(self, c_m: int, c_z: int, num_bins: int, min_bin: float, max_bin: float):
        super().__init__()
        self.num_bins, self.min_bin, self.max_bin = num_bins, min_bin, max_bin
        self.prev_pos_linear = Linear(num_bins, c_z)
        self.prev_msa_first_row_norm = LayerNorm(c_m)
        self.prev_pair_norm = LayerNorm(c_z)

    def forward(self, m0_prev: Tensor, z_prev: Tensor, x_prev: Tensor) -> tuple[Tensor, Tensor]:
        dgram = dgram_from_positions(x_prev, self.num_bins, self.min_bin, self.max_bin)
        z_update = self.prev_pos_linear(dgram) + self.prev_pair_norm(z_prev)
        return self.prev_msa_first_row_norm(m0_prev), z_update


class ExtraMsaEmbedder(nn.Module):
    """Embeds the extra MSA (Suppl. Alg. 2 line 14): [one_hot(extra_msa, 23), has_deletion,
    deletion_value] (25 channels) -> c_e.

    Forward: extra_msa ``[*, N_extra, N_res]`` (int, 0-21), extra_has_deletion and
    extra_deletion_value ``[*, N_extra, N_res]``. Returns ``[*, N_extra, N_res, c_e]``.
    """

    memory_spec = exempt("writes the extra-MSA representation once; not chunked (its transient is the "
                         "[*, N_extra, N_res, 25] input features)")

    def __init__(self, c_e: int, num_classes: int = 23):
        super().__init__()
        self.num_classes = num_classes
        self.extra_msa_activations = Linear(num_classes + 2, c_e)

    def forward(self, extra_msa: Tensor, extra_has_deletion: Tensor, extra_deletion_value: Tensor) -> Tensor:
        dtype = extra_has_deletion.dtype
        feat = torch.cat(
            [F.one_hot(extra_msa.long(), self.num_classes).to(dtype),
             extra_has_deletion[..., None], extra_deletion_value[..., None]], dim=-1)  # [*, N_extra, N_res, 25]
        return self.extra_msa_activations(feat)
