"""MSA attention modules (Jumper et al. 2021, Suppl. Alg. 7, 8, 19).

``chunk_size`` (bound by the memory policy) chunks the independent axis: MSA rows for row attention,
residue columns for column attention; the LayerNorm runs inside the chunk so no normalised copy of
the whole MSA exists. Each class declares its steps in ``memory_spec``: the row attention's steps
are also independent along the query columns (given the whole MSA as keys and the bias rows of
those queries), which is how device sharding gathers the pair bias piece by piece.
"""

from __future__ import annotations

from typing import Optional

import torch.nn as nn
from torch import Tensor

from ..memory.axes import WHOLE, Replicate, Shard, Slice, Split, declare, run_split
from .primitives import Attention, GlobalAttention, LayerNorm, Linear, mask_bias


class MSARowAttentionWithPairBias(nn.Module):
    """Row-wise gated self-attention with pair bias (Suppl. Alg. 7).

    Forward: m ``[*, N_seq, N_res, c_m]``, z ``[*, N_res, N_res, c_z]``, msa_mask ``[*, N_seq, N_res]``.
    Returns the update ``[*, N_seq, N_res, c_m]``.
    """

    memory_spec = declare(
        splits={
            # the bias [*, N_res (q), N_res (k), H] every MSA row reads whole; pointwise in z
            "pair_bias": Split(
                "pair_row",
                (Shard(-3),),
                output=-3,
                also=Split("pair_column", (Shard(-2, columns=True),), output=Shard(-2, columns=True)),
            ),
            # MSA rows read their own rows (queries and keys), mask rows and the whole bias; query
            # columns q read m[:, q], all of m as keys, the whole mask and the bias rows q
            "rows": Split(
                "msa_row",
                (Shard(-3), Shard(-3), Slice(-2), Replicate(rows=-3)),
                output=-3,
                also=Split(
                    "msa_column", (Shard(-2, columns=True), WHOLE, WHOLE, Shard(-3)), output=Shard(-2, columns=True)
                ),
            ),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_m: int, c_z: int, c_hidden: int, num_heads: int, inf: float = 1e9):
        super().__init__()
        self.inf = inf
        self.query_norm = LayerNorm(c_m)
        self.feat_2d_norm = LayerNorm(c_z)
        self.feat_2d_weights = Linear(c_z, num_heads, bias=False, init="default")
        self.attention = Attention(c_m, c_m, c_hidden, num_heads)

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor) -> Tensor:
        return self._run(m, z, msa_mask, None)

    def add_to_(self, target: Tensor, m: Tensor, z: Tensor, msa_mask: Tensor) -> Tensor:
        """``target += self(m, z, msa_mask)`` in place, row chunk by row chunk (inference; ``target``
        may be m). Returns ``target``."""
        return self._run(m, z, msa_mask, target)

    def _run(self, m: Tensor, z: Tensor, msa_mask: Tensor, target: Optional[Tensor]) -> Tensor:
        pair_bias = run_split(
            self, "pair_bias", lambda zc: self.feat_2d_weights(self.feat_2d_norm(zc)), z
        )  # [*, N_res, N_res, H]
        return run_split(self, "rows", self._rows, m, m, msa_mask, pair_bias, out=target, accumulate=target is not None)

    def _rows(self, mq: Tensor, mkv: Tensor, mask: Tensor, pair_bias: Tensor) -> Tensor:
        """Queries ``[*, S, Q, c_m]``, keys ``[*, S, N_res, c_m]`` (the same tensor unless split by
        query columns), key mask ``[*, S, N_res]``, bias rows ``[*, Q, N_res, H]``."""
        q = self.query_norm(mq)
        kv = q if mkv is mq else self.query_norm(mkv)
        key_bias = mask_bias(mask, self.inf)[..., :, None, None, :]  # [*, S, 1, 1, N_res]
        bias = pair_bias.movedim(-1, -3).unsqueeze(-4)  # [*, 1, H, Q, N_res], shared by all rows
        return self.attention(q, kv, [key_bias, bias])


class MSAColumnAttention(nn.Module):
    """Column-wise gated self-attention (Suppl. Alg. 8), or with ``global_attention=True`` the
    column-wise global attention of the extra-MSA stack (Suppl. Alg. 19).

    Forward: m ``[*, N_seq, N_res, c_m]`` (the extra MSA ``[*, N_extra, N_res, c_e]`` for the global
    variant), msa_mask ``[*, N_seq, N_res]``. Returns the update.
    """

    memory_spec = declare(
        splits={"columns": Split("msa_column", (Shard(-2, columns=True), Slice(-1)), output=Shard(-2, columns=True))}
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_m: int, c_hidden: int, num_heads: int, inf: float = 1e9, global_attention: bool = False):
        super().__init__()
        self.inf, self.global_attention = inf, global_attention
        self.query_norm = LayerNorm(c_m)
        if global_attention:
            self.attention = GlobalAttention(c_m, c_hidden, num_heads, inf=inf)
        else:
            self.attention = Attention(c_m, c_m, c_hidden, num_heads)

    def forward(self, m: Tensor, msa_mask: Tensor) -> Tensor:
        return run_split(self, "columns", self._columns, m, msa_mask)

    def add_to_(self, target: Tensor, m: Tensor, msa_mask: Tensor) -> Tensor:
        """``target += self(m, msa_mask)`` in place, column chunk by column chunk (inference; ``target``
        may be m). Returns ``target``."""
        return run_split(self, "columns", self._columns, m, msa_mask, out=target, accumulate=True)

    def _columns(self, m: Tensor, msa_mask: Tensor) -> Tensor:
        m = self.query_norm(m.transpose(-2, -3))  # [*, N_res, N_seq, c_m]
        mask = msa_mask.transpose(-1, -2)  # [*, N_res, N_seq]
        if self.global_attention:
            return self.attention(m, mask).transpose(-2, -3)
        key_bias = mask_bias(mask, self.inf)[..., :, None, None, :]  # [*, N_res, 1, 1, N_seq]
        return self.attention(m, m, [key_bias]).transpose(-2, -3)


class MSAColumnGlobalAttention(MSAColumnAttention):
    """Column-wise global attention (Suppl. Alg. 19): :class:`MSAColumnAttention` with
    ``global_attention=True``."""

    memory_spec = MSAColumnAttention.memory_spec

    def __init__(self, c_e: int, c_hidden: int, num_heads: int, inf: float = 1e9):
        super().__init__(c_e, c_hidden, num_heads, inf=inf, global_attention=True)
