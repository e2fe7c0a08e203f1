"""The one chunking helper and low-memory (query/key-chunked, online-softmax) attention.

Chunking (AF2 Suppl. 1.11.8) trades a loop for memory: an op that is independent along one axis (MSA
rows, pair rows, residue columns) runs on slices of that axis, so its transient (attention logits,
the outer product, the transition's 4x hidden layer) exists for one slice at a time. :func:`chunked`
is the only place in the package that slices and reassembles; model modules call it with the chunk
size that :func:`alphafold_mem.apply_memory_policy` bound to them (``None``: one call on the whole
tensor, exactly the reference computation).

:func:`low_memory_attention` is the attention core of Rabe & Staats (2021, "Self-attention does not
need O(n^2) memory"): queries in chunks, keys in chunks with a running max / running sum (online
softmax), and a backward pass that recomputes the probabilities chunk by chunk from the saved
log-sum-exp instead of storing them. Forward, for one query row and key chunks ``c`` (m and l are accumulated with rescaling)::

    s_c = q k_c^T + b_c,   m = max_c max(s_c),   l = sum_c sum(exp(s_c - m)),
    o = sum_c exp(s_c - m) v_c / l

Backward (``dO`` given, ``D = rowsum(dO * o)``): per chunk ``p = exp(s - m) / l``, ``dv += p^T dO``,
``ds = p * (dO v^T - D)``, ``dq += ds k``, ``dk += ds^T q``, ``db += ds`` summed to the bias shape.
The row statistics m and l are saved separately rather than as ``lse = m + log(l)``: for a fully
masked row m is about -1e9, where fp32 cannot hold ``log(l)`` on top (its ulp is 64).
Statistics and accumulators are fp32 (fp64 for fp64 inputs).
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Callable, Iterator, Optional, Sequence, Union

import torch
from torch import Tensor

Result = Union[Tensor, tuple[Tensor, ...]]

_state = threading.local()


@contextlib.contextmanager
def first_chunk_only() -> Iterator[None]:
    """For the memory estimator only (under FakeTensorMode, without autograd): :func:`chunked` runs
    just the first two chunks of each op and leaves the rest of its (fake) output unwritten. Every
    full chunk after the first (which runs before the output buffer exists) has the same memory
    profile as the second, so the predicted peak is unchanged and the estimate no longer scales
    with the number of chunks."""
    previous = getattr(_state, "first_only", False)
    _state.first_only = True
    try:
        yield
    finally:
        _state.first_only = previous


def chunked(fn: Callable[..., Result], args: Sequence, dims: Sequence[Optional[int]], chunk_size: Optional[int],
            out_dim: int = -3, out: Optional[Result] = None) -> Result:
    """Apply ``fn`` to slices of ``args`` along one axis and assemble the results in place.

    Args:
        fn: ``fn(*slices) -> Tensor`` or a tuple of tensors; it must be independent along the axis.
        args: the arguments of ``fn`` (tensors, or anything else, passed through unchanged).
        dims: for each arg, the (negative) dim that carries the chunked axis, or ``None`` to pass the
            arg whole. An arg whose size along its dim is 1 (a broadcast) is passed whole.
        chunk_size: slice length; ``None`` (or >= the axis length) calls ``fn(*args)`` once, which
            is the reference computation bit for bit.
        out_dim: the (negative) dim of each result that carries the axis.
        out: optional preallocated result(s) to write into (e.g. an existing buffer); by default
            they are allocated from the first chunk's result, so no concatenation copy is made.

    Returns:
        The result(s) of ``fn`` over the whole axis.

    Raises:
        ValueError: no arg carries the axis, or args disagree on its length.
    """
    sizes = {a.shape[d] for a, d in zip(args, dims) if d is not None and isinstance(a, Tensor) and a.shape[d] != 1}
    if len(sizes) > 1:
        raise ValueError(f"chunked: args disagree on the chunked axis length: {sorted(sizes)}")
    n = sizes.pop() if sizes else 1
    if chunk_size is None or chunk_size >= n:
        return fn(*args)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    for start in range(0, n, chunk_size):
        size = min(chunk_size, n - start)
        sliced = [a.narrow(d, start, size) if d is not None and isinstance(a, Tensor) and a.shape[d] != 1 else a
                  for a, d in zip(args, dims)]
        res = fn(*sliced)
        single = isinstance(res, Tensor)
        results = (res,) if single else tuple(res)
        if out is None:
            shapes = [list(r.shape) for r in results]
            for s in shapes:
                s[out_dim] = n
            out = tuple(r.new_empty(s) for r, s in zip(results, shapes))
            out = out[0] if single else out
        outs = (out,) if single else out
        for o, r in zip(outs, results):
            o.narrow(out_dim, start, size).copy_(r)
        del res, results
        if start > 0 and getattr(_state, "first_only", False) and not torch.is_grad_enabled():
            break  # the second chunk is the first one that runs with the output buffer allocated
    return out


# ------------------------------------------------------------------------------------------------
# Low-memory attention (Rabe & Staats 2021)


def _stat_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _bias_slice(b: Tensor, qs: int, qn: int, ks: int, kn: int) -> Tensor:
    """The part of a bias broadcastable to ``[*, H, Q, K]`` for queries ``qs:qs+qn``, keys ``ks:ks+kn``."""
    if b.dim() >= 2 and b.shape[-2] != 1:
        b = b.narrow(-2, qs, qn)
    if b.shape[-1] != 1:
        b = b.narrow(-1, ks, kn)
    return b


def _logits(q: Tensor, k: Tensor, biases: Sequence[Tensor], qs: int, qn: int, ks: int, kn: int,
            sd: torch.dtype) -> Tensor:
    s = torch.matmul(q.narrow(-2, qs, qn), k.narrow(-2, ks, kn).transpose(-1, -2)).to(sd)  # [*, H, qn, kn]
    for b in biases:
        b = _bias_slice(b, qs, qn, ks, kn)
        if torch.broadcast_shapes(s.shape, b.shape) == s.shape:
            s.add_(b)  # s is a fresh buffer: add in place (no second logits-sized allocation)
        else:
            s = s + b
    return s


#: Largest logits block (elements) one step of :func:`low_memory_attention` materialises, whatever
#: the leading (batch, row, head) dims: the query chunk shrinks below ``q_chunk`` to respect it.
MAX_LOGITS_ELEMENTS = 2 ** 24


def _query_chunk(q: Tensor, k: Tensor, q_chunk: int, kv_chunk: int) -> int:
    rows = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    return max(1, min(q_chunk, MAX_LOGITS_ELEMENTS // max(1, rows * min(kv_chunk, k.shape[-2]))))


class _LowMemoryAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, q_chunk: int, kv_chunk: int, *biases: Tensor) -> Tensor:
        sd = _stat_dtype(q)
        n_q, n_k = q.shape[-2], k.shape[-2]
        q_chunk = _query_chunk(q, k, q_chunk, kv_chunk)
        out = None
        for qs in range(0, n_q, q_chunk):
            qn = min(q_chunk, n_q - qs)
            m_run = l_run = acc = None
            for ks in range(0, n_k, kv_chunk):
                kn = min(kv_chunk, n_k - ks)
                s = _logits(q, k, biases, qs, qn, ks, kn, sd)  # [*, H, qn, kn]
                m_new = s.amax(-1) if m_run is None else torch.maximum(m_run, s.amax(-1))  # [*, H, qn]
                p = s.sub_(m_new[..., None]).exp_()  # in place: the logits buffer becomes p
                del s
                pv = torch.matmul(p.to(v.dtype), v.narrow(-2, ks, kn)).to(sd)  # [*, H, qn, C_v]
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
        need_b = ctx.needs_input_grad[5:]
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
        return (dq.to(q.dtype), dk.sum_to_size(k.shape).to(k.dtype), dv.sum_to_size(v.shape).to(v.dtype),
                None, None, *d_biases)


def low_memory_attention(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Tensor] = (), q_chunk: int = 1024,
                         kv_chunk: int = 4096) -> Tensor:
    """``softmax(q k^T + sum(biases)) v`` without materialising the ``[*, H, Q, K]`` probabilities
    (Rabe & Staats 2021); same contract as :func:`kernels.reference.attention`.

    Args:
        q ``[*, H, Q, C]`` (already scaled), k ``[*, H, K, C]``, v ``[*, H, K, C_v]``; biases
        broadcastable to ``[*, H, Q, K]``; q_chunk, kv_chunk: query / key chunk lengths (the largest
        transient is ``[*, H, q_chunk, kv_chunk]`` in fp32, in forward and backward).

    Returns:
        ``[*, H, Q, C_v]`` in ``v.dtype``. Gradients flow to q, k, v and every bias that needs one.
    """
    if len(biases) > 2:
        raise ValueError(f"attention takes at most two biases, got {len(biases)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attention shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q_chunk < 1 or kv_chunk < 1:
        raise ValueError(f"chunk lengths must be >= 1, got q_chunk={q_chunk}, kv_chunk={kv_chunk}")
    return _LowMemoryAttention.apply(q, k, v, q_chunk, kv_chunk, *biases)


__all__ = ["chunked", "first_chunk_only", "low_memory_attention"]
