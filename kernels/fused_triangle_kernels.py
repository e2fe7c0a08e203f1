r"""``@triton.jit`` kernels of :mod:`kernels.fused_triangle` (math, launches and limits are there).

Conventions. Every kernel sees the contraction in its outgoing form ``x_ij = sum_k A_ik B_jk``: the
launcher passes the "contraction view" of z (z itself for Alg. 11, z with its two residue axes
swapped, through strides, for Alg. 12) and the projection weights in role order (A projection, A
gate, B projection, B gate) as one ``[4, C_H, C_Z]`` tensor WP with biases BP ``[4, C_H]``. A
[B, N, N] tensor (mask, LayerNorm statistics) comes with its strides ``(s_b, s_p, s_q)``, a
[B, N, N, C] tensor with ``(s_b, s_p, s_q, s_c)``; STATS is the pair (mean pointer, rstd pointer)
of the input LayerNorm. Every linear weight is in ``torch.nn.Linear`` layout ``[c_out, c_in]``
and contiguous. All arithmetic is fp32; matmul operands are rounded to DOT_DTYPE (see
:mod:`kernels._triton_helpers`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_helpers import mm, round_to

__all__ = ["tri_fwd_kernel", "tri_bwd_out_kernel", "tri_bwd_proj_kernel"]


@triton.jit
def _pairs(P, st, b, offs_p, offs_q, N):
    """fp32 [BP, BQ] of a [B, N, N] tensor at pairs (offs_p, offs_q) of batch b; 0 outside."""
    valid = (offs_p < N)[:, None] & (offs_q < N)[None, :]
    ptrs = P + b * st[0] + offs_p.to(tl.int64)[:, None] * st[1] + offs_q.to(tl.int64)[None, :] * st[2]
    return tl.load(ptrs, mask=valid, other=0.0).to(tl.float32)


@triton.jit
def _ptrs3(P, st, b, offs_p, offs_q, offs_c):
    """Pointers [BP, BQ, BC] into a [B, N, N, C] tensor (64-bit offsets: N^2 C can exceed 2^31)."""
    return (
        P
        + b * st[0]
        + offs_p.to(tl.int64)[:, None, None] * st[1]
        + offs_q.to(tl.int64)[None, :, None] * st[2]
        + offs_c.to(tl.int64)[None, None, :] * st[3]
    )


@triton.jit
def _mask3(offs_p, offs_q, offs_c, N, C):
    return ((offs_p < N)[:, None] & (offs_q < N)[None, :])[:, :, None] & (offs_c < C)[None, None, :]


@triton.jit
def _normed(
    Z,
    zs,
    STATS,
    ss,
    LNW,
    LNB,
    b,
    offs_p,
    offs_q,
    N,
    CZ,
    BLOCK_P: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
):
    """LayerNorm(z) at pairs (offs_p, offs_q) as rows [BP * BQ, BCZ] (fp32; 0 on padding)."""
    offs_c = tl.arange(0, BLOCK_CZ)
    valid = _mask3(offs_p, offs_q, offs_c, N, CZ)
    z = tl.load(_ptrs3(Z, zs, b, offs_p, offs_q, offs_c), mask=valid, other=0.0).to(tl.float32)
    mean = _pairs(STATS[0], ss, b, offs_p, offs_q, N)
    rstd = _pairs(STATS[1], ss, b, offs_p, offs_q, N)
    w = tl.load(LNW + offs_c, mask=offs_c < CZ, other=0.0).to(tl.float32)
    bias = tl.load(LNB + offs_c, mask=offs_c < CZ, other=0.0).to(tl.float32)
    zn = (z - mean[:, :, None]) * rstd[:, :, None] * w[None, None, :] + bias[None, None, :]
    return tl.reshape(tl.where(valid, zn, 0.0), (BLOCK_P * BLOCK_Q, BLOCK_CZ))


@triton.jit
def _weight_t(W, row0, offs_out, N_OUT, offs_in, N_IN):
    """fp32 [len(offs_in), len(offs_out)]: rows ``row0 + offs_out`` of a row-major [*, N_IN] weight, transposed."""
    mask = (offs_in < N_IN)[:, None] & (offs_out < N_OUT)[None, :]
    return tl.load(W + (row0 + offs_out)[None, :] * N_IN + offs_in[:, None], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _weight(W, row0, offs_out, N_OUT, offs_in, N_IN):
    """fp32 [len(offs_out), len(offs_in)]: rows ``row0 + offs_out`` of a row-major [*, N_IN] weight."""
    mask = (offs_out < N_OUT)[:, None] & (offs_in < N_IN)[None, :]
    return tl.load(W + (row0 + offs_out)[:, None] * N_IN + offs_in[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _vec(V, offs, N):
    return tl.load(V + offs, mask=offs < N, other=0.0).to(tl.float32)


@triton.jit
def _pair_rows(role: tl.constexpr, h0, CH, BLOCK_H: tl.constexpr):
    """Rows of WP / BP for the interleaved columns r = 2 h + s of one role's (projection, gate) pair
    (s = 0: projection, 1: gate) at channels h0 + h, and whether the channel exists."""
    r = tl.arange(0, 2 * BLOCK_H)
    h = h0 + r // 2
    return (2 * role + r % 2) * CH + h, h < CH


@triton.jit
def _gated_linear(
    zn,
    WP,
    BP,
    role: tl.constexpr,
    h0,
    CH,
    CZ,
    BLOCK_H: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    EMULATE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Pre-activations (projection, gate) [R, BH] each, of role 0 (A) or 1 (B) at channels h0 + [0, BH),
    for normalised rows zn [R, BCZ]: one matmul with both weights interleaved."""
    rows, valid = _pair_rows(role, h0, CH, BLOCK_H)
    offs_c = tl.arange(0, BLOCK_CZ)
    w = tl.load(WP + rows[None, :] * CZ + offs_c[:, None], mask=valid[None, :] & (offs_c < CZ)[:, None], other=0.0)
    pg = mm(zn, w.to(tl.float32), DOT_DTYPE, EMULATE, IEEE) + tl.load(BP + rows, mask=valid, other=0.0)[None, :]
    return tl.split(tl.reshape(pg, (zn.shape[0], BLOCK_H, 2)))


