r"""Fused multi-head attention core for AF2's gated attention (Jumper et al. 2021, Suppl. Alg. 7, 13, 14).

Math (per leading row ``z`` and head ``h``; ``q`` is already scaled by 1/sqrt(C) by the caller)::

    S = q k^T + b_0 + b_1                        [Q, K]   (biases broadcast over z, h, q, k)
    m_i = max_j S_ij,  l_i = sum_j exp(S_ij - m_i)                  (fp32 row statistics)
    P = exp((S - m) - log l)                     [Q, K]   (= softmax(S); never written to memory)
    O = P v                                      [Q, C_v]

Forward: flash-attention style online softmax over key blocks; only ``O`` and the fp32 row
statistics are written. The log-sum-exp is kept as its two terms ``m`` and ``log l`` ([2, *, H, Q]):
when every key of a row is masked with -1e9, fp32 cannot hold ``m + log l`` (its spacing at 1e9 is
64), and ``exp((S - m) - log l)`` keeps the backward exact there. ``P`` is cast to the input
dtype before ``P v`` (as the reference casts its probabilities to ``v.dtype``); every accumulation
is fp32.

VJP (dO given; P recomputed from m and log l, never stored)::

    D_i   = sum_c dO_ic O_ic                     (fp32 row statistic, computed in the dq kernel)
    dV    = P^T dO
    dP    = dO v^T
    dS    = P * (dP - D)                         (= dL/dS = dL/db for a full-size bias)
    dq    = dS k,   dk = dS^T q
    db_t  = sum of dS over the axes where b_t is broadcast (size 1), accumulated in fp32 into a
            compact buffer of b_t's own shape: the shared pair bias [B, 1, H, N, N] never needs a
            [B, N_seq, H, N, N] gradient.

Kernels (``@triton.jit``, in :mod:`kernels.fused_attention_kernels`), each recomputing the score
tile S with the same code: forward, one program per (query block, z, h). Backward: one per
(query block, z, h) for D and dq; one per (key block, z, h) for dk, dv and the gradient of every
bias with its own row per leading row z (the dS tile is already there: one fp32 atomic add per
element and query block, summed first along the bias's broadcast axes); and, per bias that requires
grad and is shared across leading rows (AF2's pair bias), one per (query block, key block, h, run
of rows) that sums dS over Z_PER_PROGRAM rows sharing a bias row in registers before one fp32
atomic add per element. No atomics on dq/dk/dv.

Launches (counted in :func:`_forward` and :func:`_backward`; ``python -m
benchmarks.kernels.count_ops`` counts them in the interpreter): forward 1; one attention backward
2 + (number of biases that require grad and are shared across leading rows): 3 for AF2's gated
attention with its pair bias, 2 with the key mask alone or with a per-row bias needing a gradient
(3 before the fold), 0 for empty tensors. Why the shared bias keeps its pass: in the dk/dv pass each
program owns one row z, so the gradient of a bias shared by N_seq rows would cost N_seq fp32 atomic
adds per element there (N_seq / Z_PER_PROGRAM in its own pass); the pass instead recomputes S and
dS once more. Counted in the interpreter (triangle attention, N 40, forward + backward): folding it
too would save 18 % of the matmul FLOPs and 31 % of the loaded elements for 4x the atomic adds
(16x with the GPU's Z_PER_PROGRAM); :data:`BIAS_GRAD_FOLD` ``"all"`` does it, for the GPU check to time.

Limits:
  * q [*, H, Q, C], k [*, H, K, C], v [*, H, K, C_v] with identical leading dims ``*``;
    1 <= C, C_v <= 64 (padded to a power of two >= 16); any Q, K >= 1.
  * dtypes fp32, bf16, fp16 (q, k, v alike); biases of any float dtype, at most two, each
    broadcastable to [*, H, Q, K]. A bias passed as an expanded (stride-0) view is narrowed to its
    compact shape first, so it is read, not materialised.
  * Rows whose keys are all masked by a large finite negative bias (-1e9) give the uniform average,
    as the reference does; a bias of -inf on every key gives NaN, as the reference does.
  * fp32 matmuls run in IEEE fp32 unless ``torch.backends.cuda.matmul.allow_tf32`` is set.
  * In Triton's interpreter (CPU), bf16/fp16 matmul operands are rounded (to nearest even) to
    their dtype and multiplied in fp32, see :mod:`kernels._triton_helpers`; a GPU multiplies the
    same rounded values with fp32 accumulation.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import triton
import triton.language as tl
from torch import Tensor

from ._triton_support import interpreter_enabled, is_fake, launch, launch_arch
from .fused_attention_kernels import attn_bwd_dbias_kernel, attn_bwd_dkdv_kernel, attn_bwd_dq_kernel, attn_fwd_kernel
from .launch_configs import attention_config

__all__ = ["FusedAttentionFunction", "fused_attention"]

_MAX_HEAD_DIM = 64
#: Which bias gradients the dk/dv pass computes from the dS tiles it already holds: ``"per_row"``
#: (the decision, see the module docstring: a bias with its own row per leading row z), ``"none"``
#: (every bias gradient in its own pass, as before) or ``"all"`` (shared biases too: one fp32 atomic
#: add per element per row z). Read when the forward runs. ``python -m benchmarks.kernels.count_ops``
#: counts each; the GPU check times ``"all"`` beside the default (``bench_attention``'s ``triton-fold-all``).
BIAS_GRAD_FOLD = "per_row"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TL_DTYPE = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------


class _Bias:
    """Launch metadata of one compact, contiguous bias of full rank (``len(lead) + 3`` dims)."""

    def __init__(self, b: Tensor, lead: tuple):
        bh, bq, bk = b.shape[-3:]
        self.tensor = b
        self.s_h = bq * bk if bh > 1 else 0
        self.s_q = bk if bq > 1 else 0
        self.s_k = 1 if bk > 1 else 0
        self.bcast_q = bq == 1
        self.bcast_k = bk == 1
        self.shares_rows = math.prod(b.shape[:-3]) < math.prod(lead)  # broadcast over some of *
        n_rows = math.prod(b.shape[:-3])
        rows = torch.arange(n_rows, dtype=torch.int64, device=b.device) * (bh * bq * bk)
        # element offset of each leading row z of q in the bias: [Z]
        self.zoff = rows.view(b.shape[:-3]).expand(lead).reshape(-1).contiguous()

    def arg(self, t: Optional[Tensor] = None) -> tuple:
        """The kernels' bias argument for this bias, or for ``t`` of the same shape (its gradient)."""
        return (self.tensor if t is None else t, self.zoff, self.s_h, self.s_q, self.s_k)


