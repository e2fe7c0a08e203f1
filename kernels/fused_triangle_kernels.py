r"""``@triton.jit`` forward kernels of :mod:`kernels.fused_triangle` and the helpers its backward kernels
(:mod:`kernels.fused_triangle_bwd_kernels`) share; math, launches and limits are in :mod:`kernels.fused_triangle`.

Conventions. Every kernel sees the contraction in its outgoing form ``x_ij = sum_k A_ik B_jk``: the
launcher passes the "contraction view" of z (z itself for Alg. 11, z with its two residue axes
swapped, through strides, for Alg. 12) and the projection weights in role order (A projection, A
gate, B projection, B gate) as one ``[4, C_H, C_Z]`` tensor WP with biases BP ``[4, C_H]``. A
[B, N, N] tensor (mask, LayerNorm statistics) comes with its strides ``(s_b, s_p, s_q)``, a
[B, N, N, C] tensor with ``(s_b, s_p, s_q, s_c)``; STATS is the pair (mean pointer, rstd pointer)
of the input LayerNorm, LN its (weight, bias) and CLN the output ("center") LayerNorm's. ``src`` is
the tuple ``(ZC, zcs, STATS, scs, MC, mcs, LN, WP, BP)`` of everything a projection reads. Every
linear weight is in ``torch.nn.Linear`` layout ``[c_out, c_in]`` and contiguous. All arithmetic is
fp32; matmul operands are rounded to DOT_DTYPE (see :mod:`kernels._triton_helpers`).

Alignment. ALIGN_Z and ALIGN_H are the largest powers of two, at most 16, that divide c_z and c_hidden;
the launcher's tensors are contiguous and channel-last, so every stride of a tensor with c_z (c_hidden)
channels is a multiple of ALIGN_Z (ALIGN_H). Triton specialises an integer argument only on
divisibility by 16, so without this a channel count such as 8 leaves every row of a load unaligned as
far as the compiler knows: one masked scalar load and one 64-bit address per element instead of
vector loads, which spills registers. :func:`_aligned` makes the smaller divisor visible.

Tile sizes bound what a program holds: the projections read c_z in chunks of BLOCK_C (never a whole
``[BLOCK * BLOCK, c_z]`` tile), and the output branch works on BLOCK_O output channels at a time.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_helpers import mm, round_to

__all__ = ["tri_fwd_kernel", "tri_fwd_out_kernel"]


@triton.jit
def _aligned(x, ALIGN: tl.constexpr):
    """``x`` (a channel count or a stride, a multiple of ALIGN) as a value the compiler knows to be a
    multiple of ALIGN: ``x // ALIGN * ALIGN``, the identity here. At 16 Triton's specialisation of the
    argument already says so (and the value is returned as it is)."""
    if ALIGN < 16:
        x = x // ALIGN * ALIGN
    return x


@triton.jit
def _aligned_strides(st, ALIGN: tl.constexpr):
    """The strides (s_b, s_p, s_q, s_c) of a contiguous channel-last tensor, the first three multiples of ALIGN."""
    return (_aligned(st[0], ALIGN), _aligned(st[1], ALIGN), _aligned(st[2], ALIGN), st[3])


@triton.jit
def _tile_rows(p0, q0, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr):
    """The pairs (p, q) of the tile at (p0, q0) in row order r = (p - p0) * BQ + (q - q0): [BP * BQ] each,
    64-bit (N^2 C can exceed 2^31)."""
    r = tl.arange(0, BLOCK_P * BLOCK_Q)
    return (p0 + r // BLOCK_Q).to(tl.int64), (q0 + r % BLOCK_Q).to(tl.int64)


@triton.jit
def _pair_ptrs(P, st, b, p, q):
    """Pointers [R] to pairs (p, q) of batch b of a [B, N, N, ...] tensor with strides ``st``."""
    return P + b * st[0] + p * st[1] + q * st[2]


@triton.jit
def _pair_vec(P, st, b, p, q, N):
    """fp32 [R] of a [B, N, N] tensor at pairs (p, q); 0 outside."""
    return tl.load(_pair_ptrs(P, st, b, p, q), mask=(p < N) & (q < N), other=0.0).to(tl.float32)


@triton.jit
def _vec(V, offs, N):
    return tl.load(V + offs, mask=offs < N, other=0.0).to(tl.float32)


@triton.jit
def _rows(P, rows, rm, offs_c, C):
    """fp32 [BR, BC] at ``rows`` (mask ``rm``) and channels offs_c of a row-major [R, C] tensor; 0 outside."""
    mask = rm[:, None] & (offs_c < C)[None, :]
    return tl.load(P + rows[:, None] * C + offs_c[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _weight_t(W, offs_out, N_OUT, offs_in, N_IN):
    """fp32 [len(offs_in), len(offs_out)]: rows ``offs_out`` of a row-major [N_OUT, N_IN] weight, transposed."""
    mask = (offs_in < N_IN)[:, None] & (offs_out < N_OUT)[None, :]
    return tl.load(W + offs_out[None, :] * N_IN + offs_in[:, None], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _matrix_rows(W, rows, valid, offs_c, C):
    """fp32 [len(rows), BC]: rows ``rows`` (where ``valid``) of a row-major [*, C] matrix at columns offs_c."""
    mask = valid[:, None] & (offs_c < C)[None, :]
    return tl.load(W + rows[:, None] * C + offs_c[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _normed(src, b, p, q, offs_c, N, CZ):
    """LayerNorm(z) at pairs (p, q) [R] and channels offs_c: [R, BC] (fp32; 0 on padding)."""
    Z, zs, STATS, ss, LN = src[0], src[1], src[2], src[3], src[6]
    valid = ((p < N) & (q < N))[:, None] & (offs_c < CZ)[None, :]
    ptrs = _pair_ptrs(Z, zs, b, p, q)[:, None] + offs_c.to(tl.int64)[None, :] * zs[3]
    z = tl.load(ptrs, mask=valid, other=0.0).to(tl.float32)
    mean = _pair_vec(STATS[0], ss, b, p, q, N)
    rstd = _pair_vec(STATS[1], ss, b, p, q, N)
    zn = (z - mean[:, None]) * rstd[:, None] * _vec(LN[0], offs_c, CZ)[None, :] + _vec(LN[1], offs_c, CZ)[None, :]
    return tl.where(valid, zn, 0.0)


@triton.jit
def _gated_pre(
    src, role, b, p, q, h0, dims, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Pre-activations of the projection and of its gate, [R, BH] each, of role 0 (A) or 1 (B) at pairs
    (p, q) [R] and channels h0 + [0, BH) (dims = (N, C_Z, C_H)); c_z is read in chunks of BLOCK_C."""
    N, CZ, CH = dims[0], dims[1], dims[2]
    offs_h = h0 + tl.arange(0, BLOCK_H)
    hm = offs_h < CH
    rows = 2 * role * CH + offs_h  # WP rows of the projection; the gate's follow C_H rows later
    pre = tl.zeros([p.shape[0], BLOCK_H], tl.float32)
    gate = tl.zeros([p.shape[0], BLOCK_H], tl.float32)
    for c0 in range(0, CZ, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        zn = _normed(src, b, p, q, offs_c, N, CZ)
        pre += mm(zn, tl.trans(_matrix_rows(src[7], rows, hm, offs_c, CZ)), DOT_DTYPE, EMULATE, IEEE)
        gate += mm(zn, tl.trans(_matrix_rows(src[7], rows + CH, hm, offs_c, CZ)), DOT_DTYPE, EMULATE, IEEE)
    pre += tl.load(src[8] + rows, mask=hm, other=0.0)[None, :]
    gate += tl.load(src[8] + rows + CH, mask=hm, other=0.0)[None, :]
    return pre, gate


@triton.jit
def _projection(
    src, role, b, p0, q0, h0, dims, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """The gated, masked projection of one role on the tile of pairs at (p0, q0), channels h0 + [0, BH):
    [BH, BP, BQ], recomputed from z (never read from memory)."""
    p, q = _tile_rows(p0, q0, BLOCK_P, BLOCK_Q)
    pre, gate = _gated_pre(src, role, b, p, q, h0, dims, BLOCK_H, BLOCK_C, DOT_DTYPE, EMULATE, IEEE)
    out = pre * tl.sigmoid(gate) * _pair_vec(src[4], src[5], b, p, q, dims[0])[:, None]
    return tl.reshape(tl.trans(out), (BLOCK_H, BLOCK_P, BLOCK_Q))


@triton.jit
def tri_fwd_kernel(
    ZC, zcs, MC, mcs, STATS, scs, LN, WP, BP, X, xs, N, CZ, CH, I0, I1, N_HB,
    BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr,
    ALIGN_Z: tl.constexpr, ALIGN_H: tl.constexpr,
):  # fmt: skip
    """The contraction x_ij = sum_k A_ik B_jk (fp32) for rows i in [I0, I1), written to X[b, i - I0, j, h]
    (X [B, >= I1 - I0, N, C_H]). Grid (i blocks of the rows, j blocks, B * N_HB channel blocks of BLOCK_H);
    A and B are recomputed per (i or j, k) tile from z."""
    CZ, CH = _aligned(CZ, ALIGN_Z), _aligned(CH, ALIGN_H)
    zcs, xs = _aligned_strides(zcs, ALIGN_Z), _aligned_strides(xs, ALIGN_H)
    i0 = I0 + tl.program_id(0) * BLOCK_I
    j0 = tl.program_id(1) * BLOCK_J
    b = (tl.program_id(2) // N_HB).to(tl.int64)
    h0 = (tl.program_id(2) % N_HB) * BLOCK_H
    src = (ZC, zcs, STATS, scs, MC, mcs, LN, WP, BP)
    dims = (N, CZ, CH)
    x = tl.zeros([BLOCK_H, BLOCK_I, BLOCK_J], tl.float32)
    for k0 in range(0, N, BLOCK_K):
        a = _projection(src, 0, b, i0, k0, h0, dims, BLOCK_I, BLOCK_K, BLOCK_H, BLOCK_C, DOT_DTYPE, EMULATE, IEEE)
        bt = _projection(src, 1, b, j0, k0, h0, dims, BLOCK_J, BLOCK_K, BLOCK_H, BLOCK_C, DOT_DTYPE, EMULATE, IEEE)
        x += mm(a, tl.permute(bt, (0, 2, 1)), DOT_DTYPE, EMULATE, IEEE)  # [BH, BI, BJ]
    i, j = _tile_rows(i0, j0, BLOCK_I, BLOCK_J)
    offs_h = h0 + tl.arange(0, BLOCK_H)
    ptrs = _pair_ptrs(X, xs, b, i - I0, j)[:, None] + offs_h[None, :] * xs[3]
    mask = ((i < I1) & (j < N))[:, None] & (offs_h < CH)[None, :]
    tl.store(ptrs, tl.trans(tl.reshape(x, (BLOCK_H, BLOCK_I * BLOCK_J))), mask=mask)


@triton.jit
def _out_inputs(
    X, Z, STATS, LN, CLN, blk, R, CZ, CH, eps, BLOCK_R: tl.constexpr, BLOCK_CZ: tl.constexpr, BLOCK_CH: tl.constexpr
):  # fmt: skip
    """The output branch's inputs at row block ``blk`` of X [R, C_H] (x, fp32) and z [R, C_Z]: the rows
    (64-bit) and their mask, LayerNorm(x) [BR, BCH] with x-hat and 1/std, and z' = LayerNorm(z) [BR, BCZ]
    from its saved statistics STATS = (mean, rstd) [R]."""
    rows = (blk * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    rm = rows < R
    offs_h = tl.arange(0, BLOCK_CH)
    offs_c = tl.arange(0, BLOCK_CZ)
    xm = rm[:, None] & (offs_h < CH)[None, :]
    x = _rows(X, rows, rm, offs_h, CH)
    xc = tl.where(xm, x - (tl.sum(x, 1) / CH)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / CH + eps)
    xhat = xc * rstd[:, None]
    ln = tl.where(xm, xhat * _vec(CLN[0], offs_h, CH)[None, :] + _vec(CLN[1], offs_h, CH)[None, :], 0.0)
    z_mean = tl.load(STATS[0] + rows, mask=rm, other=0.0)
    z_rstd = tl.load(STATS[1] + rows, mask=rm, other=0.0)
    zn = (_rows(Z, rows, rm, offs_c, CZ) - z_mean[:, None]) * z_rstd[:, None]
    zn = zn * _vec(LN[0], offs_c, CZ)[None, :] + _vec(LN[1], offs_c, CZ)[None, :]
    return rows, rm, ln, xhat, rstd, tl.where(rm[:, None] & (offs_c < CZ)[None, :], zn, 0.0)


@triton.jit
def _out_chunk(
    ln, zn, OW, offs_o, CZ, CH, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr
):  # fmt: skip
    """``y = LayerNorm(x) W_out^T + b_out`` and the gate ``sigmoid(z' W_g^T + b_g)`` at output channels
    offs_o, [BR, BO] each; OW = (W_out, b_out, W_g, b_g)."""
    offs_h = tl.arange(0, ln.shape[1])
    offs_c = tl.arange(0, zn.shape[1])
    y = mm(ln, _weight_t(OW[0], offs_o, CZ, offs_h, CH), DOT_DTYPE, EMULATE, IEEE) + _vec(OW[1], offs_o, CZ)[None, :]
    g = mm(zn, _weight_t(OW[2], offs_o, CZ, offs_c, CZ), DOT_DTYPE, EMULATE, IEEE) + _vec(OW[3], offs_o, CZ)[None, :]
    return y, tl.sigmoid(g)


@triton.jit
def tri_fwd_out_kernel(
    X, Z, MEAN, RSTD, OUT, bst, R, CZ, CH, eps, LN, CLN, OW,
    BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_CZ: tl.constexpr, BLOCK_CH: tl.constexpr,
    DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr, ALIGN_Z: tl.constexpr, ALIGN_H: tl.constexpr,
):  # fmt: skip
    """``out = sigmoid(z' W_g^T + b_g) * (LayerNorm(x) W_out^T + b_out)`` over R rows (pairs) per batch
    element: X [R, C_H] (fp32), z, OUT [R, C_Z] and the statistics MEAN, RSTD [R] start at
    ``bst = (s_x, s_z, s_stats, s_out)`` elements per batch element. Grid (row blocks, B)."""
    CZ, CH = _aligned(CZ, ALIGN_Z), _aligned(CH, ALIGN_H)
    bst = (_aligned(bst[0], ALIGN_H), _aligned(bst[1], ALIGN_Z), bst[2], _aligned(bst[3], ALIGN_Z))
    b = tl.program_id(1).to(tl.int64)
    stats = (MEAN + b * bst[2], RSTD + b * bst[2])
    rows, rm, ln, _, _, zn = _out_inputs(
        X + b * bst[0], Z + b * bst[1], stats, LN, CLN, tl.program_id(0), R, CZ, CH, eps, BLOCK_R, BLOCK_CZ, BLOCK_CH
    )
    OUT = OUT + b * bst[3]
    for o0 in range(0, CZ, BLOCK_O):
        offs_o = o0 + tl.arange(0, BLOCK_O)
        y, g = _out_chunk(ln, zn, OW, offs_o, CZ, CH, DOT_DTYPE, EMULATE, IEEE)
        om = rm[:, None] & (offs_o < CZ)[None, :]
        tl.store(OUT + rows[:, None] * CZ + offs_o[None, :], round_to(y * g, OUT.dtype.element_ty, EMULATE), mask=om)