@triton.jit
def _projection(
    Z,
    zs,
    STATS,
    ss,
    M,
    ms,
    LNW,
    LNB,
    WP,
    BP,
    role: tl.constexpr,
    b,
    offs_p,
    offs_q,
    h0,
    N,
    CZ,
    CH,
    BLOCK_P: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    EMULATE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """The gated, masked projection of one role at pairs (offs_p, offs_q), channels h0 + [0, BH):
    [BH, BP, BQ], recomputed from z (never read from memory)."""
    zn = _normed(Z, zs, STATS, ss, LNW, LNB, b, offs_p, offs_q, N, CZ, BLOCK_P, BLOCK_Q, BLOCK_CZ)
    m = tl.reshape(_pairs(M, ms, b, offs_p, offs_q, N), (BLOCK_P * BLOCK_Q,))
    p, g = _gated_linear(zn, WP, BP, role, h0, CH, CZ, BLOCK_H, BLOCK_CZ, DOT_DTYPE, EMULATE, IEEE)
    out = tl.reshape(p * tl.sigmoid(g) * m[:, None], (BLOCK_P, BLOCK_Q, BLOCK_H))
    return tl.permute(out, (2, 0, 1))


@triton.jit
def tri_fwd_kernel(
    ZC,
    zcs,
    MC,
    mcs,
    STATS_C,
    scs,
    ZG,
    zgs,
    STATS_G,
    sgs,
    LNW,
    LNB,
    WP,
    BP,
    CLNW,
    S,
    T,
    WO,
    WG,
    BG,
    OUT,
    outs,
    X,
    xs,
    N,
    CZ,
    CH,
    eps,
    STORE_X: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    EMULATE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """One program per (i block, j block, batch). Channel block by channel block: x_ij = sum_k A_ik B_jk
    with A and B recomputed per (i or j, k) tile. STORE_X: write x [B, N, N, C_H] (fp32; the backward's
    recomputation) and stop. Otherwise fold each channel block into the output LayerNorm statistics
    (Chan's parallel update) and into acc = sum_h (x_h - shift) w_h W_out[:, h], so that
    LayerNorm(x) W_out^T + b_out = rstd (acc - (mean - shift) S) + T with S = W_out w_ln and
    T = W_out b_ln + b_out (shift: the first block's mean, against cancellation); then gate and store."""
    offs_i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    offs_j = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
    b = tl.program_id(2).to(tl.int64)
    offs_c = tl.arange(0, BLOCK_CZ)
    mean_x = tl.zeros([BLOCK_I, BLOCK_J], tl.float32)
    m2 = tl.zeros([BLOCK_I, BLOCK_J], tl.float32)
    shift = tl.zeros([BLOCK_I, BLOCK_J], tl.float32)
    acc = tl.zeros([BLOCK_I * BLOCK_J, BLOCK_CZ], tl.float32)
    for h0 in range(0, CH, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        x = tl.zeros([BLOCK_H, BLOCK_I, BLOCK_J], tl.float32)
        for k0 in range(0, N, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            a = _projection(
                ZC,
                zcs,
                STATS_C,
                scs,
                MC,
                mcs,
                LNW,
                LNB,
                WP,
                BP,
                0,
                b,
                offs_i,
                offs_k,
                h0,
                N,
                CZ,
                CH,
                BLOCK_I,
                BLOCK_K,
                BLOCK_H,
                BLOCK_CZ,
                DOT_DTYPE,
                EMULATE,
                IEEE,
            )  # [BH, BI, BK]
            bt = _projection(
                ZC,
                zcs,
                STATS_C,
                scs,
                MC,
                mcs,
                LNW,
                LNB,
                WP,
                BP,
                1,
                b,
                offs_j,
                offs_k,
                h0,
                N,
                CZ,
                CH,
                BLOCK_J,
                BLOCK_K,
                BLOCK_H,
                BLOCK_CZ,
                DOT_DTYPE,
                EMULATE,
                IEEE,
            )  # [BH, BJ, BK]
            x += mm(a, tl.permute(bt, (0, 2, 1)), DOT_DTYPE, EMULATE, IEEE)  # [BH, BI, BJ]
        xt = tl.permute(x, (1, 2, 0))  # [BI, BJ, BH]
        hm = (offs_h < CH)[None, None, :]
        if STORE_X:
            tl.store(_ptrs3(X, xs, b, offs_i, offs_j, offs_h), xt, mask=_mask3(offs_i, offs_j, offs_h, N, CH))
        else:
            nb = tl.minimum(CH - h0, BLOCK_H).to(tl.float32)
            block_mean = tl.sum(tl.where(hm, xt, 0.0), 2) / nb
            d = tl.where(hm, xt - block_mean[:, :, None], 0.0)
            total = h0 + nb
            delta = block_mean - mean_x
            mean_x += delta * (nb / total)
            m2 += tl.sum(d * d, 2) + delta * delta * (h0 * nb / total)
            shift = tl.where(h0 == 0, block_mean, shift)
            xw = tl.where(hm, (xt - shift[:, :, None]) * _vec(CLNW, offs_h, CH)[None, None, :], 0.0)
            acc += mm(
                tl.reshape(xw, (BLOCK_I * BLOCK_J, BLOCK_H)),
                _weight_t(WO, 0, offs_c, CZ, offs_h, CH),
                DOT_DTYPE,
                EMULATE,
                IEEE,
            )  # [BI * BJ, BCZ]
    if not STORE_X:
        rstd = tl.reshape(1.0 / tl.sqrt(m2 / CH + eps), (BLOCK_I * BLOCK_J,))
        dmean = tl.reshape(mean_x - shift, (BLOCK_I * BLOCK_J,))
        y = rstd[:, None] * (acc - dmean[:, None] * _vec(S, offs_c, CZ)[None, :]) + _vec(T, offs_c, CZ)[None, :]
        zn = _normed(ZG, zgs, STATS_G, sgs, LNW, LNB, b, offs_i, offs_j, N, CZ, BLOCK_I, BLOCK_J, BLOCK_CZ)
        g = mm(zn, _weight_t(WG, 0, offs_c, CZ, offs_c, CZ), DOT_DTYPE, EMULATE, IEEE) + _vec(BG, offs_c, CZ)[None, :]
        out = tl.reshape(y * tl.sigmoid(g), (BLOCK_I, BLOCK_J, BLOCK_CZ))
        tl.store(
            _ptrs3(OUT, outs, b, offs_i, offs_j, offs_c),
            round_to(out, OUT.dtype.element_ty, EMULATE),
            mask=_mask3(offs_i, offs_j, offs_c, N, CZ),
        )


@triton.jit
def tri_bwd_out_kernel(
    X,
    Z,
    STATS,
    dOUT,
    DZN,
    LNW,
    LNB,
    CLNW,
    CLNB,
    WO,
    BO,
    WG,
    BG,
    DWO,
    DBO,
    DWG,
    DBG,
    DCLNW,
    DCLNB,
    R,
    CZ,
    CH,
    eps,
    N_PROGRAMS,
    BLOCK_R: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
    BLOCK_CH: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    EMULATE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Backward of ``sigmoid(z' W_g) * (LayerNorm(x) W_out)`` over rows (pairs) of the contiguous
    X [R, C_H], z, dOUT [R, C_Z]: x -> dx in place in X, the gate branch's dz' -> DZN [R, C_Z] (fp32),
    and fp32 partial weight gradients of program p (rows p, p + N_PROGRAMS, ... blocks) in row p of
    DWO [P, BCZ, BCH], DBO, DWG [P, BCZ, BCZ], DBG, DCLNW, DCLNB."""
    pid = tl.program_id(0)
    offs_c = tl.arange(0, BLOCK_CZ)
    offs_h = tl.arange(0, BLOCK_CH)
    cm = offs_c < CZ
    hm = offs_h < CH
    w_ln = _vec(CLNW, offs_h, CH)
    b_ln = _vec(CLNB, offs_h, CH)
    wo = _weight(WO, 0, offs_c, CZ, offs_h, CH)  # [BCZ, BCH]
    wg = _weight(WG, 0, offs_c, CZ, offs_c, CZ)  # [BCZ, BCZ] (out, in)
    d_wo = tl.zeros([BLOCK_CZ, BLOCK_CH], tl.float32)
    d_wg = tl.zeros([BLOCK_CZ, BLOCK_CZ], tl.float32)
    d_bo = tl.zeros([BLOCK_CZ], tl.float32)
    d_bg = tl.zeros([BLOCK_CZ], tl.float32)
    d_wln = tl.zeros([BLOCK_CH], tl.float32)
    d_bln = tl.zeros([BLOCK_CH], tl.float32)
    for blk in range(pid, tl.cdiv(R, BLOCK_R), N_PROGRAMS):
        rows = (blk * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        rm = rows < R
        xh = rm[:, None] & hm[None, :]
        xc = rm[:, None] & cm[None, :]
        x = tl.load(X + rows[:, None] * CH + offs_h[None, :], mask=xh, other=0.0)
        mean = tl.sum(x, 1) / CH
        xc_ = tl.where(xh, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc_ * xc_, 1) / CH + eps)
        xhat = xc_ * rstd[:, None]
        ln = tl.where(xh, xhat * w_ln[None, :] + b_ln[None, :], 0.0)
        y = mm(ln, tl.trans(wo), DOT_DTYPE, EMULATE, IEEE) + _vec(BO, offs_c, CZ)[None, :]  # [BR, BCZ]
        z = tl.load(Z + rows[:, None] * CZ + offs_c[None, :], mask=xc, other=0.0).to(tl.float32)
        z_mean = tl.load(STATS[0] + rows, mask=rm, other=0.0)
        z_rstd = tl.load(STATS[1] + rows, mask=rm, other=0.0)
        zn = (z - z_mean[:, None]) * z_rstd[:, None] * _vec(LNW, offs_c, CZ)[None, :] + _vec(LNB, offs_c, CZ)[None, :]
        zn = tl.where(xc, zn, 0.0)
        g = tl.sigmoid(mm(zn, tl.trans(wg), DOT_DTYPE, EMULATE, IEEE) + _vec(BG, offs_c, CZ)[None, :])
        d_out = tl.load(dOUT + rows[:, None] * CZ + offs_c[None, :], mask=xc, other=0.0).to(tl.float32)
        dy = d_out * g
        dg = tl.where(xc, d_out * y * g * (1.0 - g), 0.0)
        d_wo += mm(tl.trans(dy), ln, DOT_DTYPE, EMULATE, IEEE)
        d_bo += tl.sum(dy, 0)
        d_wg += mm(tl.trans(dg), zn, DOT_DTYPE, EMULATE, IEEE)
        d_bg += tl.sum(dg, 0)
        dln = mm(dy, wo, DOT_DTYPE, EMULATE, IEEE)  # [BR, BCH]
        d_wln += tl.sum(dln * xhat, 0)
        d_bln += tl.sum(dln, 0)
        dxhat = tl.where(xh, dln * w_ln[None, :], 0.0)
        c1 = tl.sum(dxhat * xhat, 1) / CH
        c2 = tl.sum(dxhat, 1) / CH
        dx = (dxhat - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(X + rows[:, None] * CH + offs_h[None, :], dx, mask=xh)
        tl.store(DZN + rows[:, None] * CZ + offs_c[None, :], mm(dg, wg, DOT_DTYPE, EMULATE, IEEE), mask=xc)
    tl.store(DWO + pid * BLOCK_CZ * BLOCK_CH + offs_c[:, None] * BLOCK_CH + offs_h[None, :], d_wo)
    tl.store(DWG + pid * BLOCK_CZ * BLOCK_CZ + offs_c[:, None] * BLOCK_CZ + offs_c[None, :], d_wg)
    tl.store(DBO + pid * BLOCK_CZ + offs_c, d_bo)
    tl.store(DBG + pid * BLOCK_CZ + offs_c, d_bg)
    tl.store(DCLNW + pid * BLOCK_CH + offs_h, d_wln)
    tl.store(DCLNB + pid * BLOCK_CH + offs_h, d_bln)


@triton.jit
def _dx_tile(X, xs, b, offs_r, offs_s, offs_h, N, CH):
    """dx [BH, BR, BS] at X[b, r, s, h] (pass strides with axes 1 and 2 swapped to read X[b, s, r, h])."""
    ptrs = (
        X
        + b * xs[0]
        + offs_r.to(tl.int64)[None, :, None] * xs[1]
        + offs_s.to(tl.int64)[None, None, :] * xs[2]
        + offs_h.to(tl.int64)[:, None, None] * xs[3]
    )
    mask = (offs_h < CH)[:, None, None] & (offs_r < N)[None, :, None] & (offs_s < N)[None, None, :]
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def _role_backward(
    d,
    zn,
    m,
    WP,
    BP,
    role: tl.constexpr,
    h0,
    CH,
    CZ,
    BLOCK_H: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    EMULATE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """From dL/d(projection) ``d`` [R, BH] of one role at rows zn [R, BCZ] (mask m [R]): the
    pre-activation gradients [R, 2 BH] (projection and gate interleaved, as :func:`_pair_rows`)
    and their contribution to dz' [R, BCZ]."""
    p, g = _gated_linear(zn, WP, BP, role, h0, CH, CZ, BLOCK_H, BLOCK_CZ, DOT_DTYPE, EMULATE, IEEE)
    s = tl.sigmoid(g)
    d = d * m[:, None]
    d_pre = tl.reshape(tl.join(d * s, d * p * s * (1.0 - s)), (zn.shape[0], 2 * BLOCK_H))
    rows, valid = _pair_rows(role, h0, CH, BLOCK_H)
    offs_c = tl.arange(0, BLOCK_CZ)
    w = tl.load(WP + rows[:, None] * CZ + offs_c[None, :], mask=valid[:, None] & (offs_c < CZ)[None, :], other=0.0)
    return d_pre, mm(d_pre, w.to(tl.float32), DOT_DTYPE, EMULATE, IEEE)


@triton.jit
def _store_role(DWP, DBP, role: tl.constexpr, h0, CH, d_w, d_b, BLOCK_H: tl.constexpr, BLOCK_CZ: tl.constexpr):
    """Store one role's partial gradients (interleaved rows, :func:`_pair_rows`) into this program's
    DWP [4 C_H, BCZ] and DBP [4 C_H]."""
    rows, valid = _pair_rows(role, h0, CH, BLOCK_H)
    offs_c = tl.arange(0, BLOCK_CZ)
    tl.store(DWP + rows[:, None] * BLOCK_CZ + offs_c[None, :], d_w, mask=valid[:, None])
    tl.store(DBP + rows, d_b, mask=valid)


@triton.jit
def tri_bwd_proj_kernel(
    X,
    xs,
    xts,
    ZC,
    zcs,
    MC,
    mcs,
    STATS_C,
    scs,
    DZN,
    dzs,
    LNW,
    LNB,
    WP,
    BP,
    DWP,
    DBP,
    N,
    CZ,
    CH,
    N_TILES,
    N_PROGRAMS,
    ATOMIC: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_CZ: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    EMULATE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Backward through the contraction and the gated projections. Grid (P persistent programs,
    channel blocks); each program loops over pair tiles (p, q) of the contraction view::

        dA_pq = sum_j dx_pj B_jq,   dB_pq = sum_i dx_ip A_iq     (A, B recomputed per tile)

    then through the gates and projections at (p, q): dz' is added to DZN (in place, or atomically
    when several channel blocks add to it), and fp32 partial gradients of WP / BP for its channels
    go to row p of DWP [P, 4 C_H, BCZ] and DBP [P, 4 C_H]."""
    pid = tl.program_id(0)
    h0 = tl.program_id(1) * BLOCK_H
    offs_h = h0 + tl.arange(0, BLOCK_H)
    offs_c = tl.arange(0, BLOCK_CZ)
    d_wa = tl.zeros([2 * BLOCK_H, BLOCK_CZ], tl.float32)  # interleaved (projection, gate) rows of role A
    d_wb = tl.zeros([2 * BLOCK_H, BLOCK_CZ], tl.float32)
    d_ba = tl.zeros([2 * BLOCK_H], tl.float32)
    d_bb = tl.zeros([2 * BLOCK_H], tl.float32)
    n_pb = tl.cdiv(N, BLOCK_P)
    n_qb = tl.cdiv(N, BLOCK_Q)
    for t in range(pid, N_TILES, N_PROGRAMS):
        b = (t // (n_pb * n_qb)).to(tl.int64)
        offs_p = ((t // n_qb) % n_pb) * BLOCK_P + tl.arange(0, BLOCK_P)
        offs_q = (t % n_qb) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        d_a = tl.zeros([BLOCK_H, BLOCK_P, BLOCK_Q], tl.float32)
        d_b = tl.zeros([BLOCK_H, BLOCK_P, BLOCK_Q], tl.float32)
        for j0 in range(0, N, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)
            bt = _projection(
                ZC,
                zcs,
                STATS_C,
                scs,
                MC,
                mcs,
                LNW,
                LNB,
                WP,
                BP,
                1,
                b,
                offs_j,
                offs_q,
                h0,
                N,
                CZ,
                CH,
                BLOCK_J,
                BLOCK_Q,
                BLOCK_H,
                BLOCK_CZ,
                DOT_DTYPE,
                EMULATE,
                IEEE,
            )  # B_jq [BH, BJ, BQ]
            d_a += mm(_dx_tile(X, xs, b, offs_p, offs_j, offs_h, N, CH), bt, DOT_DTYPE, EMULATE, IEEE)
            at = _projection(
                ZC,
                zcs,
                STATS_C,
                scs,
                MC,
                mcs,
                LNW,
                LNB,
                WP,
                BP,
                0,
                b,
                offs_j,
                offs_q,
                h0,
                N,
                CZ,
                CH,
                BLOCK_J,
                BLOCK_Q,
                BLOCK_H,
                BLOCK_CZ,
                DOT_DTYPE,
                EMULATE,
                IEEE,
            )  # A_iq, i = j0 + ...
            d_b += mm(_dx_tile(X, xts, b, offs_p, offs_j, offs_h, N, CH), at, DOT_DTYPE, EMULATE, IEEE)
        zn = _normed(ZC, zcs, STATS_C, scs, LNW, LNB, b, offs_p, offs_q, N, CZ, BLOCK_P, BLOCK_Q, BLOCK_CZ)
        m = tl.reshape(_pairs(MC, mcs, b, offs_p, offs_q, N), (BLOCK_P * BLOCK_Q,))
        rows_a = tl.reshape(tl.permute(d_a, (1, 2, 0)), (BLOCK_P * BLOCK_Q, BLOCK_H))
        rows_b = tl.reshape(tl.permute(d_b, (1, 2, 0)), (BLOCK_P * BLOCK_Q, BLOCK_H))
        pre_a, dzn = _role_backward(rows_a, zn, m, WP, BP, 0, h0, CH, CZ, BLOCK_H, BLOCK_CZ, DOT_DTYPE, EMULATE, IEEE)
        pre_b, dzn_b = _role_backward(rows_b, zn, m, WP, BP, 1, h0, CH, CZ, BLOCK_H, BLOCK_CZ, DOT_DTYPE, EMULATE, IEEE)
        d_wa += mm(tl.trans(pre_a), zn, DOT_DTYPE, EMULATE, IEEE)
        d_wb += mm(tl.trans(pre_b), zn, DOT_DTYPE, EMULATE, IEEE)
        d_ba += tl.sum(pre_a, 0)
        d_bb += tl.sum(pre_b, 0)
        dzn = tl.reshape(dzn + dzn_b, (BLOCK_P, BLOCK_Q, BLOCK_CZ))
        ptrs = _ptrs3(DZN, dzs, b, offs_p, offs_q, offs_c)
        valid = _mask3(offs_p, offs_q, offs_c, N, CZ)
        if ATOMIC:
            tl.atomic_add(ptrs, dzn, mask=valid)
        else:
            tl.store(ptrs, tl.load(ptrs, mask=valid, other=0.0) + dzn, mask=valid)
    _store_role(DWP + pid * 4 * CH * BLOCK_CZ, DBP + pid * 4 * CH, 0, h0, CH, d_wa, d_ba, BLOCK_H, BLOCK_CZ)
    _store_role(DWP + pid * 4 * CH * BLOCK_CZ, DBP + pid * 4 * CH, 1, h0, CH, d_wb, d_bb, BLOCK_H, BLOCK_CZ)
