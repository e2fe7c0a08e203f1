"""Outer product mean (Jumper et al. 2021, Suppl. Alg. 10)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from .primitives import LayerNorm, Linear


class OuterProductMean(nn.Module):
    """MSA -> pair update by the mean outer product over sequences (Suppl. Alg. 10).

    Forward: m ``[*, N_seq, N_res, c_m]``, msa_mask ``[*, N_seq, N_res]``.
    Returns ``[*, N_res, N_res, c_z]``: ``Linear(flatten(sum_s a_si ⊗ b_sj)) / (eps + sum_s mask_si mask_sj)``
    with eps 1e-3 (AF2 divides after the output projection, bias included).
    """

    def __init__(self, c_m: int, c_z: int, c_hidden: int, eps: float = 1e-3):
        super().__init__()
        self.eps = eps
        self.layer_norm_input = LayerNorm(c_m)
        self.left_projection = Linear(c_m, c_hidden)
        self.right_projection = Linear(c_m, c_hidden)
        self.output = Linear(c_hidden * c_hidden, c_z, init="final")

    def forward(self, m: Tensor, msa_mask: Tensor) -> Tensor:
        m = self.layer_norm_input(m)
        mask = msa_mask[..., None]  # [*, N_seq, N_res, 1]
        a = self.left_projection(m) * mask  # [*, N_seq, N_res, C]
        b = self.right_projection(m) * mask  # [*, N_seq, N_res, C]
        outer = torch.einsum("...sic,...sjd->...ijcd", a, b)  # [*, N_res, N_res, C, C]
        out = self.output(outer.flatten(-2))  # [*, N_res, N_res, c_z]
        norm = torch.einsum("...si,...sj->...ij", msa_mask, msa_mask)[..., None]  # [*, N_res, N_res, 1]
        return out / (self.eps + norm)
