r"""Fused LayerNorm over the last dim (Ba et al. 2016; every LayerNorm of AF2, Suppl. 1.11.x).

Math (per row x of C channels; statistics in fp32 whatever the I/O dtype)::

    mu = mean(x),  rstd = 1 / sqrt(mean((x - mu)^2) + eps),  xhat = (x - mu) * rstd
    y  = xhat * w + b

Forward writes ``y`` (in x.dtype) and the fp32 row statistics ``mean``, ``rstd`` [M]; nothing else.

VJP (dy given; xhat recomputed from x, mean, rstd)::

    g   = dy * w
    dx  = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dw  = sum_rows dy * xhat,   db = sum_rows dy

The backward kernel runs a fixed number of programs, each looping over row blocks and keeping fp32
partial dw/db in registers; the [programs, C] partials are summed by torch (deterministic, no
atomics or locks).

Limits: C <= 384 (one row must fit in one block of <= 512 channels); x fp32, bf16 or fp16; weight
and bias [C] of any float dtype (their gradients are returned in their dtype). The reference is
:func:`kernels.reference.layer_norm`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ._triton_helpers import round_to
from ._triton_support import interpreter_enabled, is_fake, launch, persistent_programs

__all__ = ["FusedLayerNormFunction", "fused_layer_norm", "layer_norm_backward", "layer_norm_forward"]

_MAX_C = 384
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _ln_fwd_kernel(
    X,
    Y,
    W,
    B,
    MEAN,
    RSTD,
    M,
    C,
    eps,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    EMULATE: tl.constexpr,
    STORE_Y: tl.constexpr = True,
):
    """Rows of X [M, C]: mean and rstd [M] (fp32) and, with STORE_Y, Y = LayerNorm(X) * W + B."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    mr = rows < M
    mc = cols < C
    mask = mr[:, None] & mc[None, :]
    offs = rows[:, None] * C + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)  # [BR, BC]
    mean = tl.sum(x, 1) / C
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / C + eps)
    if STORE_Y:
        w = tl.load(W + cols, mask=mc, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=mc, other=0.0).to(tl.float32)
        y = xc * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(Y + offs, round_to(y, Y.dtype.element_ty, EMULATE), mask=mask)
    tl.store(MEAN + rows, mean, mask=mr)
    tl.store(RSTD + rows, rstd, mask=mr)


