"""Outer product mean (Jumper et al. 2021, Suppl. Alg. 10)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from ..memory.axes import WHOLE, Replicate, Shard, Slice, Split, declare, run_split
from ..memory.outer_product import outer_product_linear
from ..precision import fp32_island, fp32_region
from .primitives import LayerNorm, Linear, masked


class OuterProductMean(nn.Module):
    """MSA -> pair update by the mean outer product over sequences (Suppl. Alg. 10).

    Forward: m ``[*, N_seq, N_res, c_m]``, msa_mask ``[*, N_seq, N_res]``.
    Returns ``[*, N_res, N_res, c_z]``: ``Linear(flatten(sum_s a_si ⊗ b_sj)) / (eps + sum_s mask_si mask_sj)``
    with eps 1e-3 (AF2 divides after the output projection, bias included).

    ``chunk_size`` (memory policy) chunks the projections over MSA rows and the outer product
    ``[*, N_res, N_res, C, C]`` over its first residue axis i; device sharding gathers b piece by
    piece along j (the declared ``also``). ``add_to_`` (inference) adds the update into z chunk by
    chunk and keeps only b whole: each chunk projects its own columns of a. ``outer_product``
    (memory policy) ``"recompute"``: the outer product and its projection run in row blocks
    (:func:`alphafold_mem.memory.outer_product.outer_product_linear`), so neither the
    ``[*, I, N_res, C*C]`` product nor its gradient exists whole and backward recomputes it.
    """

    memory_spec = declare(
        splits={
            # pointwise in m: along MSA rows, or residue columns
            "project": Split(
                "msa_row",
                (Shard(-3), Slice(-2)),
                output=-3,
                also=Split("msa_column", (Shard(-2, columns=True), Slice(-1)), output=Shard(-2, columns=True)),
            ),
            # rows i of the outer product read a[:, i] and the whole of b (and the masks alike); its
            # columns j read b[:, j] and the whole of a
            "outer": Split(
                "pair_row",
                (Shard(-2, columns=True), Replicate(rows=-3), Slice(-1), WHOLE),
                output=-3,
                also=Split(
                    "pair_column", (WHOLE, Shard(-2, columns=True), WHOLE, Slice(-1)), output=Shard(-2, columns=True)
                ),
            ),
            # in place: b alone; then rows i read the MSA columns m[:, i] (for a) and the whole of b
            "project_right": Split(
                "msa_row",
                (Shard(-3), Slice(-2)),
                output=-3,
                also=Split("msa_column", (Shard(-2, columns=True), Slice(-1)), output=Shard(-2, columns=True)),
            ),
            "outer_from_msa": Split(
                "pair_row",
                (Shard(-2, columns=True), Replicate(rows=-3), Slice(-1), WHOLE),
                output=-3,
                also=Split(
                    "pair_column", (WHOLE, Shard(-2, columns=True), WHOLE, Slice(-1)), output=Shard(-2, columns=True)
                ),
            ),
        },
        seams=["outer_product"],
    )
    chunk_size: Optional[int] = None
    outer_product: str = "reference"

    def __init__(self, c_m: int, c_z: int, c_hidden: int, eps: float = 1e-3):
        super().__init__()
        self.eps = eps
        self.layer_norm_input = LayerNorm(c_m)
        self.left_projection = Linear(c_m, c_hidden)
        self.right_projection = Linear(c_m, c_hidden)
        self.output = Linear(c_hidden * c_hidden, c_z, init="final")

    def forward(self, m: Tensor, msa_mask: Tensor) -> Tensor:
        a, b = run_split(self, "project", self._project, m, msa_mask)  # 2 x [*, N_seq, N_res, C]
        return run_split(self, "outer", self._outer, a, b, msa_mask, msa_mask)  # [*, N_res, N_res, c_z]

    def add_to_(self, target: Tensor, m: Tensor, msa_mask: Tensor) -> Tensor:
        """``target += self(m, msa_mask)`` in place, row chunk by row chunk (inference). Returns ``target``."""
        b = run_split(self, "project_right", self._right, m, msa_mask)  # [*, N_seq, N_res, C]

        def rows(mc: Tensor, b_: Tensor, mask_i: Tensor, mask: Tensor) -> Tensor:
            a = masked(self.left_projection(self.layer_norm_input(mc)), mask_i)  # [*, N_seq, I, C]
            return self._outer(a, b_, mask_i, mask)

        return run_split(self, "outer_from_msa", rows, m, b, msa_mask, msa_mask, out=target, accumulate=True)

    def _right(self, m: Tensor, msa_mask: Tensor) -> Tensor:
        return masked(self.right_projection(self.layer_norm_input(m)), msa_mask)

    def _project(self, m: Tensor, msa_mask: Tensor) -> tuple[Tensor, Tensor]:
        m = self.layer_norm_input(m)
        return masked(self.left_projection(m), msa_mask), masked(self.right_projection(m), msa_mask)

    def _outer(self, a: Tensor, b: Tensor, mask_i: Tensor, mask: Tensor) -> Tensor:
        if self.outer_product == "recompute":
            out = outer_product_linear(a, b, self.output.weight, self.output.bias)  # [*, I, N_res, c_z]
        else:
            outer = torch.einsum("...sic,...sjd->...ijcd", a, b)  # [*, I, N_res, C, C]
            out = self.output(outer.flatten(-2))  # [*, I, N_res, c_z]
        # the count of sequences in fp32 (bf16 holds integers exactly only up to 256)
        with fp32_region(mask.device.type):
            norm = torch.einsum("...si,...sj->...ij", fp32_island(mask_i), fp32_island(mask))[
                ..., None
            ]  # [*, I, N_res, 1]
        return (out / (self.eps + norm)).to(out.dtype)
