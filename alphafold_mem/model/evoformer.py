"""Evoformer and extra-MSA stacks (Jumper et al. 2021, Suppl. Alg. 6 and 18).

The stacks hold their blocks in ``self.blocks`` (a ``ModuleList``) and run them through
:func:`alphafold_mem.memory.checkpoint.run_blocks`, in order; whether segments of blocks are
activation checkpoints is the memory policy's choice, bound from outside
(:func:`alphafold_mem.bind`) as ``checkpoint_every``. The blocks' one memory seam is
``inplace`` (also set by the policy): residual updates then modify m and z in place when no gradient
is recorded, and each chunk's update is added as soon as it is computed (no update-sized buffer).
Seam ``offload`` (inference on an accelerator, ``"idle"`` or more): the block's MSA representation
waits in host memory while the pair updates run (they do not read it).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from ..config import StackConfig
from ..memory.axes import Shard, Slice, Split, declare, run_split
from ..memory.checkpoint import run_blocks
from ..memory.offload import Parked, offload_active
from .msa import MSAColumnAttention, MSAColumnGlobalAttention, MSARowAttentionWithPairBias
from .outer_product_mean import OuterProductMean
from .pair_stack import PairStackUpdates
from .primitives import Linear, SharedDropout, Transition, residual_update


class EvoformerBlock(nn.Module):
    """One Evoformer block (Suppl. Alg. 6); with ``global_column=True`` the extra-MSA block of
    Alg. 18, whose column attention is global (Alg. 19). ``cfg.opm_first``: AF2-Multimer's order,
    the outer product mean before the MSA row attention.

    Forward: m ``[*, N_seq, N_res, c_m]``, z ``[*, N_res, N_res, c_z]``, msa_mask ``[*, N_seq, N_res]``,
    pair_mask ``[*, N_res, N_res]``. Returns the updated ``(m, z)``.
    """

    memory_spec = declare(seams=["inplace", "offload"])
    inplace: bool = False
    offload: str = "none"

    def __init__(self, c_m: int, c_z: int, cfg: StackConfig, global_column: bool = False):
        super().__init__()
        self.msa_row_attention_with_pair_bias = MSARowAttentionWithPairBias(
            c_m, c_z, cfg.c_hidden_msa_att, cfg.num_heads_msa
        )
        if global_column:
            self.msa_column_attention = MSAColumnGlobalAttention(c_m, cfg.c_hidden_msa_att, cfg.num_heads_msa)
        else:
            self.msa_column_attention = MSAColumnAttention(c_m, cfg.c_hidden_msa_att, cfg.num_heads_msa)
        self.msa_transition = Transition(c_m, cfg.transition_n)
        self.outer_product_mean = OuterProductMean(c_m, c_z, cfg.c_hidden_opm)
        self.pair_updates = PairStackUpdates(
            c_z, cfg.c_hidden_mul, cfg.c_hidden_pair_att, cfg.num_heads_pair, cfg.transition_n, cfg.pair_dropout
        )
        self.msa_dropout = SharedDropout(cfg.msa_dropout, shared_dim=-3)
        self.opm_first = cfg.opm_first

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor) -> tuple[Tensor, Tensor]:
        ip = self.inplace
        if self.opm_first:  # AF2-Multimer's order
            z = residual_update(z, self.outer_product_mean, None, m, msa_mask, inplace=ip)
        m = residual_update(m, self.msa_row_attention_with_pair_bias, self.msa_dropout, m, z, msa_mask, inplace=ip)
        m = residual_update(m, self.msa_column_attention, None, m, msa_mask, inplace=ip)
        m = residual_update(m, self.msa_transition, None, m, msa_mask, inplace=ip)
        if not self.opm_first:
            z = residual_update(z, self.outer_product_mean, None, m, msa_mask, inplace=ip)
        park = self.offload != "none" and not torch.is_grad_enabled() and offload_active(m.device)
        parked = Parked(m) if park else None
        z = self.pair_updates(z, pair_mask)
        if parked is not None:
            m = parked.restore()
        return m, z


def _run_msa_blocks(
    stack: nn.Module, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """``stack.blocks`` on (m, z); an empty stack (``num_blocks=0``) returns m and z unchanged."""
    if len(stack.blocks) == 0:
        return m, z
    return run_blocks(stack, m, z, msa_mask, pair_mask)


class EvoformerStack(nn.Module):
    """The Evoformer trunk (Suppl. Alg. 6, 48 blocks in AF2) and the single projection of m[0].

    Forward: m ``[*, N_seq, N_res, c_m]``, z ``[*, N_res, N_res, c_z]``, masks as in
    :class:`EvoformerBlock`. Returns ``(m, z, s)`` with s ``[*, N_res, c_s]`` = Linear(m[0]).
    """

    # s is per residue: under device sharding every device holds it whole
    memory_spec = declare(
        stack="evoformer", splits={"single": Split("msa_column", (Shard(-2, columns=True),), output=Slice(-2))}
    )
    checkpoint_every: int = 0
    chunk_size: Optional[int] = None

    def __init__(self, c_m: int, c_z: int, c_s: int, cfg: StackConfig):
        super().__init__()
        self.blocks = nn.ModuleList([EvoformerBlock(c_m, c_z, cfg) for _ in range(cfg.num_blocks)])
        self.single_activations = Linear(c_m, c_s)

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        m, z = _run_msa_blocks(self, m, z, msa_mask, pair_mask)
        s = run_split(self, "single", self.single_activations, m[..., 0, :, :])
        return m, z, s


class ExtraMsaStack(nn.Module):
    """The extra-MSA stack (Suppl. Alg. 18): Evoformer blocks with global column attention that
    update the pair representation from a large, unclustered MSA.

    Forward: e ``[*, N_extra, N_res, c_e]``, z, extra_msa_mask ``[*, N_extra, N_res]``, pair_mask.
    Returns the updated z ``[*, N_res, N_res, c_z]``.
    """

    memory_spec = declare(stack="extra_msa")
    checkpoint_every: int = 0

    def __init__(self, c_e: int, c_z: int, cfg: StackConfig):
        super().__init__()
        self.blocks = nn.ModuleList([EvoformerBlock(c_e, c_z, cfg, global_column=True) for _ in range(cfg.num_blocks)])

    def forward(self, e: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor) -> Tensor:
        e, z = _run_msa_blocks(self, e, z, msa_mask, pair_mask)
        return z