def _block_config(q: Tensor) -> dict:
    """Blocks for the architecture the launch targets (:mod:`kernels.launch_configs`)."""
    return attention_config(launch_arch(q.device), 32 if q.dtype == torch.float32 else 16)


def _validate(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Optional[Tensor]], interpret: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"fused_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 3:
            raise ValueError(f"fused_attention: {name} must be [*, H, L, C], got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise ValueError(f"fused_attention: {name} has dtype {t.dtype}; supported: fp32, bf16, fp16")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"fused_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "fused_attention: expected q [*, H, Q, C], k [*, H, K, C], v [*, H, K, C_v] with equal "
            f"leading dims; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] > _MAX_HEAD_DIM or v.shape[-1] > _MAX_HEAD_DIM or q.shape[-1] < 1 or v.shape[-1] < 1:
        raise ValueError(
            f"fused_attention: head dims must be in [1, {_MAX_HEAD_DIM}], got C={q.shape[-1]}, C_v={v.shape[-1]}"
        )
    if q.shape[-2] < 1 or k.shape[-2] < 1:
        raise ValueError(f"fused_attention: empty query or key length (Q={q.shape[-2]}, K={k.shape[-2]})")
    if len(biases) > 2:
        raise ValueError(f"fused_attention: at most two biases, got {len(biases)}")
    full = q.shape[:-1] + k.shape[-2:-1]  # [*, H, Q, K]
    for i, b in enumerate(biases):
        if b is None:
            continue
        if not isinstance(b, Tensor) or not b.is_floating_point():
            raise ValueError(f"fused_attention: bias {i} must be a floating-point tensor")
        if b.dim() > len(full) or any(bs not in (1, fs) for bs, fs in zip(reversed(b.shape), reversed(full))):
            raise ValueError(
                f"fused_attention: bias {i} of shape {tuple(b.shape)} does not broadcast to [*, H, Q, K] = "
                f"{tuple(full)}"
            )
        if b.device != q.device:
            raise ValueError(f"fused_attention: bias {i} is on {b.device}, q on {q.device}")
    devices = {q.device, k.device, v.device}
    if len(devices) != 1:
        raise ValueError(f"fused_attention: q, k, v on different devices {sorted(map(str, devices))}")
    if q.device.type != "cuda" and not interpret and not is_fake(q):
        raise ValueError(
            f"fused_attention: tensors are on {q.device}; Triton needs CUDA tensors, or TRITON_INTERPRET=1 "
            "set before importing triton to run in the CPU interpreter"
        )


def _compact_bias(b: Tensor, ndim: int) -> Tensor:
    """Left-pad ``b`` to ``ndim`` dims and narrow stride-0 (expanded) axes to size 1 (differentiable)."""
    b = b.reshape((1,) * (ndim - b.dim()) + tuple(b.shape))
    for d in range(ndim):
        if b.shape[d] > 1 and b.stride(d) == 0:
            b = b.narrow(d, 0, 1)
    return b


def _flat(t: Tensor, z: int) -> Tensor:
    """[*, H, L, C] -> [Z, H, L, C] (a view whenever the leading dims can be merged)."""
    return t.reshape((z,) + tuple(t.shape[-3:]))


def _bias_arg(bias: Optional[_Bias], dummy: Tensor) -> tuple:
    return (dummy, dummy, 0, 0, 0) if bias is None else bias.arg()


def _launch_options(q: Tensor, v: Tensor, b0: Optional[_Bias], b1: Optional[_Bias], cfg: dict, interpret: bool) -> dict:
    """Compile-time arguments and launch options shared by every kernel of one attention call."""
    ieee = q.dtype == torch.float32 and (interpret or not torch.backends.cuda.matmul.allow_tf32)
    return dict(
        HAS_B0=b0 is not None,
        HAS_B1=b1 is not None,
        BLOCK_C=max(16, triton.next_power_of_2(q.shape[-1])),
        BLOCK_CV=max(16, triton.next_power_of_2(v.shape[-1])),
        DOT_DTYPE=_TL_DTYPE[q.dtype],
        EMULATE=interpret,
        IEEE=ieee,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )


def _forward(q: Tensor, k: Tensor, v: Tensor, b0: Optional[_Bias], b1: Optional[_Bias], z: int):
    """One launch: O [Z, H, Q, C_v] and the fp32 row statistics [2, Z, H, Q] (m, log l)."""
    interpret = interpreter_enabled()
    H, N_Q, C = q.shape[-3:]
    N_K, CV = k.shape[-2], v.shape[-1]
    q4, k4, v4 = _flat(q, z), _flat(k, z), _flat(v, z)
    o4 = torch.empty((z, H, N_Q, CV), dtype=q.dtype, device=q.device)
    stats = torch.empty((2, z, H, N_Q), dtype=torch.float32, device=q.device)
    if o4.numel() == 0:
        return o4, stats
    cfg = _block_config(q)
    bq, bk = cfg["fwd"]
    launch(
        attn_fwd_kernel,
        (triton.cdiv(N_Q, bq), z * H),
        q4,
        k4,
        v4,
        o4,
        stats[0],
        stats[1],
        _bias_arg(b0, stats),
        _bias_arg(b1, stats),
        q4.stride(),
        k4.stride(),
        v4.stride(),
        o4.stride(),
        H,
        N_Q,
        N_K,
        C,
        CV,
        BLOCK_Q=bq,
        BLOCK_K=bk,
        **_launch_options(q, v, b0, b1, cfg, interpret),
    )
    return o4, stats


def _backward(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o4: Tensor,
    stats: Tensor,
    b0: Optional[_Bias],
    b1: Optional[_Bias],
    need_db: tuple,
    z: int,
    fold_mode: str = "per_row",
):
    """dq, dk, dv and the fp32 gradients of the biases in ``need_db``: 2 launches, plus one per bias
    that needs a gradient and is shared across leading rows (the others are folded into the dk/dv pass)."""
    interpret = interpreter_enabled()
    H, N_Q, C = q.shape[-3:]
    N_K, CV = k.shape[-2], v.shape[-1]
    q4, k4, v4 = _flat(q, z), _flat(k, z), _flat(v, z)
    do4 = _flat(do, z)
    if do4.stride() != o4.stride():  # the kernels index O and dO with one set of strides
        do4 = do4.contiguous()
        o4 = o4.contiguous()
    # gradients are contiguous whatever the inputs' strides (e.g. transposed head views)
    dq4 = torch.empty(q4.shape, dtype=q.dtype, device=q.device)
    dk4 = torch.empty(k4.shape, dtype=k.dtype, device=k.device)
    dv4 = torch.empty(v4.shape, dtype=v.dtype, device=v.device)
    delta = torch.empty_like(stats[0])
    dbs = [
        torch.zeros(b.tensor.shape, dtype=torch.float32, device=q.device) if (b is not None and need) else None
        for b, need in zip((b0, b1), need_db)
    ]
    if dq4.numel() + dv4.numel() == 0:
        return dq4, dk4, dv4, dbs
    cfg = _block_config(q)
    common = _launch_options(q, v, b0, b1, cfg, interpret)
    operands = (_bias_arg(b0, delta), _bias_arg(b1, delta), q4.stride(), k4.stride(), v4.stride(), o4.stride())

    bq, bk = cfg["dq"]
    launch(
        attn_bwd_dq_kernel,
        (triton.cdiv(N_Q, bq), z * H),
        q4,
        k4,
        v4,
        o4,
        do4,
        stats[0],
        stats[1],
        delta,
        dq4,
        *operands,
        dq4.stride(),
        H,
        N_Q,
        N_K,
        C,
        CV,
        BLOCK_Q=bq,
        BLOCK_K=bk,
        **common,
    )
    # a bias gradient is folded into the dk/dv pass unless the bias is shared across leading rows
    fold = [
        db is not None and (fold_mode == "all" or (fold_mode == "per_row" and not b.shares_rows))
        for b, db in zip((b0, b1), dbs)
    ]
    folded = [b.arg(db) if f else (delta, delta, 0, 0, 0) for b, db, f in zip((b0, b1), dbs, fold)]
    bcast = {
        f"BCAST_{a}{i}": (b is not None and getattr(b, f"bcast_{a.lower()}"))
        for i, b in enumerate((b0, b1))
        for a in ("Q", "K")
    }
    bq, bk = cfg["dkdv"]
    launch(
        attn_bwd_dkdv_kernel,
        (triton.cdiv(N_K, bk), z * H),
        q4,
        k4,
        v4,
        do4,
        stats[0],
        stats[1],
        delta,
        dk4,
        dv4,
        operands[0],
        operands[1],
        *folded,
        *operands[2:],
        dk4.stride(),
        dv4.stride(),
        H,
        N_Q,
        N_K,
        C,
        CV,
        FOLD_B0=fold[0],
        FOLD_B1=fold[1],
        **bcast,
        BLOCK_Q=bq,
        BLOCK_K=bk,
        **common,
    )
    bq, bk = cfg["dbias"]
    for b, db, f in zip((b0, b1), dbs, fold):
        if db is None or f:
            continue
        # rows of q that share one bias row are summed in registers, Z_PER_PROGRAM at a time
        z_per = cfg["z_per_program"] if b.shares_rows else 1
        launch(
            attn_bwd_dbias_kernel,
            (triton.cdiv(N_Q, bq) * triton.cdiv(N_K, bk), triton.cdiv(z, z_per) * H),
            q4,
            k4,
            v4,
            do4,
            stats[0],
            stats[1],
            delta,
            b.arg(db),
            *operands,
            z,
            H,
            N_Q,
            N_K,
            C,
            CV,
            BCAST_Q=b.bcast_q,
            BCAST_K=b.bcast_k,
            Z_PER_PROGRAM=z_per,
            BLOCK_Q=bq,
            BLOCK_K=bk,
            **common,
        )
    return dq4, dk4, dv4, dbs


# ---------------------------------------------------------------------------------------------
# autograd.Function and functional alias
# ---------------------------------------------------------------------------------------------


class FusedAttentionFunction(torch.autograd.Function):
    """``softmax(q k^T + b0 + b1) v``; biases are compact (no stride-0 axes) and full rank, or None."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, b0: Optional[Tensor], b1: Optional[Tensor]) -> Tensor:
        lead = tuple(q.shape[:-3])
        z = math.prod(lead)
        bias_t = [None if b is None else b.contiguous() for b in (b0, b1)]
        meta = [None if b is None else _Bias(b, lead) for b in bias_t]
        o4, stats = _forward(q, k, v, meta[0], meta[1], z)
        ctx.save_for_backward(q, k, v, o4, stats, *(b for b in bias_t if b is not None))
        ctx.has_bias = (b0 is not None, b1 is not None)
        ctx.fold_mode = BIAS_GRAD_FOLD  # read at forward time
        ctx.bias_dtypes = tuple(None if b is None else b.dtype for b in (b0, b1))
        return o4.view(lead + tuple(o4.shape[-3:]))  # [*, H, Q, C_v]

    @staticmethod
    def backward(ctx, do: Tensor):
        q, k, v, o4, stats, *saved_b = ctx.saved_tensors
        lead = tuple(q.shape[:-3])
        z = math.prod(lead)
        it = iter(saved_b)
        meta = [_Bias(next(it), lead) if has else None for has in ctx.has_bias]
        need_db = (ctx.needs_input_grad[3], ctx.needs_input_grad[4])
        dq4, dk4, dv4, dbs = _backward(do, q, k, v, o4, stats, meta[0], meta[1], need_db, z, ctx.fold_mode)
        db_out = [None if db is None else db.to(dt) for db, dt in zip(dbs, ctx.bias_dtypes)]
        return dq4.view(q.shape), dk4.view(k.shape), dv4.view(v.shape), db_out[0], db_out[1]


def fused_attention(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Tensor] = ()) -> Tensor:
    """Triton ``softmax(q k^T + sum(biases)) v``; same signature and semantics as
    :func:`kernels.reference.attention`, without storing ``[*, H, Q, K]`` for backward.

    Args:
        q: ``[*, H, Q, C]`` (already scaled by 1/sqrt(C)); k: ``[*, H, K, C]``; v: ``[*, H, K, C_v]``.
        biases: at most two tensors broadcastable to ``[*, H, Q, K]``, e.g. the key mask bias
            ``[*, 1, 1, K]`` and the pair bias ``[B, 1, H, Q, K]``.

    Returns:
        ``[*, H, Q, C_v]`` in ``q.dtype``.
    """
    biases = list(biases)
    _validate(q, k, v, biases, interpreter_enabled())
    ndim = q.dim()
    compact = [_compact_bias(b, ndim) for b in biases] + [None] * (2 - len(biases))
    return FusedAttentionFunction.apply(q, k, v, compact[0], compact[1])
