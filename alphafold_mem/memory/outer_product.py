"""The outer product mean's outer product and output projection without the ``[*, N_res, N_res, C*C]``
tensor (AF2 Suppl. Alg. 10 lines 2-4; the outer product has C*C = 1,024 channels, eight times the
pair representation's 128).

The reference (:meth:`alphafold_mem.model.outer_product_mean.OuterProductMean._outer`) forms the
whole outer product of a chunk of rows, flattens it (a copy: the product comes out of the batched
matmul as ``[I, C, J, D]``) and projects it; with autograd the flattened product is saved for the
projection's weight gradient, and backward forms its gradient, the same size, again. Here the rows
are taken in blocks small enough that both copies of a block together are at most a pair
representation's worth of elements (:func:`outer_rows`); forward saves only the two projections
``a``, ``b`` (each ``[*, N_seq, N_res, C]``), and backward forms each block's outer product again
for the weight gradient. Gradients flow to a, b, the weight and the bias.

Cost: the recomputed product takes ``N_seq * N_res^2 * C*D`` multiply-adds, ``N_seq / c_out`` of the
projection's: 1/8 at N_seq 16 and c_out 128, but more than the projection itself for large MSAs
(512 clusters: 4x; the extra-MSA stack's 5,120 sequences: 40x).

Mixed precision: under autocast the inputs are cast to the autocast dtype as autocast would cast
them for the reference's matmul and linear, the blocks run in that dtype, the weight and bias
gradients are summed over blocks in fp32 (>= the parameter dtype) and every gradient is returned
in its input's dtype.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from ..precision import autocast_dtype
from .chunking import estimating


def outer_rows(n_res: int, c: int, d: int, c_out: int) -> int:
    """Rows per block: the largest r >= 1 with ``2 * r * n_res * c * d <= n_res * n_res * c_out``
    (the block's outer product and its flattened copy within one ``[N_res, N_res, c_out]`` tensor);
    ``n_res`` rows when everything fits."""
    return max(1, min(n_res, (n_res * c_out) // (2 * c * d)))


def _block_outer(a_blk: Tensor, b: Tensor) -> Tensor:
    """``[B, S, R, C]`` x ``[B, S, J, D]`` -> ``[B, R, J, C*D]`` (contiguous)."""
    return torch.einsum("bsrc,bsjd->brjcd", a_blk, b).reshape(a_blk.shape[0], a_blk.shape[2], b.shape[2], -1)


class _OuterProductLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, weight: Tensor, bias: Optional[Tensor], rows: int, cut: bool) -> Tensor:
        dtype = autocast_dtype(a)
        ctx.dtypes = (a.dtype, b.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.autocast_dtype = dtype
        ctx.rows = rows
        lead = a.shape[:-3]
        s, i, c = a.shape[-3:]
        j, d = b.shape[-2:]
        with torch.autocast(a.device.type, enabled=False):
            a3, b3, w, bb = (t if t is None or dtype is None else t.to(dtype) for t in (a, b, weight, bias))
            batch = math.prod(lead)  # not -1 in reshape: N_seq may be 0 (no extra sequences)
            a3, b3 = a3.reshape(batch, s, i, c), b3.reshape(batch, s, j, d)
            out = a3.new_empty(batch, i, j, weight.shape[0])
            starts = range(0, i, rows)
            for start in starts[:2] if cut else starts:
                n = min(rows, i - start)
                x = _block_outer(a3.narrow(2, start, n), b3)  # [B, n, J, C*D]
                out.narrow(1, start, n).copy_(torch.nn.functional.linear(x, w, bb))
                del x
        ctx.save_for_backward(a, b, weight)
        return out.reshape(*lead, i, j, weight.shape[0])

    @staticmethod
    def backward(ctx, grad: Tensor):
        a, b, weight = ctx.saved_tensors
        dtype = ctx.autocast_dtype
        acc = torch.promote_types(weight.dtype, torch.float32)
        lead = a.shape[:-3]
        s, i, c = a.shape[-3:]
        j, d = b.shape[-2:]
        cast = (lambda t: t) if dtype is None else (lambda t: t.to(dtype))
        batch = math.prod(lead)
        a3, b3, w = cast(a).reshape(batch, s, i, c), cast(b).reshape(batch, s, j, d), cast(weight)
        g3 = cast(grad).reshape(batch, i, j, weight.shape[0])
        need_a, need_b, need_w, need_bias = ctx.needs_input_grad[:4]
        da = torch.zeros_like(a3) if need_a else None
        db = (
            torch.zeros(b3.shape, dtype=torch.promote_types(b3.dtype, torch.float32), device=b3.device)
            if need_b
            else None
        )
        dw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        for start in range(0, i, ctx.rows):
            n = min(ctx.rows, i - start)
            a_blk, g_blk = a3.narrow(2, start, n), g3.narrow(1, start, n)  # [B, S, n, C], [B, n, J, c_out]
            if need_w:
                x = _block_outer(a_blk, b3)  # [B, n, J, C*D], recomputed
                dw.add_(torch.matmul(g_blk.reshape(-1, g_blk.shape[-1]).t(), x.reshape(-1, x.shape[-1])).to(acc))
                del x
            if need_a or need_b:
                gx = torch.matmul(g_blk, w).reshape(*g_blk.shape[:-1], c, d)  # [B, n, J, C, D]
                if need_a:
                    da.narrow(2, start, n).copy_(torch.einsum("brjcd,bsjd->bsrc", gx, b3))
                if need_b:
                    db.add_(torch.einsum("brjcd,bsrc->bsjd", gx, a_blk))
                del gx
        dbias = grad.reshape(-1, grad.shape[-1]).sum(0).to(ctx.dtypes[3]) if need_bias else None
        a_dtype, b_dtype, w_dtype, _ = ctx.dtypes
        return (
            None if da is None else da.reshape(*lead, s, i, c).to(a_dtype),
            None if db is None else db.reshape(*lead, s, j, d).to(b_dtype),
            None if dw is None else dw.to(w_dtype),
            dbias,
            None,
            None,
        )


def outer_product_linear(
    a: Tensor, b: Tensor, weight: Tensor, bias: Optional[Tensor] = None, rows: Optional[int] = None
) -> Tensor:
    """``linear(flatten(einsum("...sic,...sjd->...ijcd", a, b)), weight, bias)`` in row blocks,
    storing neither the outer product nor its gradient whole (module docstring).

    Args:
        a: ``[*, N_seq, I, C]``, b: ``[*, N_seq, J, D]`` (the projections, already masked);
        weight: ``[c_out, C*D]``; bias: ``[c_out]`` or None;
        rows: rows of ``I`` per block (default :func:`outer_rows` of ``J``, C, D, c_out).

    Returns:
        ``[*, I, J, c_out]``.

    Raises:
        ValueError: shapes that do not match (N_seq, leading dims, or the weight's C*D).
    """
    if a.shape[:-2] != b.shape[:-2] or a.dim() < 3:
        raise ValueError(f"outer product: a {tuple(a.shape)} and b {tuple(b.shape)} need the same [*, N_seq] dims")
    if weight.shape[-1] != a.shape[-1] * b.shape[-1]:
        raise ValueError(
            f"outer product: weight {tuple(weight.shape)} does not take {a.shape[-1]} x {b.shape[-1]} channels"
        )
    if rows is None:
        rows = outer_rows(b.shape[-2], a.shape[-1], b.shape[-1], weight.shape[0])
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    return _OuterProductLinear.apply(a, b, weight, bias, int(rows), estimating())


__all__ = ["outer_product_linear", "outer_rows"]
