"""The pair updates of one block (Jumper et al. 2021, Suppl. Alg. 6 lines 6-10 and Alg. 16):
triangle multiplications, triangle attentions and the pair transition, each a residual update with
row- or column-shared dropout. The Evoformer (and extra-MSA) block runs the multiplications first;
the template pair stack runs the attentions first (``attention_first``): one implementation, two
orders.
"""

from __future__ import annotations

import torch.nn as nn
from torch import Tensor

from ..memory.axes import declare
from .primitives import SharedDropout, Transition, residual_update
from .triangle import TriangleAttention, TriangleMultiplication


class PairStackUpdates(nn.Module):
    """Triangle multiplications (Alg. 11-12), triangle attentions (Alg. 13-14) and the pair
    transition (Alg. 15) on a pair representation, each a residual update.

    Args:
        c: channels of the pair representation (c_z, or c_t in the template stack).
        c_hidden_mul: channels of the triangle multiplication's projections.
        c_hidden_att: per-head channels of the triangle attention.
        num_heads: heads of the triangle attention.
        transition_n: the transition's hidden-layer factor.
        dropout_rate: row-/column-shared dropout of every update but the transition (Suppl. 1.11.6).
        attention_first: the template pair stack's order (attention, then multiplication).

    Forward: z ``[*, N_res, N_res, c]``, pair_mask ``[*, N_res, N_res]``. Returns the updated z.
    ``inplace`` (memory policy): residual updates in place, chunk by chunk, when no gradient is
    recorded and dropout is off.
    """

    memory_spec = declare(seams=["inplace"])
    inplace: bool = False

    def __init__(
        self,
        c: int,
        c_hidden_mul: int,
        c_hidden_att: int,
        num_heads: int,
        transition_n: int,
        dropout_rate: float,
        attention_first: bool = False,
    ):
        super().__init__()
        self.attention_first = attention_first
        # created in the order they run, so a seeded initialisation draws the same numbers as ever
        for kind in ("attention", "multiplication") if attention_first else ("multiplication", "attention"):
            if kind == "multiplication":
                self.triangle_multiplication_outgoing = TriangleMultiplication(c, c_hidden_mul, outgoing=True)
                self.triangle_multiplication_incoming = TriangleMultiplication(c, c_hidden_mul, outgoing=False)
            else:
                self.triangle_attention_starting_node = TriangleAttention(c, c_hidden_att, num_heads, starting=True)
                self.triangle_attention_ending_node = TriangleAttention(c, c_hidden_att, num_heads, starting=False)
        self.pair_transition = Transition(c, transition_n)
        self.dropout_row = SharedDropout(dropout_rate, shared_dim=-3)
        self.dropout_col = SharedDropout(dropout_rate, shared_dim=-2)

    def forward(self, z: Tensor, pair_mask: Tensor) -> Tensor:
        multiplications = [
            (self.triangle_multiplication_outgoing, self.dropout_row),
            (self.triangle_multiplication_incoming, self.dropout_row),
        ]
        attentions = [
            (self.triangle_attention_starting_node, self.dropout_row),
            (self.triangle_attention_ending_node, self.dropout_col),
        ]
        order = attentions + multiplications if self.attention_first else multiplications + attentions
        for update, dropout in order:
            z = residual_update(z, update, dropout, z, pair_mask, inplace=self.inplace)
        return residual_update(z, self.pair_transition, None, z, pair_mask, inplace=self.inplace)


__all__ = ["PairStackUpdates"]
