"""Triangular updates of the pair representation (Jumper et al. 2021, Suppl. Alg. 11-14)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from .primitives import Attention, LayerNorm, Linear, mask_bias


class TriangleMultiplication(nn.Module):
    """Triangular multiplicative update, "outgoing" (Alg. 11) or "incoming" (Alg. 12) edges.

    Outgoing: ``x_ij = sum_k a_ik * b_jk``; incoming: ``x_ij = sum_k a_kj * b_ki`` with AF2's
    left (a) / right (b) projection names, so AF2 parameters load without any swap.

    Forward: z ``[*, N_res, N_res, c_z]``, pair_mask ``[*, N_res, N_res]``. Returns the update.
    """

    def __init__(self, c_z: int, c_hidden: int, outgoing: bool):
        super().__init__()
        self.outgoing = outgoing
        self.layer_norm_input = LayerNorm(c_z)
        self.left_projection = Linear(c_z, c_hidden)
        self.right_projection = Linear(c_z, c_hidden)
        self.left_gate = Linear(c_z, c_hidden, init="gating")
        self.right_gate = Linear(c_z, c_hidden, init="gating")
        self.center_layer_norm = LayerNorm(c_hidden)
        self.output_projection = Linear(c_hidden, c_z, init="final")
        self.gating_linear = Linear(c_z, c_z, init="gating")

    def forward(self, z: Tensor, pair_mask: Tensor) -> Tensor:
        z = self.layer_norm_input(z)
        mask = pair_mask[..., None]
        a = self.left_projection(z) * torch.sigmoid(self.left_gate(z)) * mask  # [*, I, J, C]
        b = self.right_projection(z) * torch.sigmoid(self.right_gate(z)) * mask  # [*, I, J, C]
        if self.outgoing:
            x = torch.einsum("...ikc,...jkc->...ijc", a, b)
        else:
            x = torch.einsum("...kjc,...kic->...ijc", a, b)
        x = self.output_projection(self.center_layer_norm(x))  # [*, N_res, N_res, c_z]
        return x * torch.sigmoid(self.gating_linear(z))


class TriangleAttention(nn.Module):
    """Triangle self-attention around the starting (Alg. 13) or ending (Alg. 14) node.

    Starting node: for each row i, ``z_ij`` attends over ``z_ik`` with bias ``b_jk``. The ending
    node is the same computation on the transposed pair representation.

    Forward: z ``[*, N_res, N_res, c_z]``, pair_mask ``[*, N_res, N_res]``. Returns the update.
    """

    def __init__(self, c_z: int, c_hidden: int, num_heads: int, starting: bool, inf: float = 1e9):
        super().__init__()
        self.starting, self.inf = starting, inf
        self.query_norm = LayerNorm(c_z)
        self.feat_2d_weights = Linear(c_z, num_heads, bias=False, init="default")
        self.attention = Attention(c_z, c_z, c_hidden, num_heads)

    def forward(self, z: Tensor, pair_mask: Tensor) -> Tensor:
        if not self.starting:
            z, pair_mask = z.transpose(-2, -3), pair_mask.transpose(-1, -2)
        z = self.query_norm(z)
        tri_bias = self.feat_2d_weights(z).movedim(-1, -3).unsqueeze(-4)  # [*, 1, H, N_res, N_res]
        key_bias = mask_bias(pair_mask, self.inf)[..., :, None, None, :]  # [*, N_res, 1, 1, N_res]
        out = self.attention(z, z, [key_bias, tri_bias])
        return out if self.starting else out.transpose(-2, -3)