@triton.jit
def _ln_bwd_kernel(
    X,
    DY,
    DX,
    W,
    MEAN,
    RSTD,
    DW_PART,
    DB_PART,
    M,
    C,
    N_PROGRAMS,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    EMULATE: tl.constexpr,
):
    """DX [M, C] from X, DY and the saved mean/rstd; program p writes its fp32 partial dW, dB sums
    (over the row blocks p, p + N_PROGRAMS, ...) to row p of DW_PART, DB_PART [N_PROGRAMS, BLOCK_C]."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)
    mc = cols < C
    w = tl.load(W + cols, mask=mc, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_C], tl.float32)
    db = tl.zeros([BLOCK_C], tl.float32)
    n_blocks = tl.cdiv(M, BLOCK_R)
    for blk in range(pid, n_blocks, N_PROGRAMS):
        rows = blk * BLOCK_R + tl.arange(0, BLOCK_R)
        mr = rows < M
        mask = mr[:, None] & mc[None, :]
        offs = rows[:, None] * C + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows, mask=mr, other=0.0)
        rstd = tl.load(RSTD + rows, mask=mr, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        c1 = tl.sum(g * xhat, 1) / C
        c2 = tl.sum(g, 1) / C
        dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(DX + offs, round_to(dx, DX.dtype.element_ty, EMULATE), mask=mask)
        dw += tl.sum(dy * xhat, 0)
        db += tl.sum(dy, 0)
    tl.store(DW_PART + pid * BLOCK_C + cols, dw)
    tl.store(DB_PART + pid * BLOCK_C + cols, db)


def _block_config(c: int) -> tuple:
    block_c = triton.next_power_of_2(c)
    block_r = max(1, min(64, 4096 // block_c))
    return block_r, block_c


def _validate(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> None:
    if not isinstance(x, Tensor) or x.dim() < 1:
        raise ValueError("fused_layer_norm: x must be a tensor [*, C]")
    if x.dtype not in _DTYPES:
        raise ValueError(f"fused_layer_norm: x has dtype {x.dtype}; supported: fp32, bf16, fp16")
    c = x.shape[-1]
    if not 1 <= c <= _MAX_C:
        raise ValueError(f"fused_layer_norm: channels C={c} outside [1, {_MAX_C}]")
    for name, t in (("weight", weight), ("bias", bias)):
        if not isinstance(t, Tensor):
            raise ValueError(f"fused_layer_norm: {name} must be a tensor of shape [{c}], got {type(t).__name__}")
        if tuple(t.shape) != (c,) or not t.is_floating_point():
            raise ValueError(
                f"fused_layer_norm: {name} must be a float tensor of shape [{c}], got {tuple(t.shape)} {t.dtype}"
            )
        if t.device != x.device:
            raise ValueError(f"fused_layer_norm: {name} is on {t.device}, x on {x.device}")
    if not eps > 0:
        raise ValueError(f"fused_layer_norm: eps must be > 0, got {eps}")
    if x.device.type != "cuda" and not interpreter_enabled() and not is_fake(x):
        raise ValueError(
            f"fused_layer_norm: x is on {x.device}; Triton needs CUDA tensors, or TRITON_INTERPRET=1 "
            "set before importing triton to run in the CPU interpreter"
        )


def layer_norm_forward(x2: Tensor, weight: Tensor, bias: Tensor, eps: float, store_y: bool = True):
    """One launch over the rows of ``x2`` [M, C]: ``(y or None, mean, rstd)``, statistics fp32 [M].

    With ``store_y=False`` only the statistics are written (the fused triangle multiplication
    normalises its tiles itself). Nothing is launched for fake tensors (memory planning)."""
    m, c = x2.shape
    y = torch.empty_like(x2) if store_y else None
    mean = torch.empty(m, dtype=torch.float32, device=x2.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x2.device)
    block_r, block_c = _block_config(c)
    if m > 0:
        launch(
            _ln_fwd_kernel,
            (triton.cdiv(m, block_r),),
            x2,
            x2 if y is None else y,
            weight,
            bias,
            mean,
            rstd,
            m,
            c,
            eps,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
            EMULATE=interpreter_enabled(),
            STORE_Y=store_y,
            num_warps=4 if block_c <= 256 else 8,
        )
    return y, mean, rstd


def layer_norm_backward(x2: Tensor, dy2: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor):
    """One launch: ``(dx, dw, db)`` for rows ``x2`` [M, C] and their upstream gradient ``dy2`` [M, C]
    (any float dtype; dx in x2's dtype, dw and db fp32 [C], summed from per-program partials)."""
    m, c = x2.shape
    dx = torch.empty_like(x2)
    block_r, block_c = _block_config(c)
    n_prog = persistent_programs(x2.device, triton.cdiv(m, block_r))
    dw_part = torch.zeros((n_prog, block_c), dtype=torch.float32, device=x2.device)
    db_part = torch.zeros((n_prog, block_c), dtype=torch.float32, device=x2.device)
    if m > 0:
        launch(
            _ln_bwd_kernel,
            (n_prog,),
            x2,
            dy2,
            dx,
            weight,
            mean,
            rstd,
            dw_part,
            db_part,
            m,
            c,
            n_prog,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
            EMULATE=interpreter_enabled(),
            num_warps=4 if block_c <= 256 else 8,
        )
    return dx, dw_part[:, :c].sum(0), db_part[:, :c].sum(0)


class FusedLayerNormFunction(torch.autograd.Function):
    """``LayerNorm(x) * weight + bias`` over the last dim, saving only x and fp32 mean/rstd [M]."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # [M, C]; a view when x is contiguous
        y, mean, rstd = layer_norm_forward(x2, weight, bias, eps)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.bias_dtype = bias.dtype
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: Tensor):
        x2, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(x2, dy.reshape(x2.shape).contiguous(), weight, mean, rstd)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        db = db.to(ctx.bias_dtype) if ctx.needs_input_grad[2] else None
        return dx.view(dy.shape), dw, db, None


def fused_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Triton LayerNorm over the last dim; same signature and semantics as
    :func:`kernels.reference.layer_norm`.

    Args:
        x: ``[*, C]`` with C <= 384; weight, bias: ``[C]``.

    Returns:
        ``[*, C]`` in ``x.dtype``.
    """
    _validate(x, weight, bias, eps)
    return FusedLayerNormFunction.apply(x, weight, bias, float(eps))
