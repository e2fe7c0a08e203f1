r"""``@triton.jit`` kernels of :mod:`kernels.fused_attention` (math, launches and limits are there).

Kernel arguments: q, k, v, O, dO are [Z, H, L, C] (Z = product of the leading dims) and each
comes with the 4-tuple of its strides; a bias is the tuple ``(pointer, ZOFF, s_h, s_q, s_k)`` with
``ZOFF[z]`` the element offset of leading row z's bias row and stride 0 along each broadcast axis;
the fp32 row statistics m, log l and D are [Z * H, Q] buffers. Every kernel computes the score
tile with :func:`_scores`; the backward kernels recompute P with :func:`_probs` and dS with
:func:`_dscores`, and add bias gradients with :func:`_bias_grad_add`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_helpers import mm, round_to

__all__ = ["attn_fwd_kernel", "attn_bwd_dq_kernel", "attn_bwd_dkdv_kernel", "attn_bwd_dbias_kernel"]


@triton.jit
def _program(H, BLOCK: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr):
    """Program row pid_zh = z * H + h (axis 1), its block of BLOCK query or key indices (axis 0)
    and the channel ranges; z is 64-bit (rows x strides can exceed 2^31)."""
    pid_zh = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return pid_zh, (pid_zh // H).to(tl.int64), pid_zh % H, offs, tl.arange(0, BLOCK_C), tl.arange(0, BLOCK_CV)


@triton.jit
def _tile(P, base, s_r, s_c, offs_r, offs_c, N_R, N_C):
    """fp32 tile [len(offs_r), len(offs_c)] at ``P + base + r * s_r + c * s_c``; 0 outside [N_R, N_C]."""
    mask = (offs_r[:, None] < N_R) & (offs_c[None, :] < N_C)
    return tl.load(P + base + offs_r[:, None] * s_r + offs_c[None, :] * s_c, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _load(P, st, z, h, offs_l, offs_c, N_L, N_C):
    """fp32 tile [L, C] of head h of row z of a [Z, H, L, C] tensor with strides ``st``."""
    return _tile(P, z * st[0] + h * st[1], st[2], st[3], offs_l, offs_c, N_L, N_C)


@triton.jit
def _load_t(P, st, z, h, offs_l, offs_c, N_L, N_C):
    """The same tile transposed, [C, L]."""
    return _tile(P, z * st[0] + h * st[1], st[3], st[2], offs_c, offs_l, N_C, N_L)


@triton.jit
def _store(P, st, z, h, offs_l, offs_c, N_L, N_C, x, EMULATE: tl.constexpr):
    """Store fp32 ``x`` [L, C], rounded to P's dtype, as the tile that :func:`_load` reads."""
    mask = (offs_l[:, None] < N_L) & (offs_c[None, :] < N_C)
    ptrs = P + z * st[0] + h * st[1] + offs_l[:, None] * st[2] + offs_c[None, :] * st[3]
    tl.store(ptrs, round_to(x, P.dtype.element_ty, EMULATE), mask=mask)


@triton.jit
def _rows(P, pid_zh, offs_q, N_Q):
    """fp32 row statistic [BQ] of program row pid_zh from a [Z * H, N_Q] buffer."""
    return tl.load(P + pid_zh * N_Q + offs_q, mask=offs_q < N_Q, other=0.0)


@triton.jit
def _row_stats(ROW_M, ROW_LOGL, DELTA, pid_zh, offs_q, N_Q):
    """Row max m, log l and D [BQ] of the query rows offs_q of program row pid_zh."""
    return _rows(ROW_M, pid_zh, offs_q, N_Q), _rows(ROW_LOGL, pid_zh, offs_q, N_Q), _rows(DELTA, pid_zh, offs_q, N_Q)


