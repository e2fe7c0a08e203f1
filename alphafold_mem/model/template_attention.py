"""Template pointwise attention (Jumper et al. 2021, Suppl. Alg. 17): every pair position (i, j) of z
attends over the templates' pair activations at (i, j).

Two ways to run it (``MemoryPolicy.templates``):

* batched (the reference): :meth:`TemplatePointwiseAttention.forward` on the stacked
  ``[*, N_templ, N_res, N_res, c_t]`` activations of all templates;
* streamed: the caller computes one template at a time and folds it into a running state with an
  online softmax (Milakov & Gimelshein 2018; the form of Rabe & Staats 2021): per position and
  head, ``lse`` (log-sum-exp of the logits so far, fp32) and ``o`` (the softmax-weighted values so
  far, already normalised). For a new template with logit s and values v::

      lse' = logaddexp(lse, s),   o' = o * exp(lse - lse') + v * exp(s - lse')

  which after the last template is exactly ``softmax(s) . v`` (the first template sets
  ``lse = s, o = v``). So the stacked activations never exist; the state is ``[*, N_res, N_res,
  H * C]`` plus ``[*, N_res, N_res, H]``. The queries are projected once, before the templates.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from ..memory.axes import WHOLE, Shard, Split, declare, run_split
from .primitives import Attention, mask_bias


class TemplatePointwiseAttention(nn.Module):
    """Attention of each pair position over the templates (Suppl. Alg. 17), no gating.

    Forward (batched): z ``[*, N_res, N_res, c_z]``, t ``[*, N_templ, N_res, N_res, c_t]``,
    template_mask ``[*, N_templ]``. Returns ``[*, N_res, N_res, c_z]``. ``chunk_size`` (memory
    policy) chunks the pair rows i. Streamed: :meth:`queries`, :meth:`fold` per template,
    :meth:`output` (see the module docstring).
    """

    memory_spec = declare(
        splits={
            "rows": Split("pair_row", (Shard(-3), Shard(-3), WHOLE), output=-3),
            # streamed: the scaled queries from z rows; a template's rows folded into the state rows
            # (q, t, o, lse; the template's mask bias whole); the output projection of the state rows
            "queries": Split("pair_row", (Shard(-3),), output=-3),
            "fold": Split("pair_row", (Shard(-3), Shard(-3), Shard(-3), Shard(-3), WHOLE), output=-3),
            "first": Split("pair_row", (Shard(-3), Shard(-3), WHOLE), output=-3),
            "output": Split("pair_row", (Shard(-3), WHOLE), output=-3),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_z: int, c_t: int, c_hidden: int, num_heads: int, inf: float = 1e5):
        super().__init__()
        self.inf = inf
        self.attention = Attention(c_z, c_t, c_hidden, num_heads, gating=False)

    def forward(self, z: Tensor, t: Tensor, template_mask: Tensor) -> Tensor:
        bias = mask_bias(template_mask, self.inf)[..., None, None, None, None, :]  # [*, 1, 1, 1, 1, N_templ]
        return run_split(self, "rows", self._rows, z, t, bias)

    def _rows(self, z: Tensor, t: Tensor, bias: Tensor) -> Tensor:
        t = t.movedim(-4, -2)  # [*, I, N_res, N_templ, c_t]
        out = self.attention(z[..., None, :], t, [bias])  # [*, I, N_res, 1, c_z]
        return out.squeeze(-2)

    # -- streamed ------------------------------------------------------------------------------------
    def queries(self, z: Tensor) -> Tensor:
        """Scaled queries ``[*, N_res, N_res, H * C]`` of z (as :class:`Attention` computes them)."""
        att = self.attention
        return run_split(self, "queries", lambda zc: att.linear_q(zc) * (att.c_hidden**-0.5), z)

    def _logits_values(self, q: Tensor, t: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        """Logits ``[*, I, J, H]`` (fp32, mask bias added) and values ``[*, I, J, H, C]`` of one template."""
        att = self.attention
        h, c = att.num_heads, att.c_hidden
        k = att.linear_k(t).unflatten(-1, (h, c))  # [*, I, J, H, C]
        v = att.linear_v(t).unflatten(-1, (h, c))
        s = torch.matmul(q.unflatten(-1, (h, c))[..., None, :], k[..., :, None])[..., 0, 0]  # [*, I, J, H]
        s = s.to(torch.promote_types(s.dtype, torch.float32)) + bias
        return s, v

    def fold(
        self, state: Optional[tuple[Tensor, Tensor]], q: Tensor, t: Tensor, mask: Tensor, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Fold one template into the state.

        Args:
            state: ``(o [*, N_res, N_res, H * C], lse [*, N_res, N_res, H])`` or ``None`` before the first.
            q: :meth:`queries`; t: the template's activations ``[*, N_res, N_res, c_t]``;
            mask: its template mask ``[*]`` (0 or 1).
            inplace: update the state tensors in place, chunk by chunk (inference).

        Returns:
            The new state.
        """
        bias = mask_bias(mask, self.inf)[..., None, None, None]  # [*, 1, 1, 1]
        if state is None:

            def first(qc: Tensor, tc: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
                s, v = self._logits_values(qc, tc, b)
                return v.flatten(-2), s

            return run_split(self, "first", first, q, t, bias)

        def step(qc: Tensor, tc: Tensor, oc: Tensor, lc: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
            s, v = self._logits_values(qc, tc, b)
            top = torch.maximum(lc, s)
            new = top + torch.log(torch.exp(lc - top) + torch.exp(s - top))  # logaddexp, [*, I, J, H]
            o = oc.unflatten(-1, v.shape[-2:]) * torch.exp(lc - new)[..., None] + v * torch.exp(s - new)[..., None]
            return o.flatten(-2).to(oc.dtype), new

        o, lse = state
        out = (o, lse) if inplace and not torch.is_grad_enabled() else None
        return run_split(self, "fold", step, q, t, o, lse, bias, out=out)

    def output(self, o: Tensor, scale: Tensor, target: Optional[Tensor] = None) -> Tensor:
        """The update ``linear_o(o) * scale`` (``scale`` broadcastable to ``[*, 1, 1, 1]``, e.g. 0 when
        a sample has no templates); with ``target``, added into it in place chunk by chunk."""
        fn = lambda oc, sc: self.attention.linear_o(oc) * sc  # noqa: E731
        return run_split(self, "output", fn, o, scale, out=target, accumulate=target is not None)


__all__ = ["TemplatePointwiseAttention"]
