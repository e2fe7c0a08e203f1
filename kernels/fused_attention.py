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

Three backward kernels recompute P tile by tile: one per query block (D, dq), one per key block
(dk, dv), and, per bias that requires grad, one per (query block, key block, head, run of rows)
that sums dS over the rows sharing a bias row in registers before one fp32 atomic add per element.
No atomics on dq/dk/dv.

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

from ._triton_helpers import mm, round_to
from ._triton_support import interpreter_enabled

__all__ = ["FusedAttentionFunction", "fused_attention"]

_MAX_HEAD_DIM = 64
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TL_DTYPE = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


# ---------------------------------------------------------------------------------------------
# Triton kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _bias_tile(B, ZOFF, s_h, s_q, s_k, z, h, offs_q, offs_k, N_Q, N_K):
    """fp32 tile [BLOCK_Q, BLOCK_K] of one bias; broadcast axes have stride 0."""
    base = tl.load(ZOFF + z) + h * s_h
    mask = (offs_q[:, None] < N_Q) & (offs_k[None, :] < N_K)
    ptrs = B + base + offs_q[:, None] * s_q + offs_k[None, :] * s_k
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _bias_grad_add(DB, base, s_q, s_k, offs_q, offs_k, N_Q, N_K, ds,
                   BCAST_Q: tl.constexpr, BCAST_K: tl.constexpr):
    """Atomically add a dS tile at element offset ``base`` of a compact fp32 bias gradient,
    summing the axes along which the bias is broadcast (size 1) first."""
    mq = offs_q < N_Q
    mk = offs_k < N_K
    ds = tl.where(mq[:, None] & mk[None, :], ds, 0.0)
    if BCAST_Q:
        if BCAST_K:
            tl.atomic_add(DB + base, tl.sum(tl.sum(ds, 1), 0))
        else:
            tl.atomic_add(DB + base + offs_k * s_k, tl.sum(ds, 0), mask=mk)
    else:
        if BCAST_K:
            tl.atomic_add(DB + base + offs_q * s_q, tl.sum(ds, 1), mask=mq)
        else:
            tl.atomic_add(DB + base + offs_q[:, None] * s_q + offs_k[None, :] * s_k, ds,
                          mask=mq[:, None] & mk[None, :])


