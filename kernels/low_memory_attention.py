"""Low-memory attention (Rabe & Staats 2021, "Self-attention does not need O(n^2) memory").

:func:`low_memory_attention` is an attention core with the contract of
:func:`alphafold_mem.kernels.reference.attention` (``impl="chunked"`` of
:func:`alphafold_mem.kernels.attention`): queries in chunks, keys in chunks with a running max /
running sum (online softmax), and a backward pass that recomputes the probabilities chunk by chunk
from the saved row statistics instead of storing them. Forward, for one query row and key chunks
``c`` (m and l are accumulated with rescaling)::

    s_c = q k_c^T + b_c,   m = max_c max(s_c),   l = sum_c sum(exp(s_c - m)),
    o = sum_c exp(s_c - m) v_c / l

Backward (``dO`` given, ``D = rowsum(dO * o)``): per chunk ``p = exp(s - m) / l``, ``dv += p^T dO``,
``ds = p * (dO v^T - D)``, ``dq += ds k``, ``dk += ds^T q``, ``db += ds`` summed to the bias shape.
The row statistics m and l are saved separately rather than as ``lse = m + log(l)``: for a fully
masked row m is about -1e9, where fp32 cannot hold ``log(l)`` on top (its ulp is 64).
Statistics and accumulators are fp32 (fp64 for fp64 inputs); for half-precision inputs each chunk's
``q k^T`` and ``p v`` are also taken in fp32 (autocast off), as in :func:`.reference.attention`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from .reference import add_bias


def _stat_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _bias_slice(b: Tensor, qs: int, qn: int, ks: int, kn: int) -> Tensor:
    """The part of a bias broadcastable to ``[*, H, Q, K]`` for queries ``qs:qs+qn``, keys ``ks:ks+kn``."""
    if b.dim() >= 2 and b.shape[-2] != 1:
        b = b.narrow(-2, qs, qn)
    if b.shape[-1] != 1:
        b = b.narrow(-1, ks, kn)
    return b


def _logits(
    q: Tensor, k: Tensor, biases: Sequence[Tensor], qs: int, qn: int, ks: int, kn: int, sd: torch.dtype
) -> Tensor:
    # accumulated in sd from the (rounded) operands: one chunk of q and k widened, never a half-precision block
    s = torch.matmul(q.narrow(-2, qs, qn).to(sd), k.narrow(-2, ks, kn).to(sd).transpose(-1, -2))  # [*, H, qn, kn]
    for b in biases:  # s is a fresh buffer: added in place (no second logits-sized allocation)
        s = add_bias(s, _bias_slice(b, qs, qn, ks, kn))
    return s


#: Largest logits block (elements) one step of :func:`low_memory_attention` materialises, whatever
#: the leading (batch, row, head) dims: the query chunk shrinks below ``q_chunk`` to respect it.
MAX_LOGITS_ELEMENTS = 2**24


def _query_chunk(q: Tensor, k: Tensor, q_chunk: int, kv_chunk: int) -> int:
    rows = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    return max(1, min(q_chunk, MAX_LOGITS_ELEMENTS // max(1, rows * min(kv_chunk, k.shape[-2]))))


class _LowMemoryAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, q: Tensor, k: Tensor, v: Tensor, q_chunk: int, kv_chunk: int, cut: bool, *biases: Tensor
    ) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):  # the chunks' matmuls in sd, not autocast's dtype
            return _LowMemoryAttention._forward(ctx, q, k, v, q_chunk, kv_chunk, cut, *biases)

    @staticmethod
    def _forward(ctx, q: Tensor, k: Tensor, v: Tensor, q_chunk: int, kv_chunk: int, cut: bool, *biases: Tensor):
        sd = _stat_dtype(q)
        n_q, n_k = q.shape[-2], k.shape[-2]
        q_chunk = _query_chunk(q, k, q_chunk, kv_chunk)
        out = None
        # cut: the memory estimator's loop cut (first_chunks_only), decided outside this no-grad forward
        q_starts = range(0, n_q, q_chunk)[:2] if cut else range(0, n_q, q_chunk)
        kv_starts = range(0, n_k, kv_chunk)[:2] if cut else range(0, n_k, kv_chunk)
        for qs in q_starts:
            qn = min(q_chunk, n_q - qs)
            m_run = l_run = acc = None
            for ks in kv_starts:
                kn = min(kv_chunk, n_k - ks)
                s = _logits(q, k, biases, qs, qn, ks, kn, sd)  # [*, H, qn, kn]
                m_new = s.amax(-1) if m_run is None else torch.maximum(m_run, s.amax(-1))  # [*, H, qn]
                p = s.sub_(m_new[..., None]).exp_()  # in place: the logits buffer becomes p
                del s
                pv = torch.matmul(p, v.narrow(-2, ks, kn).to(sd))  # [*, H, qn, C_v], in sd as the reference
                if m_run is None:
                    l_run, acc = p.sum(-1), pv
                else:
                    alpha = torch.exp(m_run - m_new)
                    l_run = l_run * alpha + p.sum(-1)
                    acc = acc * alpha[..., None] + pv
                m_run = m_new
            o = acc / l_run[..., None]
            if out is None:
                out = torch.empty(*o.shape[:-2], n_q, o.shape[-1], dtype=v.dtype, device=o.device)
                row_max = o.new_empty(*o.shape[:-2], n_q)
                row_sum = o.new_empty(*o.shape[:-2], n_q)
            out.narrow(-2, qs, qn).copy_(o)
            row_max.narrow(-1, qs, qn).copy_(m_run)
            row_sum.narrow(-1, qs, qn).copy_(l_run)
        ctx.q_chunk, ctx.kv_chunk = q_chunk, kv_chunk
        ctx.save_for_backward(q, k, v, out, row_max, row_sum, *biases)
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor):
        q, k, v, out, row_max, row_sum, *biases = ctx.saved_tensors
        q_chunk, kv_chunk = ctx.q_chunk, ctx.kv_chunk
        sd = _stat_dtype(q)
        n_q, n_k = q.shape[-2], k.shape[-2]
        need_b = ctx.needs_input_grad[6:]
        d_out = d_out.to(sd)
        delta = (d_out * out.to(sd)).sum(-1)  # [*, H, Q]
        qf, kf, vf = q.to(sd), k.to(sd), v.to(sd)
        dq = torch.zeros_like(qf)
        dk = torch.zeros(torch.broadcast_shapes(k.shape[:-2], q.shape[:-2]) + k.shape[-2:], dtype=sd, device=k.device)
        dv = torch.zeros(torch.broadcast_shapes(v.shape[:-2], q.shape[:-2]) + v.shape[-2:], dtype=sd, device=v.device)
        db = [torch.zeros(b.shape, dtype=sd, device=b.device) if need else None for b, need in zip(biases, need_b)]
        for qs in range(0, n_q, q_chunk):
            qn = min(q_chunk, n_q - qs)
            do_c = d_out.narrow(-2, qs, qn)
            for ks in range(0, n_k, kv_chunk):
                kn = min(kv_chunk, n_k - ks)
                s = _logits(qf, kf, biases, qs, qn, ks, kn, sd)
                p = s.sub_(row_max.narrow(-1, qs, qn)[..., None]).exp_().div_(row_sum.narrow(-1, qs, qn)[..., None])
                del s
                dv.narrow(-2, ks, kn).add_(torch.matmul(p.transpose(-1, -2), do_c))
                ds = torch.matmul(do_c, vf.narrow(-2, ks, kn).transpose(-1, -2))  # dp, then ds in place
                ds.sub_(delta.narrow(-1, qs, qn)[..., None]).mul_(p)
                del p
                dq.narrow(-2, qs, qn).add_(torch.matmul(ds, kf.narrow(-2, ks, kn)))
                dk.narrow(-2, ks, kn).add_(torch.matmul(ds.transpose(-1, -2), qf.narrow(-2, qs, qn)))
                for b, g in zip(biases, db):
                    if g is not None:
                        g_slice = _bias_slice(g, qs, qn, ks, kn)
                        g_slice.add_(ds.sum_to_size(g_slice.shape))
        d_biases = [None if g is None else g.to(b.dtype) for b, g in zip(biases, db)]
        return (
            dq.to(q.dtype),
            dk.sum_to_size(k.shape).to(k.dtype),
            dv.sum_to_size(v.shape).to(v.dtype),
            None,
            None,
            None,
            *d_biases,
        )


def low_memory_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    biases: Sequence[Tensor] = (),
    q_chunk: int = 1024,
    kv_chunk: int = 4096,
    first_chunks_only: bool = False,
) -> Tensor:
    """``softmax(q k^T + sum(biases)) v`` without materialising the ``[*, H, Q, K]`` probabilities
    (Rabe & Staats 2021); same contract as :func:`alphafold_mem.kernels.reference.attention`.

    Args:
        q ``[*, H, Q, C]`` (already scaled), k ``[*, H, K, C]``, v ``[*, H, K, C_v]``; biases
        broadcastable to ``[*, H, Q, K]``; q_chunk, kv_chunk: query / key chunk lengths (the largest
        transient is ``[*, H, q_chunk, kv_chunk]`` in fp32, in forward and backward);
        first_chunks_only: for the memory estimator (fake tensors, no autograd): run only the first two
        query and key chunks, whose memory profile every later one repeats, leaving the rest of the
        output unwritten (``alphafold_mem.memory.chunking.estimating()``).

    Returns:
        ``[*, H, Q, C_v]`` in ``v.dtype``. Gradients flow to q, k, v and every bias that needs one.

    Raises:
        ValueError: more than two biases, mismatched shapes, or a chunk length below 1.
    """
    if len(biases) > 2:
        raise ValueError(f"attention takes at most two biases, got {len(biases)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attention shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q_chunk < 1 or kv_chunk < 1:
        raise ValueError(f"chunk lengths must be >= 1, got q_chunk={q_chunk}, kv_chunk={kv_chunk}")
    return _LowMemoryAttention.apply(q, k, v, q_chunk, kv_chunk, first_chunks_only, *biases)


__all__ = ["MAX_LOGITS_ELEMENTS", "low_memory_attention"]