@triton.jit
def _scores(
    q, kt, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, valid, HAS_B0: tl.constexpr, HAS_B1: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Score tile S = q k^T + b_0 + b_1 [BQ, BK] in fp32, -inf where not ``valid``.

    A bias is read through its strides, which are 0 along its broadcast axes."""
    s = mm(q, kt, DOT_DTYPE, EMULATE, IEEE)
    if HAS_B0:
        s += _tile(B0[0], tl.load(B0[1] + z) + h * B0[2], B0[3], B0[4], offs_q, offs_k, N_Q, N_K)
    if HAS_B1:
        s += _tile(B1[0], tl.load(B1[1] + z) + h * B1[2], B1[3], B1[4], offs_q, offs_k, N_Q, N_K)
    return tl.where(valid, s, float("-inf"))


@triton.jit
def _probs(
    q, kt, row_m, row_logl, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, HAS_B0: tl.constexpr,
    HAS_B1: tl.constexpr, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """P [BQ, BK] recomputed from the saved m and log l; 0 on padding."""
    valid = (offs_q < N_Q)[:, None] & (offs_k < N_K)[None, :]
    s = _scores(q, kt, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, valid, HAS_B0, HAS_B1, DOT_DTYPE, EMULATE, IEEE)
    return tl.exp((s - row_m[:, None]) - row_logl[:, None])


@triton.jit
def _dscores(p, do, vt, delta, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr):
    """dS = P * (dO v^T - D) [BQ, BK]."""
    return p * (mm(do, vt, DOT_DTYPE, EMULATE, IEEE) - delta[:, None])


@triton.jit
def _bias_grad_add(DB, base, offs_q, offs_k, N_Q, N_K, ds, BCAST_Q: tl.constexpr, BCAST_K: tl.constexpr):
    """Atomically add a dS tile at element offset ``base`` of a compact fp32 bias gradient
    DB = (pointer, ZOFF, s_h, s_q, s_k), summing the axes along which the bias is broadcast first."""
    mq = offs_q < N_Q
    mk = offs_k < N_K
    ds = tl.where(mq[:, None] & mk[None, :], ds, 0.0)
    if BCAST_Q:
        if BCAST_K:
            tl.atomic_add(DB[0] + base, tl.sum(tl.sum(ds, 1), 0))
        else:
            tl.atomic_add(DB[0] + base + offs_k * DB[4], tl.sum(ds, 0), mask=mk)
    else:
        if BCAST_K:
            tl.atomic_add(DB[0] + base + offs_q * DB[3], tl.sum(ds, 1), mask=mq)
        else:
            tl.atomic_add(
                DB[0] + base + offs_q[:, None] * DB[3] + offs_k[None, :] * DB[4], ds, mask=mq[:, None] & mk[None, :]
            )


@triton.jit
def attn_fwd_kernel(
    Qp, Kp, Vp, Op, ROW_M, ROW_LOGL, B0, B1, sq, sk, sv, so, H, N_Q, N_K, C, CV,
    HAS_B0: tl.constexpr, HAS_B1: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """One program per (query block, z, h): online softmax over key blocks; O, m and log l."""
    pid_zh, z, h, offs_q, offs_c, offs_cv = _program(H, BLOCK_Q, BLOCK_C, BLOCK_CV)
    q = _load(Qp, sq, z, h, offs_q, offs_c, N_Q, C)  # [BQ, BC]
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_CV], tl.float32)
    for start_k in range(0, N_K, BLOCK_K):
        offs_k = start_k + tl.arange(0, BLOCK_K)
        kt = _load_t(Kp, sk, z, h, offs_k, offs_c, N_K, C)  # [BC, BK]
        valid = (offs_k < N_K)[None, :]
        s = _scores(q, kt, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, valid, HAS_B0, HAS_B1, DOT_DTYPE, EMULATE, IEEE)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load(Vp, sv, z, h, offs_k, offs_cv, N_K, CV)  # [BK, BCV]
        acc = acc * alpha[:, None] + mm(p, v, DOT_DTYPE, EMULATE, IEEE)
        m_i = m_new
    tl.store(ROW_M + pid_zh * N_Q + offs_q, m_i, mask=offs_q < N_Q)
    tl.store(ROW_LOGL + pid_zh * N_Q + offs_q, tl.log(l_i), mask=offs_q < N_Q)
    _store(Op, so, z, h, offs_q, offs_cv, N_Q, CV, acc / l_i[:, None], EMULATE)


@triton.jit
def attn_bwd_dq_kernel(
    Qp, Kp, Vp, Op, dOp, ROW_M, ROW_LOGL, DELTA, dQp, B0, B1, sq, sk, sv, so, sdq, H, N_Q, N_K, C, CV,
    HAS_B0: tl.constexpr, HAS_B1: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """One program per (query block, z, h): D and dq (O and dO share strides)."""
    pid_zh, z, h, offs_q, offs_c, offs_cv = _program(H, BLOCK_Q, BLOCK_C, BLOCK_CV)
    do = _load(dOp, so, z, h, offs_q, offs_cv, N_Q, CV)  # [BQ, BCV]
    delta = tl.sum(do * _load(Op, so, z, h, offs_q, offs_cv, N_Q, CV), 1)  # [BQ]
    q = _load(Qp, sq, z, h, offs_q, offs_c, N_Q, C)  # [BQ, BC]
    tl.store(DELTA + pid_zh * N_Q + offs_q, delta, mask=offs_q < N_Q)
    row_m = _rows(ROW_M, pid_zh, offs_q, N_Q)
    row_logl = _rows(ROW_LOGL, pid_zh, offs_q, N_Q)
    dq = tl.zeros([BLOCK_Q, BLOCK_C], tl.float32)
    for start_k in range(0, N_K, BLOCK_K):
        offs_k = start_k + tl.arange(0, BLOCK_K)
        kt = _load_t(Kp, sk, z, h, offs_k, offs_c, N_K, C)  # [BC, BK]
        vt = _load_t(Vp, sv, z, h, offs_k, offs_cv, N_K, CV)  # [BCV, BK]
        p = _probs(
            q, kt, row_m, row_logl, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, HAS_B0, HAS_B1, DOT_DTYPE, EMULATE, IEEE
        )  # [BQ, BK]
        ds = _dscores(p, do, vt, delta, DOT_DTYPE, EMULATE, IEEE)
        dq += mm(ds, tl.trans(kt), DOT_DTYPE, EMULATE, IEEE)
    _store(dQp, sdq, z, h, offs_q, offs_c, N_Q, C, dq, EMULATE)


@triton.jit
def attn_bwd_dkdv_kernel(
    Qp, Kp, Vp, dOp, ROW_M, ROW_LOGL, DELTA, dKp, dVp, B0, B1, DB0, DB1, sq, sk, sv, so, sdk, sdv,
    H, N_Q, N_K, C, CV, HAS_B0: tl.constexpr, HAS_B1: tl.constexpr, FOLD_B0: tl.constexpr, FOLD_B1: tl.constexpr,
    BCAST_Q0: tl.constexpr, BCAST_K0: tl.constexpr, BCAST_Q1: tl.constexpr, BCAST_K1: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """One program per (key block, z, h): dk and dv; with FOLD_Bt, also the gradient DB_t of bias t
    (same tuple layout as the bias, fp32) from the dS tiles it already holds, one atomic add per tile
    (the bias rows of different z are distinct unless the bias is shared, which the launcher does not fold)."""
    pid_zh, z, h, offs_k, offs_c, offs_cv = _program(H, BLOCK_K, BLOCK_C, BLOCK_CV)
    k = _load(Kp, sk, z, h, offs_k, offs_c, N_K, C)  # [BK, BC]
    v = _load(Vp, sv, z, h, offs_k, offs_cv, N_K, CV)  # [BK, BCV]
    dk = tl.zeros([BLOCK_K, BLOCK_C], tl.float32)
    dv = tl.zeros([BLOCK_K, BLOCK_CV], tl.float32)
    for start_q in range(0, N_Q, BLOCK_Q):
        offs_q = start_q + tl.arange(0, BLOCK_Q)
        q = _load(Qp, sq, z, h, offs_q, offs_c, N_Q, C)  # [BQ, BC]
        do = _load(dOp, so, z, h, offs_q, offs_cv, N_Q, CV)  # [BQ, BCV]
        row_m, row_logl, delta = _row_stats(ROW_M, ROW_LOGL, DELTA, pid_zh, offs_q, N_Q)
        p = _probs(q, tl.trans(k), row_m, row_logl, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, HAS_B0, HAS_B1,
                   DOT_DTYPE, EMULATE, IEEE)  # fmt: skip
        dv += mm(tl.trans(p), do, DOT_DTYPE, EMULATE, IEEE)
        ds = _dscores(p, do, tl.trans(v), delta, DOT_DTYPE, EMULATE, IEEE)
        dk += mm(tl.trans(ds), q, DOT_DTYPE, EMULATE, IEEE)
        if FOLD_B0:
            _bias_grad_add(DB0, tl.load(DB0[1] + z) + h * DB0[2], offs_q, offs_k, N_Q, N_K, ds, BCAST_Q0, BCAST_K0)
        if FOLD_B1:
            _bias_grad_add(DB1, tl.load(DB1[1] + z) + h * DB1[2], offs_q, offs_k, N_Q, N_K, ds, BCAST_Q1, BCAST_K1)
    _store(dKp, sdk, z, h, offs_k, offs_c, N_K, C, dk, EMULATE)
    _store(dVp, sdv, z, h, offs_k, offs_cv, N_K, CV, dv, EMULATE)


@triton.jit
def attn_bwd_dbias_kernel(
    Qp, Kp, Vp, dOp, ROW_M, ROW_LOGL, DELTA, DB, B0, B1, sq, sk, sv, so, Z, H, N_Q, N_K, C, CV,
    BCAST_Q: tl.constexpr, BCAST_K: tl.constexpr, Z_PER_PROGRAM: tl.constexpr, HAS_B0: tl.constexpr,
    HAS_B1: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
    BLOCK_CV: tl.constexpr, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Gradient DB of one bias: one program per (query block, key block, h, run of Z_PER_PROGRAM rows).

    dS is recomputed row by row and summed in registers while consecutive rows z map to the same
    bias row (the pair bias shared by all N_seq rows), then added with one atomic per element, so
    a [B, 1, H, N, N] gradient costs Z / Z_PER_PROGRAM atomics per element instead of Z.
    """
    n_qb = tl.cdiv(N_Q, BLOCK_Q)
    offs_q = (tl.program_id(0) % n_qb) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = (tl.program_id(0) // n_qb) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_c = tl.arange(0, BLOCK_C)
    offs_cv = tl.arange(0, BLOCK_CV)
    h = tl.program_id(1) % H
    z0 = (tl.program_id(1) // H) * Z_PER_PROGRAM
    acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    cur = tl.load(DB[1] + z0)
    for zi in range(z0, tl.minimum(z0 + Z_PER_PROGRAM, Z)):
        off = tl.load(DB[1] + zi)
        if off != cur:  # a new bias row starts: flush the sum of the previous one
            _bias_grad_add(DB, cur + h * DB[2], offs_q, offs_k, N_Q, N_K, acc, BCAST_Q, BCAST_K)
            acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
            cur = off
        z = tl.cast(zi, tl.int64)
        pid_zh = zi * H + h
        q = _load(Qp, sq, z, h, offs_q, offs_c, N_Q, C)  # [BQ, BC]
        kt = _load_t(Kp, sk, z, h, offs_k, offs_c, N_K, C)  # [BC, BK]
        do = _load(dOp, so, z, h, offs_q, offs_cv, N_Q, CV)  # [BQ, BCV]
        vt = _load_t(Vp, sv, z, h, offs_k, offs_cv, N_K, CV)  # [BCV, BK]
        row_m, row_logl, delta = _row_stats(ROW_M, ROW_LOGL, DELTA, pid_zh, offs_q, N_Q)
        p = _probs(
            q, kt, row_m, row_logl, B0, B1, z, h, offs_q, offs_k, N_Q, N_K, HAS_B0, HAS_B1, DOT_DTYPE, EMULATE, IEEE
        )  # [BQ, BK]
        acc += _dscores(p, do, vt, delta, DOT_DTYPE, EMULATE, IEEE)
    _bias_grad_add(DB, cur + h * DB[2], offs_q, offs_k, N_Q, N_K, acc, BCAST_Q, BCAST_K)