@triton.jit
def _attn_fwd_kernel(
    Qp, Kp, Vp, Op, ROW_M, ROW_LOGL,
    B0, B0_ZOFF, b0_sh, b0_sq, b0_sk,
    B1, B1_ZOFF, b1_sh, b1_sq, b1_sk,
    sq_z, sq_h, sq_q, sq_c,
    sk_z, sk_h, sk_k, sk_c,
    sv_z, sv_h, sv_k, sv_c,
    so_z, so_h, so_q, so_c,
    H, N_Q, N_K, C, CV,
    HAS_B0: tl.constexpr, HAS_B1: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):
    pid_q = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = (pid_zh // H).to(tl.int64)  # 64-bit offsets: rows x strides can exceed 2^31
    h = pid_zh % H
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_c = tl.arange(0, BLOCK_C)
    offs_cv = tl.arange(0, BLOCK_CV)
    mq = offs_q < N_Q

    q = tl.load(Qp + z * sq_z + h * sq_h + offs_q[:, None] * sq_q + offs_c[None, :] * sq_c,
                mask=mq[:, None] & (offs_c[None, :] < C), other=0.0).to(tl.float32)  # [BQ, BC]
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_CV], tl.float32)
    for start_k in range(0, N_K, BLOCK_K):
        offs_k = start_k + tl.arange(0, BLOCK_K)
        mk = offs_k < N_K
        kt = tl.load(Kp + z * sk_z + h * sk_h + offs_k[None, :] * sk_k + offs_c[:, None] * sk_c,
                     mask=mk[None, :] & (offs_c[:, None] < C), other=0.0).to(tl.float32)  # [BC, BK]
        s = mm(q, kt, DOT_DTYPE, EMULATE, IEEE)  # [BQ, BK]
        if HAS_B0:
            s += _bias_tile(B0, B0_ZOFF, b0_sh, b0_sq, b0_sk, z, h, offs_q, offs_k, N_Q, N_K)
        if HAS_B1:
            s += _bias_tile(B1, B1_ZOFF, b1_sh, b1_sq, b1_sk, z, h, offs_q, offs_k, N_Q, N_K)
        s = tl.where(mk[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(Vp + z * sv_z + h * sv_h + offs_k[:, None] * sv_k + offs_cv[None, :] * sv_c,
                    mask=mk[:, None] & (offs_cv[None, :] < CV), other=0.0).to(tl.float32)  # [BK, BCV]
        acc = acc * alpha[:, None] + mm(p, v, DOT_DTYPE, EMULATE, IEEE)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(ROW_M + pid_zh * N_Q + offs_q, m_i, mask=mq)
    tl.store(ROW_LOGL + pid_zh * N_Q + offs_q, tl.log(l_i), mask=mq)
    tl.store(Op + z * so_z + h * so_h + offs_q[:, None] * so_q + offs_cv[None, :] * so_c,
             round_to(acc, Op.dtype.element_ty, EMULATE), mask=mq[:, None] & (offs_cv[None, :] < CV))


@triton.jit
def _attn_bwd_dq_kernel(
    Qp, Kp, Vp, Op, dOp, ROW_M, ROW_LOGL, DELTA, dQp,
    B0, B0_ZOFF, b0_sh, b0_sq, b0_sk,
    B1, B1_ZOFF, b1_sh, b1_sq, b1_sk,
    sq_z, sq_h, sq_q, sq_c,
    sk_z, sk_h, sk_k, sk_c,
    sv_z, sv_h, sv_k, sv_c,
    so_z, so_h, so_q, so_c,
    sdq_z, sdq_h, sdq_q, sdq_c,
    H, N_Q, N_K, C, CV,
    HAS_B0: tl.constexpr, HAS_B1: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):
    """One program per (query block, z, h): D and dq (O and dO share strides)."""
    pid_q = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = (pid_zh // H).to(tl.int64)  # 64-bit offsets: rows x strides can exceed 2^31
    h = pid_zh % H
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_c = tl.arange(0, BLOCK_C)
    offs_cv = tl.arange(0, BLOCK_CV)
    mq = offs_q < N_Q
    mask_qc = mq[:, None] & (offs_c[None, :] < C)
    mask_qcv = mq[:, None] & (offs_cv[None, :] < CV)

    q = tl.load(Qp + z * sq_z + h * sq_h + offs_q[:, None] * sq_q + offs_c[None, :] * sq_c,
                mask=mask_qc, other=0.0).to(tl.float32)  # [BQ, BC]
    o_off = z * so_z + h * so_h + offs_q[:, None] * so_q + offs_cv[None, :] * so_c
    do = tl.load(dOp + o_off, mask=mask_qcv, other=0.0).to(tl.float32)  # [BQ, BCV]
    o = tl.load(Op + o_off, mask=mask_qcv, other=0.0).to(tl.float32)
    delta = tl.sum(do * o, 1)  # [BQ]
    tl.store(DELTA + pid_zh * N_Q + offs_q, delta, mask=mq)
    row_m = tl.load(ROW_M + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
    row_logl = tl.load(ROW_LOGL + pid_zh * N_Q + offs_q, mask=mq, other=0.0)

    dq = tl.zeros([BLOCK_Q, BLOCK_C], tl.float32)
    for start_k in range(0, N_K, BLOCK_K):
        offs_k = start_k + tl.arange(0, BLOCK_K)
        mk = offs_k < N_K
        kt = tl.load(Kp + z * sk_z + h * sk_h + offs_k[None, :] * sk_k + offs_c[:, None] * sk_c,
                     mask=mk[None, :] & (offs_c[:, None] < C), other=0.0).to(tl.float32)  # [BC, BK]
        vt = tl.load(Vp + z * sv_z + h * sv_h + offs_k[None, :] * sv_k + offs_cv[:, None] * sv_c,
                     mask=mk[None, :] & (offs_cv[:, None] < CV), other=0.0).to(tl.float32)  # [BCV, BK]
        s = mm(q, kt, DOT_DTYPE, EMULATE, IEEE)  # [BQ, BK]
        if HAS_B0:
            s += _bias_tile(B0, B0_ZOFF, b0_sh, b0_sq, b0_sk, z, h, offs_q, offs_k, N_Q, N_K)
        if HAS_B1:
            s += _bias_tile(B1, B1_ZOFF, b1_sh, b1_sq, b1_sk, z, h, offs_q, offs_k, N_Q, N_K)
        s = tl.where(mq[:, None] & mk[None, :], s, float("-inf"))
        p = tl.exp((s - row_m[:, None]) - row_logl[:, None])  # [BQ, BK]; 0 on padding
        dp = mm(do, vt, DOT_DTYPE, EMULATE, IEEE)  # [BQ, BK]
        ds = p * (dp - delta[:, None])
        dq += mm(ds, tl.trans(kt), DOT_DTYPE, EMULATE, IEEE)
    tl.store(dQp + z * sdq_z + h * sdq_h + offs_q[:, None] * sdq_q + offs_c[None, :] * sdq_c,
             round_to(dq, dQp.dtype.element_ty, EMULATE), mask=mask_qc)


@triton.jit
def _attn_bwd_dkdv_kernel(
    Qp, Kp, Vp, dOp, ROW_M, ROW_LOGL, DELTA, dKp, dVp,
    B0, B0_ZOFF, b0_sh, b0_sq, b0_sk,
    B1, B1_ZOFF, b1_sh, b1_sq, b1_sk,
    sq_z, sq_h, sq_q, sq_c,
    sk_z, sk_h, sk_k, sk_c,
    sv_z, sv_h, sv_k, sv_c,
    so_z, so_h, so_q, so_c,
    sdk_z, sdk_h, sdk_k, sdk_c,
    sdv_z, sdv_h, sdv_k, sdv_c,
    H, N_Q, N_K, C, CV,
    HAS_B0: tl.constexpr, HAS_B1: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):
    """One program per (key block, z, h): dk and dv."""
    pid_k = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = (pid_zh // H).to(tl.int64)  # 64-bit offsets: rows x strides can exceed 2^31
    h = pid_zh % H
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_c = tl.arange(0, BLOCK_C)
    offs_cv = tl.arange(0, BLOCK_CV)
    mk = offs_k < N_K
    mask_kc = mk[:, None] & (offs_c[None, :] < C)
    mask_kcv = mk[:, None] & (offs_cv[None, :] < CV)
    k_off = z * sk_z + h * sk_h + offs_k[:, None] * sk_k + offs_c[None, :] * sk_c
    v_off = z * sv_z + h * sv_h + offs_k[:, None] * sv_k + offs_cv[None, :] * sv_c
    k = tl.load(Kp + k_off, mask=mask_kc, other=0.0).to(tl.float32)  # [BK, BC]
    v = tl.load(Vp + v_off, mask=mask_kcv, other=0.0).to(tl.float32)  # [BK, BCV]

    dk = tl.zeros([BLOCK_K, BLOCK_C], tl.float32)
    dv = tl.zeros([BLOCK_K, BLOCK_CV], tl.float32)
    for start_q in range(0, N_Q, BLOCK_Q):
        offs_q = start_q + tl.arange(0, BLOCK_Q)
        mq = offs_q < N_Q
        q = tl.load(Qp + z * sq_z + h * sq_h + offs_q[:, None] * sq_q + offs_c[None, :] * sq_c,
                    mask=mq[:, None] & (offs_c[None, :] < C), other=0.0).to(tl.float32)  # [BQ, BC]
        do = tl.load(dOp + z * so_z + h * so_h + offs_q[:, None] * so_q + offs_cv[None, :] * so_c,
                     mask=mq[:, None] & (offs_cv[None, :] < CV), other=0.0).to(tl.float32)  # [BQ, BCV]
        row_m = tl.load(ROW_M + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
        row_logl = tl.load(ROW_LOGL + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
        delta = tl.load(DELTA + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
        s = mm(q, tl.trans(k), DOT_DTYPE, EMULATE, IEEE)  # [BQ, BK]
        if HAS_B0:
            s += _bias_tile(B0, B0_ZOFF, b0_sh, b0_sq, b0_sk, z, h, offs_q, offs_k, N_Q, N_K)
        if HAS_B1:
            s += _bias_tile(B1, B1_ZOFF, b1_sh, b1_sq, b1_sk, z, h, offs_q, offs_k, N_Q, N_K)
        s = tl.where(mq[:, None] & mk[None, :], s, float("-inf"))
        p = tl.exp((s - row_m[:, None]) - row_logl[:, None])  # [BQ, BK]; 0 on padding
        dv += mm(tl.trans(p), do, DOT_DTYPE, EMULATE, IEEE)
        dp = mm(do, tl.trans(v), DOT_DTYPE, EMULATE, IEEE)  # [BQ, BK]
        ds = p * (dp - delta[:, None])
        dk += mm(tl.trans(ds), q, DOT_DTYPE, EMULATE, IEEE)
    dk_off = z * sdk_z + h * sdk_h + offs_k[:, None] * sdk_k + offs_c[None, :] * sdk_c
    dv_off = z * sdv_z + h * sdv_h + offs_k[:, None] * sdv_k + offs_cv[None, :] * sdv_c
    tl.store(dKp + dk_off, round_to(dk, dKp.dtype.element_ty, EMULATE), mask=mask_kc)
    tl.store(dVp + dv_off, round_to(dv, dVp.dtype.element_ty, EMULATE), mask=mask_kcv)


@triton.jit
def _attn_bwd_dbias_kernel(
    Qp, Kp, Vp, dOp, ROW_M, ROW_LOGL, DELTA, dB,
    B0, B0_ZOFF, b0_sh, b0_sq, b0_sk,
    B1, B1_ZOFF, b1_sh, b1_sq, b1_sk,
    DB_ZOFF, db_sh, db_sq, db_sk,
    sq_z, sq_h, sq_q, sq_c,
    sk_z, sk_h, sk_k, sk_c,
    sv_z, sv_h, sv_k, sv_c,
    so_z, so_h, so_q, so_c,
    Z, H, N_Q, N_K, C, CV,
    HAS_B0: tl.constexpr, HAS_B1: tl.constexpr, BCAST_Q: tl.constexpr, BCAST_K: tl.constexpr,
    Z_PER_PROGRAM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):
    """Gradient of one bias: one program per (query block, key block, h, run of Z_PER_PROGRAM rows).

    dS is recomputed row by row and summed in registers while consecutive rows z map to the same
    bias row (the pair bias shared by all N_seq rows), then added with one atomic per element, so
    a [B, 1, H, N, N] gradient costs Z / Z_PER_PROGRAM atomics per element instead of Z.
    """
    n_qb = tl.cdiv(N_Q, BLOCK_Q)
    pid_q = tl.program_id(0) % n_qb
    pid_k = tl.program_id(0) // n_qb
    h = tl.program_id(1) % H
    z0 = (tl.program_id(1) // H) * Z_PER_PROGRAM
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_c = tl.arange(0, BLOCK_C)
    offs_cv = tl.arange(0, BLOCK_CV)
    mq = offs_q < N_Q
    mk = offs_k < N_K
    valid = mq[:, None] & mk[None, :]

    acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    cur = tl.load(DB_ZOFF + z0)
    for zi in range(z0, tl.minimum(z0 + Z_PER_PROGRAM, Z)):
        off = tl.load(DB_ZOFF + zi)
        if off != cur:  # a new bias row starts: flush the sum of the previous one
            _bias_grad_add(dB, cur + h * db_sh, db_sq, db_sk, offs_q, offs_k, N_Q, N_K, acc, BCAST_Q, BCAST_K)
            acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
            cur = off
        z = tl.cast(zi, tl.int64)
        pid_zh = zi * H + h
        q = tl.load(Qp + z * sq_z + h * sq_h + offs_q[:, None] * sq_q + offs_c[None, :] * sq_c,
                    mask=mq[:, None] & (offs_c[None, :] < C), other=0.0).to(tl.float32)  # [BQ, BC]
        kt = tl.load(Kp + z * sk_z + h * sk_h + offs_k[None, :] * sk_k + offs_c[:, None] * sk_c,
                     mask=mk[None, :] & (offs_c[:, None] < C), other=0.0).to(tl.float32)  # [BC, BK]
        do = tl.load(dOp + z * so_z + h * so_h + offs_q[:, None] * so_q + offs_cv[None, :] * so_c,
                     mask=mq[:, None] & (offs_cv[None, :] < CV), other=0.0).to(tl.float32)  # [BQ, BCV]
        vt = tl.load(Vp + z * sv_z + h * sv_h + offs_k[None, :] * sv_k + offs_cv[:, None] * sv_c,
                     mask=mk[None, :] & (offs_cv[:, None] < CV), other=0.0).to(tl.float32)  # [BCV, BK]
        row_m = tl.load(ROW_M + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
        row_logl = tl.load(ROW_LOGL + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
        delta = tl.load(DELTA + pid_zh * N_Q + offs_q, mask=mq, other=0.0)
        s = mm(q, kt, DOT_DTYPE, EMULATE, IEEE)
        if HAS_B0:
            s += _bias_tile(B0, B0_ZOFF, b0_sh, b0_sq, b0_sk, z, h, offs_q, offs_k, N_Q, N_K)
        if HAS_B1:
            s += _bias_tile(B1, B1_ZOFF, b1_sh, b1_sq, b1_sk, z, h, offs_q, offs_k, N_Q, N_K)
        s = tl.where(valid, s, float("-inf"))
        p = tl.exp((s - row_m[:, None]) - row_logl[:, None])
        dp = mm(do, vt, DOT_DTYPE, EMULATE, IEEE)
        acc += p * (dp - delta[:, None])
    _bias_grad_add(dB, cur + h * db_sh, db_sq, db_sk, offs_q, offs_k, N_Q, N_K, acc, BCAST_Q, BCAST_K)


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


def _block_config(interpret: bool) -> dict:
    if interpret:  # small blocks so that the CPU tests cross several blocks
        return dict(fwd=(16, 16), dq=(16, 16), dkdv=(16, 16), dbias=(16, 16), z_per_program=4,
                    num_warps=1, num_stages=1)
    # Untuned defaults for C <= 64 on sm80+; see kernels/benchmarks/bench_attention.py.
    return dict(fwd=(64, 64), dq=(64, 32), dkdv=(32, 64), dbias=(64, 64), z_per_program=16,
                num_warps=4, num_stages=2)


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
                f"fused_attention: bias {i} of shape {tuple(b.shape)} does not broadcast to [*, H, Q, K] = {tuple(full)}"
            )
        if b.device != q.device:
            raise ValueError(f"fused_attention: bias {i} is on {b.device}, q on {q.device}")
    devices = {q.device, k.device, v.device}
    if len(devices) != 1:
        raise ValueError(f"fused_attention: q, k, v on different devices {sorted(map(str, devices))}")
    if q.device.type != "cuda" and not interpret:
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


def _dot_config(dtype: torch.dtype, interpret: bool) -> dict:
    ieee = dtype == torch.float32 and (interpret or not torch.backends.cuda.matmul.allow_tf32)
    return dict(DOT_DTYPE=_TL_DTYPE[dtype], EMULATE=interpret, IEEE=ieee)


def _bias_args(bias: Optional[_Bias], dummy: Tensor) -> tuple:
    if bias is None:
        return (dummy, dummy, 0, 0, 0)
    return (bias.tensor, bias.zoff, bias.s_h, bias.s_q, bias.s_k)


def _forward(q: Tensor, k: Tensor, v: Tensor, b0: Optional[_Bias], b1: Optional[_Bias], z: int):
    interpret = interpreter_enabled()
    H, N_Q, C = q.shape[-3:]
    N_K, CV = k.shape[-2], v.shape[-1]
    q4, k4, v4 = _flat(q, z), _flat(k, z), _flat(v, z)
    o4 = torch.empty((z, H, N_Q, CV), dtype=q.dtype, device=q.device)
    stats = torch.empty((2, z, H, N_Q), dtype=torch.float32, device=q.device)  # row max m, log l
    if o4.numel() == 0:
        return o4, stats
    cfg = _block_config(interpret)
    bq, bk = cfg["fwd"]
    grid = (triton.cdiv(N_Q, bq), z * H)
    _attn_fwd_kernel[grid](
        q4, k4, v4, o4, stats[0], stats[1],
        *_bias_args(b0, stats), *_bias_args(b1, stats),
        *q4.stride(), *k4.stride(), *v4.stride(), *o4.stride(),
        H, N_Q, N_K, C, CV,
        HAS_B0=b0 is not None, HAS_B1=b1 is not None,
        BLOCK_Q=bq, BLOCK_K=bk,
        BLOCK_C=max(16, triton.next_power_of_2(C)), BLOCK_CV=max(16, triton.next_power_of_2(CV)),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        **_dot_config(q.dtype, interpret),
    )
    return o4, stats


def _backward(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o4: Tensor, stats: Tensor,
              b0: Optional[_Bias], b1: Optional[_Bias], need_db: tuple, z: int):
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
    cfg = _block_config(interpret)
    common = dict(
        BLOCK_C=max(16, triton.next_power_of_2(C)), BLOCK_CV=max(16, triton.next_power_of_2(CV)),
        HAS_B0=b0 is not None, HAS_B1=b1 is not None,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        **_dot_config(q.dtype, interpret),
    )
    strides = (*q4.stride(), *k4.stride(), *v4.stride(), *o4.stride())

    bq, bk = cfg["dq"]
    _attn_bwd_dq_kernel[(triton.cdiv(N_Q, bq), z * H)](
        q4, k4, v4, o4, do4, stats[0], stats[1], delta, dq4,
        *_bias_args(b0, delta), *_bias_args(b1, delta),
        *strides, *dq4.stride(), H, N_Q, N_K, C, CV,
        BLOCK_Q=bq, BLOCK_K=bk, **common,
    )
    bq, bk = cfg["dkdv"]
    _attn_bwd_dkdv_kernel[(triton.cdiv(N_K, bk), z * H)](
        q4, k4, v4, do4, stats[0], stats[1], delta, dk4, dv4,
        *_bias_args(b0, delta), *_bias_args(b1, delta),
        *strides, *dk4.stride(), *dv4.stride(), H, N_Q, N_K, C, CV,
        BLOCK_Q=bq, BLOCK_K=bk, **common,
    )
    bq, bk = cfg["dbias"]
    for b, db in zip((b0, b1), dbs):
        if db is None:
            continue
        # rows of q that share one bias row are summed in registers, Z_PER_PROGRAM at a time
        z_per = cfg["z_per_program"] if b.shares_rows else 1
        grid = (triton.cdiv(N_Q, bq) * triton.cdiv(N_K, bk), triton.cdiv(z, z_per) * H)
        _attn_bwd_dbias_kernel[grid](
            q4, k4, v4, do4, stats[0], stats[1], delta, db,
            *_bias_args(b0, delta), *_bias_args(b1, delta),
            b.zoff, b.s_h, b.s_q, b.s_k,
            *strides, z, H, N_Q, N_K, C, CV,
            BCAST_Q=b.bcast_q, BCAST_K=b.bcast_k, Z_PER_PROGRAM=z_per,
            BLOCK_Q=bq, BLOCK_K=bk, **common,
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
        dq4, dk4, dv4, dbs = _backward(do, q, k, v, o4, stats, meta[0], meta[1], need_db, z)
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
