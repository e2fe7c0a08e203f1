r"""``@triton.jit`` backward kernels of :mod:`kernels.fused_triangle` (conventions, helpers and the forward
kernels: :mod:`kernels.fused_triangle_kernels`; math, launches and limits: :mod:`kernels.fused_triangle`).

Weight gradients are fp32 partial sums, one set per program, summed by the launcher (deterministic):
no program holds a ``[c_z, c_hidden]`` accumulator. The output branch's weight gradients are tiled
over BLOCK_O output channels (:func:`tri_bwd_out_weights_kernel`); the projections' over BLOCK_H
hidden channels and BLOCK_C input channels, added to the program's own partial in global memory
(:func:`tri_bwd_proj_kernel`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_helpers import mm
from .fused_triangle_kernels import (
    _aligned,
    _aligned_strides,
    _gated_pre,
    _matrix_rows,
    _normed,
    _out_chunk,
    _out_inputs,
    _pair_ptrs,
    _pair_vec,
    _projection,
    _rows,
    _tile_rows,
    _vec,
)

__all__ = ["tri_bwd_out_weights_kernel", "tri_bwd_out_kernel", "tri_bwd_proj_kernel"]


@triton.jit
def _out_grads(y, g, dOUT, rows, rm, offs_o, CZ):
    """dL/dy and dL/d(gate pre-activation) at output channels offs_o, [BR, BO] each (0 on padding)."""
    d_out = _rows(dOUT, rows, rm, offs_o, CZ)
    return d_out * g, d_out * y * g * (1.0 - g)


@triton.jit
def tri_bwd_out_weights_kernel(
    X, Z, STATS, dOUT, R, CZ, CH, eps, LN, CLN, OW, DW, N_SPLIT,
    BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_CZ: tl.constexpr, BLOCK_CH: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr, ALIGN_Z: tl.constexpr, ALIGN_H: tl.constexpr,
):  # fmt: skip
    """Gradients of the output branch's W_out, b_out, W_g, b_g over the rows (pairs) of X [R, C_H] (x,
    fp32), z and dOUT [R, C_Z]. Grid (output-channel blocks of BLOCK_O, N_SPLIT row splits): program
    (o, s) sums rows blocks s, s + N_SPLIT, ... into rows o * BLOCK_O + [0, BLOCK_O) of its partials
    DW = (dW_out [N_SPLIT, BCZ, BCH], db_out [N_SPLIT, BCZ], dW_g [N_SPLIT, BCZ, BCZ], db_g [N_SPLIT, BCZ])."""
    CZ, CH = _aligned(CZ, ALIGN_Z), _aligned(CH, ALIGN_H)
    offs_o = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
    split = tl.program_id(1)
    d_wo = tl.zeros([BLOCK_O, BLOCK_CH], tl.float32)
    d_wg = tl.zeros([BLOCK_O, BLOCK_CZ], tl.float32)
    d_bo = tl.zeros([BLOCK_O], tl.float32)
    d_bg = tl.zeros([BLOCK_O], tl.float32)
    for blk in range(split, tl.cdiv(R, BLOCK_R), N_SPLIT):
        rows, rm, ln, _, _, zn = _out_inputs(X, Z, STATS, LN, CLN, blk, R, CZ, CH, eps, BLOCK_R, BLOCK_CZ, BLOCK_CH)
        y, g = _out_chunk(ln, zn, OW, offs_o, CZ, CH, DOT_DTYPE, EMULATE, IEEE)
        dy, dg = _out_grads(y, g, dOUT, rows, rm, offs_o, CZ)
        d_wo += mm(tl.trans(dy), ln, DOT_DTYPE, EMULATE, IEEE)
        d_wg += mm(tl.trans(dg), zn, DOT_DTYPE, EMULATE, IEEE)
        d_bo += tl.sum(dy, 0)
        d_bg += tl.sum(dg, 0)
    offs_h = tl.arange(0, BLOCK_CH)
    offs_c = tl.arange(0, BLOCK_CZ)
    tl.store(DW[0] + (split * BLOCK_CZ + offs_o)[:, None] * BLOCK_CH + offs_h[None, :], d_wo)
    tl.store(DW[1] + split * BLOCK_CZ + offs_o, d_bo)
    tl.store(DW[2] + (split * BLOCK_CZ + offs_o)[:, None] * BLOCK_CZ + offs_c[None, :], d_wg)
    tl.store(DW[3] + split * BLOCK_CZ + offs_o, d_bg)


@triton.jit
def tri_bwd_out_kernel(
    X, Z, STATS, dOUT, DZN, R, CZ, CH, eps, LN, CLN, OW, DCLN, N_PROGRAMS,
    BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_CZ: tl.constexpr, BLOCK_CH: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr, ALIGN_Z: tl.constexpr, ALIGN_H: tl.constexpr,
):  # fmt: skip
    """Backward of ``sigmoid(z' W_g^T + b_g) * (LayerNorm(x) W_out^T + b_out)`` to its inputs, over rows
    (pairs) of X [R, C_H], z, dOUT [R, C_Z]: x -> dx in place in X, the gate's dz' -> DZN [R, C_Z] (fp32),
    and the output LayerNorm's weight and bias gradients: program p sums row blocks p, p + N_PROGRAMS, ...
    into row p of DCLN = (dw [P, BCH], db [P, BCH]). Runs after :func:`tri_bwd_out_weights_kernel` (which reads x)."""
    CZ, CH = _aligned(CZ, ALIGN_Z), _aligned(CH, ALIGN_H)
    pid = tl.program_id(0)
    offs_h = tl.arange(0, BLOCK_CH)
    offs_c = tl.arange(0, BLOCK_CZ)
    w_ln = _vec(CLN[0], offs_h, CH)
    d_wln = tl.zeros([BLOCK_CH], tl.float32)
    d_bln = tl.zeros([BLOCK_CH], tl.float32)
    for blk in range(pid, tl.cdiv(R, BLOCK_R), N_PROGRAMS):
        rows, rm, ln, xhat, rstd, zn = _out_inputs(
            X, Z, STATS, LN, CLN, blk, R, CZ, CH, eps, BLOCK_R, BLOCK_CZ, BLOCK_CH
        )
        dln = tl.zeros([BLOCK_R, BLOCK_CH], tl.float32)
        dzn = tl.zeros([BLOCK_R, BLOCK_CZ], tl.float32)
        for o0 in range(0, CZ, BLOCK_O):
            offs_o = o0 + tl.arange(0, BLOCK_O)
            y, g = _out_chunk(ln, zn, OW, offs_o, CZ, CH, DOT_DTYPE, EMULATE, IEEE)
            dy, dg = _out_grads(y, g, dOUT, rows, rm, offs_o, CZ)
            om = offs_o < CZ
            # dln's product last: Triton lays out the warps of these chained products by the last one's
            # tile, along the rows when it is at least as tall as wide. [BR, BCZ] with c_z <= BR would put
            # every warp on the same 16 rows (each holding the whole [BR, BCH] tile: 255 registers at
            # c_z = 16, c_hidden = 64); [BR, BCH] spreads them over the hidden channels.
            dzn += mm(dg, _matrix_rows(OW[2], offs_o, om, offs_c, CZ), DOT_DTYPE, EMULATE, IEEE)  # [BR, BCZ]
            dln += mm(dy, _matrix_rows(OW[0], offs_o, om, offs_h, CH), DOT_DTYPE, EMULATE, IEEE)  # [BR, BCH]
        d_wln += tl.sum(dln * xhat, 0)
        d_bln += tl.sum(dln, 0)
        xm = rm[:, None] & (offs_h < CH)[None, :]
        dxhat = tl.where(xm, dln * w_ln[None, :], 0.0)
        c1 = tl.sum(dxhat * xhat, 1) / CH
        c2 = tl.sum(dxhat, 1) / CH
        dx = (dxhat - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(X + rows[:, None] * CH + offs_h[None, :], dx, mask=xm)
        tl.store(DZN + rows[:, None] * CZ + offs_c[None, :], dzn, mask=rm[:, None] & (offs_c < CZ)[None, :])
    tl.store(DCLN[0] + pid * BLOCK_CH + offs_h, d_wln)
    tl.store(DCLN[1] + pid * BLOCK_CH + offs_h, d_bln)


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
def _pre_grad(
    d, src, role, b, p, q, h0, dims, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """From dL/d(projection) ``d`` [BH, BP, BQ] of one role at pairs (p, q) [BP * BQ]: the gradients of the
    projection's and the gate's pre-activations, [BP * BQ, BH] each."""
    pre, gate = _gated_pre(src, role, b, p, q, h0, dims, BLOCK_H, BLOCK_C, DOT_DTYPE, EMULATE, IEEE)
    d = tl.trans(tl.reshape(d, (BLOCK_H, p.shape[0]))) * _pair_vec(src[4], src[5], b, p, q, dims[0])[:, None]
    s = tl.sigmoid(gate)
    return d * s, d * pre * s * (1.0 - s)


@triton.jit
def _add_partial(P, rows, valid, offs_c, C, d):
    """Add ``d`` [len(rows), BC] into rows ``rows`` (where ``valid``), columns offs_c of the row-major
    [*, C] partial P owned by this program (no other program writes those rows)."""
    ptrs = P + rows[:, None] * C + offs_c[None, :]
    mask = valid[:, None] & (offs_c < C)[None, :]
    tl.store(ptrs, tl.load(ptrs, mask=mask, other=0.0) + d, mask=mask)


@triton.jit
def _add_vec(P, offs, valid, d):
    """Add ``d`` [len(offs)] into P[offs] (where ``valid``), a partial owned by this program."""
    tl.store(P + offs, tl.load(P + offs, mask=valid, other=0.0) + d, mask=valid)


@triton.jit
def _tile_sum(d, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Column sums [BH] of d [BP * BQ, BH] as BLOCK_P sums of BLOCK_Q rows each, then their sum: a
    two-level sum's rounding error grows with BP + BQ, not with BP * BQ (a bias gradient adds every pair)."""
    return tl.sum(tl.sum(tl.reshape(d, (BLOCK_P, BLOCK_Q, d.shape[1])), 1), 0)


@triton.jit
def _row_sum_outer(d, zn, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, DOT_DTYPE: tl.constexpr,
                   EMULATE: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    """``d^T zn`` [BH, BC] for rows d [BP * BQ, BH], zn [BP * BQ, BC], as BLOCK_P products over BLOCK_Q rows
    each, summed (a contraction over BP * BQ rows in one tl.dot would keep all of them per thread in fp32)."""
    d3 = tl.permute(tl.reshape(d, (BLOCK_P, BLOCK_Q, d.shape[1])), (0, 2, 1))
    return tl.sum(mm(d3, tl.reshape(zn, (BLOCK_P, BLOCK_Q, zn.shape[1])), DOT_DTYPE, EMULATE, IEEE), 0)


@triton.jit
def _role_weight_grads(
    DWP, role, h0, CH, zn, offs_c, BCZ, d_pre, d_gate, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_H: tl.constexpr, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Add one role's projection and gate weight gradients at input channels offs_c (zn [R, BC], the
    pre-activation gradients [R, BH] each) into this program's partial DWP [4 C_H, BCZ]."""
    offs_h = h0 + tl.arange(0, BLOCK_H)
    hm = offs_h < CH
    rows = 2 * role * CH + offs_h
    dw = _row_sum_outer(d_pre, zn, BLOCK_P, BLOCK_Q, DOT_DTYPE, EMULATE, IEEE)
    _add_partial(DWP, rows, hm, offs_c, BCZ, dw)
    dw = _row_sum_outer(d_gate, zn, BLOCK_P, BLOCK_Q, DOT_DTYPE, EMULATE, IEEE)
    _add_partial(DWP, rows + CH, hm, offs_c, BCZ, dw)


@triton.jit
def tri_bwd_proj_kernel(
    X, xs, ZC, zcs, MC, mcs, STATS, scs, DZN, dzs, LN, WP, BP, DWP, DBP, N, CZ, CH, N_TILES, N_PROGRAMS,
    BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_CZ: tl.constexpr, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr,
    IEEE: tl.constexpr, ALIGN_Z: tl.constexpr, ALIGN_H: tl.constexpr,
):  # fmt: skip
    """Backward through the contraction and the gated projections. Grid (P persistent programs, channel
    blocks, role); each program loops over pair tiles (p, q) of the contraction view and computes one of::

        dA_pq = sum_j dx_pj B_jq   (role 0),   dB_pq = sum_i dx_ip A_iq   (role 1)

    (the other role's projection recomputed per tile), then goes through its role's gate and projection
    at (p, q), c_z chunk by chunk: dz' is added to DZN atomically (fp32), and fp32 partial gradients of
    WP / BP for its role and channels go to row p of DWP [P, 4 C_H, BCZ] and DBP [P, 4 C_H]."""
    CZ, CH = _aligned(CZ, ALIGN_Z), _aligned(CH, ALIGN_H)
    xs, zcs, dzs = _aligned_strides(xs, ALIGN_H), _aligned_strides(zcs, ALIGN_Z), _aligned_strides(dzs, ALIGN_Z)
    pid = tl.program_id(0)
    h0 = tl.program_id(1) * BLOCK_H
    role = tl.program_id(2)
    offs_h = h0 + tl.arange(0, BLOCK_H)
    hm = offs_h < CH
    src = (ZC, zcs, STATS, scs, MC, mcs, LN, WP, BP)
    dims = (N, CZ, CH)
    dxs = (xs[0], xs[1] + role * (xs[2] - xs[1]), xs[2] + role * (xs[1] - xs[2]), xs[3])  # dx_pj, or dx_jp
    DWP = DWP + pid * 4 * CH * BLOCK_CZ
    DBP = DBP + pid * 4 * CH
    rows = 2 * role * CH + offs_h  # this role's projection rows of WP; its gate's follow C_H rows later
    n_pb = tl.cdiv(N, BLOCK_P)
    n_qb = tl.cdiv(N, BLOCK_Q)
    for t in range(pid, N_TILES, N_PROGRAMS):
        b = (t // (n_pb * n_qb)).to(tl.int64)
        p0 = ((t // n_qb) % n_pb) * BLOCK_P
        q0 = (t % n_qb) * BLOCK_Q
        offs_p = p0 + tl.arange(0, BLOCK_P)
        d = tl.zeros([BLOCK_H, BLOCK_P, BLOCK_Q], tl.float32)
        for j0 in range(0, N, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)
            other = _projection(
                src, 1 - role, b, j0, q0, h0, dims, BLOCK_J, BLOCK_Q, BLOCK_H, BLOCK_C, DOT_DTYPE, EMULATE, IEEE
            )  # the other role's projection at (j, q): [BH, BJ, BQ]
            d += mm(_dx_tile(X, dxs, b, offs_p, offs_j, offs_h, N, CH), other, DOT_DTYPE, EMULATE, IEEE)
        p, q = _tile_rows(p0, q0, BLOCK_P, BLOCK_Q)
        d_pre, d_gate = _pre_grad(d, src, role, b, p, q, h0, dims, BLOCK_H, BLOCK_C, DOT_DTYPE, EMULATE, IEEE)
        _add_vec(DBP, rows, hm, _tile_sum(d_pre, BLOCK_P, BLOCK_Q))
        _add_vec(DBP, rows + CH, hm, _tile_sum(d_gate, BLOCK_P, BLOCK_Q))
        for c0 in range(0, CZ, BLOCK_C):
            offs_c = c0 + tl.arange(0, BLOCK_C)
            dzn = mm(d_pre, _matrix_rows(WP, rows, hm, offs_c, CZ), DOT_DTYPE, EMULATE, IEEE)
            dzn += mm(d_gate, _matrix_rows(WP, rows + CH, hm, offs_c, CZ), DOT_DTYPE, EMULATE, IEEE)  # [R, BC]
            ptrs = _pair_ptrs(DZN, dzs, b, p, q)[:, None] + offs_c[None, :] * dzs[3]
            tl.atomic_add(ptrs, dzn, mask=((p < N) & (q < N))[:, None] & (offs_c < CZ)[None, :])
            zn = _normed(src, b, p, q, offs_c, N, CZ)  # [R, BC]
            _role_weight_grads(DWP, role, h0, CH, zn, offs_c, BLOCK_CZ, d_pre, d_gate, BLOCK_P, BLOCK_Q, BLOCK_H,
                               DOT_DTYPE, EMULATE, IEEE)  # fmt: skip
