r"""Fused triangular multiplicative update (Jumper et al. 2021, Suppl. Alg. 11 outgoing, Alg. 12 incoming).

Same function as :func:`kernels.reference.triangle_multiplication`::

    z' = LayerNorm(z);  A = mask * sigmoid(z' W_ag) * (z' W_a);  B likewise
    x_ij = sum_k A_ik B_jk;  out = sigmoid(z' W_g) * (LayerNorm(x) W_out)

Incoming edges (Alg. 12, ``x_ij = sum_k a_kj b_ki``) are the same contraction on z with its two
residue axes swapped (a stride swap, no copy) and the left/right weights exchanged; the output gate
still reads z at (i, j). The kernels (:mod:`kernels.fused_triangle_kernels`) therefore only know
the outgoing form.

Memory. No ``[*, N, N, c_hidden]`` tensor is saved for backward: every program recomputes the
projections A, B of the (i or j, k) tiles it contracts, from z, with the input LayerNorm applied from
its saved fp32 statistics. Saved for backward: z, the mask (fp32 [*, N, N]), the input LayerNorm
statistics (fp32 [2, *, N, N]) and the weights. The forward holds one transient fp32 buffer of x for
a slab of rows i, ``[*, S, N, c_hidden]`` with S N c_hidden <= :data:`SLAB_ELEMENTS` (64 MiB; at
least one i block of rows): the contraction fills it, the output branch reads it, the next slab
reuses it. The backward holds one fp32 [*, N, N, c_hidden] buffer (x, overwritten in place by dx)
and one fp32 [*, N, N, c_z] buffer (dz'): a third of what the reference saves at AF2's sizes
(c_hidden = c_z).

Cost of not materialising the projections: each (i, k) tile of A is recomputed once per j block and
each B tile once per i block, so the forward does about ``1 + 4 c_z / BLOCK`` times the reference's
FLOPs (BLOCK = BLOCK_I = BLOCK_J; the contraction itself is ``2 N^3 c_hidden``), the backward
about three times the forward.

Launches (:mod:`kernels.fused_triangle_kernels`, :mod:`kernels.fused_triangle_bwd_kernels`): forward
1 + 2 per slab (input LayerNorm statistics; per slab the contraction into x, then the output
LayerNorm, projection and gate). Backward 5: x recomputed whole (the contraction kernel); the output
branch's weight gradients (tiled over output channels); the output branch backward to its inputs (dx
in place, the gate's dz', the output LayerNorm's gradients); the contraction and projection backward
(dA, dB, dz', projection weight partials); the input LayerNorm backward
(:func:`kernels.fused_layer_norm.layer_norm_backward`). Weight gradients are sums of per-program
fp32 partials (deterministic); the projection backward adds its dz' with fp32 atomics (one add per
channel block and role: the summation order varies between runs). No program holds more than a
[BLOCK * BLOCK, BLOCK_H] or [BLOCK_R, c_z] tile: c_z is read in chunks (``launch_configs`` key
``c``), so at AF2's channel sizes, and at the test presets' small ones, the kernels fit the shared
memory and registers of every listed GPU within the spill limits (``scripts/aot_compile.py``,
docs/kernels.md). Channel counts that are not multiples of 16 reach the kernels with their power-of-two
divisors (``ALIGN_Z``, ``ALIGN_H``), so that their loads still vectorise; c_z <= 16 may have its own
launch configuration (``launch_configs.NARROW_C_Z``).

Limits: z ``[*, N, N, c_z]`` fp32, bf16 or fp16 with c_z <= 256, c_hidden <= 256; weights of any
float dtype; mask ``[*, N, N]`` (broadcastable to z's leading dims). Under ``torch.autocast`` the
matmul operands are rounded to the autocast dtype and the output has that dtype (as the reference's
linears under autocast); otherwise to z's dtype. Accumulation is always fp32; fp32 matmuls run in
IEEE fp32 unless ``torch.backends.cuda.matmul.allow_tf32`` is set.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from ._triton_support import interpreter_enabled, is_fake, launch, launch_arch, persistent_programs
from .fused_layer_norm import layer_norm_backward, layer_norm_forward
from .fused_triangle_bwd_kernels import tri_bwd_out_kernel, tri_bwd_out_weights_kernel, tri_bwd_proj_kernel
from .fused_triangle_kernels import tri_fwd_kernel, tri_fwd_out_kernel
from .launch_configs import triangle_config
from .reference import TriangleMultiplicationWeights

__all__ = ["FusedTriangleMultiplicationFunction", "fused_triangle_multiplication", "launch_counts"]

_MAX_C = 256
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TL_DTYPE = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}

#: Kernel launches of one forward (with x in one slab; 2 more per further slab) and one backward.
launch_counts = {"forward": 3, "backward": 5}
#: the most values of the forward's transient fp32 x buffer (one slab of rows i): 2^24, 64 MiB
SLAB_ELEMENTS = 1 << 24


def _pack(w: TriangleMultiplicationWeights, outgoing: bool) -> tuple[Tensor, Tensor]:
    """Projection weights in role order (A, A gate, B, B gate): [4, C_H, C_Z] and [4, C_H], fp32.
    Outgoing: A = left, B = right; incoming: A = right, B = left (see the module docstring)."""
    a, b = ("left", "right") if outgoing else ("right", "left")
    names = (f"{a}_projection", f"{a}_gate", f"{b}_projection", f"{b}_gate")
    wp = torch.stack([getattr(w, f"{n}_weight").float() for n in names]).contiguous()
    bp = torch.stack([getattr(w, f"{n}_bias").float() for n in names]).contiguous()
    return wp, bp


def _unpack(d_wp: Tensor, d_bp: Tensor, outgoing: bool) -> dict:
    a, b = ("left", "right") if outgoing else ("right", "left")
    names = (f"{a}_projection", f"{a}_gate", f"{b}_projection", f"{b}_gate")
    out = {}
    for i, n in enumerate(names):
        out[f"{n}_weight"], out[f"{n}_bias"] = d_wp[i], d_bp[i]
    return out


def _swap(st: tuple) -> tuple:
    """Strides of a [B, N, N, ...] view with its two residue axes exchanged."""
    return (st[0], st[2], st[1]) + tuple(st[3:])


class _Launch:
    """What every kernel of one call shares: sizes, views, packed weights and compile-time options."""

    def __init__(
        self,
        z4: Tensor,
        m3: Tensor,
        stats: Tensor,
        w: TriangleMultiplicationWeights,
        outgoing: bool,
        eps: float,
        dot_dtype: torch.dtype,
    ):
        self.b, self.n, _, self.cz = z4.shape
        self.ch = w.left_projection_weight.shape[0]
        self.eps, self.outgoing = eps, outgoing
        self.interpret = interpreter_enabled()
        # tiles for the architecture the launch targets (kernels.launch_configs)
        self.cfg = triangle_config(launch_arch(z4.device), 32 if dot_dtype == torch.float32 else 16, self.cz)
        self.z4, self.m3, self.stats = z4, m3, stats
        zs, ms, ss = z4.stride(), m3.stride(), stats[0].stride()
        # the contraction view: z for outgoing edges, z with i and k swapped for incoming ones
        self.zcs, self.mcs, self.scs = (zs, ms, ss) if outgoing else (_swap(zs), _swap(ms), _swap(ss))
        self.wp, self.bp = _pack(w, outgoing)
        f32 = {k: v.float().contiguous() for k, v in w._asdict().items()}
        self.w = f32
        self.ln = (f32["layer_norm_input_weight"], f32["layer_norm_input_bias"])
        self.cln = (f32["center_layer_norm_weight"], f32["center_layer_norm_bias"])
        self.ow = tuple(f32[k] for k in ("output_projection_weight", "output_projection_bias"))
        self.ow += (f32["gating_linear_weight"], f32["gating_linear_bias"])
        ieee = dot_dtype == torch.float32 and (self.interpret or not torch.backends.cuda.matmul.allow_tf32)
        self.bcz = max(16, triton.next_power_of_2(self.cz))
        self.bch = max(16, triton.next_power_of_2(self.ch))
        self.block_c = min(self.cfg["c"], self.bcz)  # c_z chunk of the projections and of the output branch
        self.dot = dict(DOT_DTYPE=_TL_DTYPE[dot_dtype], EMULATE=self.interpret, IEEE=ieee)
        # the channel counts' power-of-two divisors (<= 16): every channel-last tensor here is
        # contiguous, so its strides are multiples too (kernels.fused_triangle_kernels, "Alignment")
        self.dot.update(ALIGN_Z=math.gcd(self.cz, 16), ALIGN_H=math.gcd(self.ch, 16))
        self.warps = dict(num_warps=self.cfg["num_warps"], num_stages=self.cfg["num_stages"])

    def slab_rows(self) -> int:
        """Rows i per forward slab: x of a slab, [B, rows, N, C_H] fp32, holds at most
        :data:`SLAB_ELEMENTS` values (at least one i block; the whole of x when it fits)."""
        per_row = self.b * self.n * self.ch
        rows = max(SLAB_ELEMENTS // max(per_row, 1), 1)
        return self.n if rows >= self.n else max(self.cfg["i"], rows // self.cfg["i"] * self.cfg["i"])

    def contract(self, x: Tensor, i0: int, i1: int) -> None:
        """x_ij (fp32) for rows i in [i0, i1) into ``x`` [B, >= i1 - i0, N, C_H] (row i at x[:, i - i0])."""
        cfg = self.cfg
        n_hb = triton.cdiv(self.ch, cfg["h"])
        grid = (triton.cdiv(i1 - i0, cfg["i"]), triton.cdiv(self.n, cfg["j"]), self.b * n_hb)
        args = (self.z4, self.zcs, self.m3, self.mcs, (self.stats[0], self.stats[1]), self.scs, self.ln, self.wp)
        args += (self.bp, x, x.stride(), self.n, self.cz, self.ch, i0, i1, n_hb)
        blocks = dict(BLOCK_I=cfg["i"], BLOCK_J=cfg["j"], BLOCK_K=cfg["k"], BLOCK_H=cfg["h"], BLOCK_C=self.block_c)
        launch(tri_fwd_kernel, grid, *args, **blocks, **self.dot, **self.warps)

    def forward(self, out: Tensor) -> None:
        """``out`` [B, N, N, C_Z]: slab by slab of rows i, the contraction into an fp32 x buffer, then the
        output LayerNorm, projection and gate of the slab's rows."""
        s = self.slab_rows()
        x = torch.empty((self.b, s, self.n, self.ch), dtype=torch.float32, device=out.device)
        blocks = dict(BLOCK_R=self.cfg["rows"], BLOCK_O=self.block_c, BLOCK_CZ=self.bcz, BLOCK_CH=self.bch)
        for i0 in range(0, self.n, s):
            i1 = min(self.n, i0 + s)
            self.contract(x, i0, i1)
            rows = (i1 - i0) * self.n
            mean, rstd = self.stats[0][:, i0:i1], self.stats[1][:, i0:i1]
            bst = (x.stride(0), self.z4.stride(0), mean.stride(0), out.stride(0))
            args = (x, self.z4[:, i0:i1], mean, rstd, out[:, i0:i1], bst, rows, self.cz, self.ch, self.eps)
            grid = (triton.cdiv(rows, self.cfg["rows"]), self.b)
            launch(tri_fwd_out_kernel, grid, *args, self.ln, self.cln, self.ow, **blocks, **self.dot, **self.warps)

    def output_backward(self, x: Tensor, d_out: Tensor, dzn: Tensor) -> dict:
        """dx in place in ``x``, the gate's dz' into ``dzn``; gradients of the output-branch weights."""
        cz, ch, bcz, bch = self.cz, self.ch, self.bcz, self.bch
        rows = self.b * self.n * self.n
        n_rb = triton.cdiv(rows, self.cfg["rows"])
        dev = x.device
        n_split = persistent_programs(dev, n_rb)
        dw = tuple(torch.zeros((n_split,) + s, dtype=torch.float32, device=dev) for s in ((bcz, bch), (bcz,)))
        dw += tuple(torch.zeros((n_split,) + s, dtype=torch.float32, device=dev) for s in ((bcz, bcz), (bcz,)))
        blocks = dict(BLOCK_R=self.cfg["rows"], BLOCK_O=self.block_c, BLOCK_CZ=bcz, BLOCK_CH=bch)
        stats = (self.stats[0], self.stats[1])
        args = (x, self.z4, stats, d_out, rows, cz, ch, self.eps, self.ln, self.cln, self.ow)
        grid = (bcz // self.block_c, n_split)
        launch(tri_bwd_out_weights_kernel, grid, *args, dw, n_split, **blocks, **self.dot, **self.warps)
        n_prog = persistent_programs(dev, n_rb)
        dcln = tuple(torch.zeros((n_prog, bch), dtype=torch.float32, device=dev) for _ in range(2))
        args = (x, self.z4, stats, d_out, dzn, rows, cz, ch, self.eps, self.ln, self.cln, self.ow, dcln, n_prog)
        launch(tri_bwd_out_kernel, (n_prog,), *args, **blocks, **self.dot, **self.warps)
        return {
            "output_projection_weight": dw[0].sum(0)[:cz, :ch],
            "output_projection_bias": dw[1].sum(0)[:cz],
            "gating_linear_weight": dw[2].sum(0)[:cz, :cz],
            "gating_linear_bias": dw[3].sum(0)[:cz],
            "center_layer_norm_weight": dcln[0].sum(0)[:ch],
            "center_layer_norm_bias": dcln[1].sum(0)[:ch],
        }

    def projection_backward(self, dx: Tensor, dzn: Tensor) -> dict:
        """dz' of the projections added into ``dzn``; gradients of the four projection weights and biases."""
        cfg, n = self.cfg, self.n
        n_hb = triton.cdiv(self.ch, cfg["h"])
        n_tiles = self.b * triton.cdiv(n, cfg["i"]) * triton.cdiv(n, cfg["k"])
        n_prog = persistent_programs(dx.device, n_tiles, per_sm=2)
        d_wp = torch.zeros((n_prog, 4, self.ch, self.bcz), dtype=torch.float32, device=dx.device)
        d_bp = torch.zeros((n_prog, 4, self.ch), dtype=torch.float32, device=dx.device)
        dzs = dzn.stride() if self.outgoing else _swap(dzn.stride())
        args = (dx, dx.stride(), self.z4, self.zcs, self.m3, self.mcs)
        args += ((self.stats[0], self.stats[1]), self.scs, dzn, dzs, self.ln, self.wp, self.bp, d_wp, d_bp)
        args += (n, self.cz, self.ch, n_tiles, n_prog)
        blocks = dict(BLOCK_P=cfg["i"], BLOCK_Q=cfg["k"], BLOCK_J=cfg["j"], BLOCK_H=cfg["h"], BLOCK_C=self.block_c)
        blocks.update(BLOCK_CZ=self.bcz)
        launch(tri_bwd_proj_kernel, (n_prog, n_hb, 2), *args, **blocks, **self.dot, **self.warps)
        return _unpack(d_wp.sum(0)[..., : self.cz], d_bp.sum(0), self.outgoing)


def _no_autocast(t: Tensor):
    """The launchers' small torch ops (weight packing, partial sums) run in fp32 whatever the autocast."""
    return torch.autocast(t.device.type, enabled=False)


def _compute_dtype(z: Tensor) -> torch.dtype:
    dev = z.device.type
    if dev in ("cuda", "cpu") and torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return z.dtype


class FusedTriangleMultiplicationFunction(torch.autograd.Function):
    """``apply(z, mask, outgoing, eps, dot_dtype, *weights)`` with the 16 weights of
    :class:`~kernels.reference.TriangleMultiplicationWeights` in order; returns ``[*, N, N, c_z]``."""

    @staticmethod
    def forward(ctx, z: Tensor, mask: Tensor, outgoing: bool, eps: float, dot_dtype: torch.dtype, *weights: Tensor):
        with _no_autocast(z):
            return FusedTriangleMultiplicationFunction._forward(ctx, z, mask, outgoing, eps, dot_dtype, weights)

    @staticmethod
    def _forward(ctx, z, mask, outgoing, eps, dot_dtype, weights):
        lead, n, cz = tuple(z.shape[:-3]), z.shape[-2], z.shape[-1]
        bsz = math.prod(lead)
        z4 = z.reshape(bsz, n, n, cz).contiguous()
        m3 = mask.expand(z.shape[:-1]).reshape(bsz, n, n).to(torch.float32).contiguous()
        _, mean, rstd = layer_norm_forward(z4.view(-1, cz), weights[0], weights[1], eps, store_y=False)
        stats = torch.stack([mean, rstd]).view(2, bsz, n, n)
        w = TriangleMultiplicationWeights(*weights)
        out = torch.empty((bsz, n, n, cz), dtype=dot_dtype, device=z.device)
        if out.numel():
            _Launch(z4, m3, stats, w, outgoing, eps, dot_dtype).forward(out)
        ctx.save_for_backward(z4, m3, stats, *weights)
        ctx.cfg = (outgoing, eps, dot_dtype, z.shape)
        return out.view(lead + (n, n, cz))

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with _no_autocast(d_out):
            return FusedTriangleMultiplicationFunction._backward(ctx, d_out)

    @staticmethod
    def _backward(ctx, d_out: Tensor):
        z4, m3, stats, *weights = ctx.saved_tensors
        outgoing, eps, dot_dtype, z_shape = ctx.cfg
        w = TriangleMultiplicationWeights(*weights)
        bsz, n, _, cz = z4.shape
        ch = w.left_projection_weight.shape[0]
        launch = _Launch(z4, m3, stats, w, outgoing, eps, dot_dtype)
        x = torch.empty((bsz, n, n, ch), dtype=torch.float32, device=z4.device)  # x, then dx in place
        dzn = torch.empty((bsz, n, n, cz), dtype=torch.float32, device=z4.device)  # dL/dz'
        d_out = d_out.reshape(bsz, n, n, cz).contiguous()
        if x.numel():
            launch.contract(x, 0, n)
        grads = launch.output_backward(x, d_out, dzn) if x.numel() else {}
        if x.numel():
            grads.update(launch.projection_backward(x, dzn))
        del x
        dz, d_lnw, d_lnb = layer_norm_backward(
            z4.view(-1, cz), dzn.view(-1, cz), weights[0], stats[0].view(-1), stats[1].view(-1)
        )
        grads.update(layer_norm_input_weight=d_lnw, layer_norm_input_bias=d_lnb)
        d_weights = []
        for i, (name, t) in enumerate(w._asdict().items()):
            g = grads.get(name)
            need = ctx.needs_input_grad[5 + i]
            d_weights.append(None if not need else (torch.zeros_like(t) if g is None else g.to(t.dtype)))
        return (dz.view(z_shape) if ctx.needs_input_grad[0] else None, None, None, None, None, *d_weights)


def _validate(z: Tensor, mask: Tensor, weights: TriangleMultiplicationWeights) -> None:
    if not isinstance(z, Tensor) or z.dim() < 3 or z.shape[-3] != z.shape[-2]:
        raise ValueError(f"fused_triangle_multiplication: z must be [*, N, N, c_z], got {getattr(z, 'shape', z)}")
    if z.dtype not in _DTYPES:
        raise ValueError(f"fused_triangle_multiplication: z has dtype {z.dtype}; supported: fp32, bf16, fp16")
    cz, ch = z.shape[-1], weights.left_projection_weight.shape[0]
    if not (1 <= cz <= _MAX_C and 1 <= ch <= _MAX_C):
        raise ValueError(f"fused_triangle_multiplication: c_z={cz}, c_hidden={ch} outside [1, {_MAX_C}]")
    expected = {
        "layer_norm_input": ((cz,), (cz,)),
        "center_layer_norm": ((ch,), (ch,)),
        "output_projection": ((cz, ch), (cz,)),
        "gating_linear": ((cz, cz), (cz,)),
    }
    expected.update({f"{s}_{k}": ((ch, cz), (ch,)) for s in ("left", "right") for k in ("projection", "gate")})
    for name, (ws, bs) in expected.items():
        for part, shape in (("weight", ws), ("bias", bs)):
            t = getattr(weights, f"{name}_{part}")
            if not isinstance(t, Tensor) or tuple(t.shape) != shape or not t.is_floating_point():
                raise ValueError(
                    f"fused_triangle_multiplication: {name}.{part} must be a float tensor of shape "
                    f"{list(shape)}, got {tuple(getattr(t, 'shape', ()))} {getattr(t, 'dtype', type(t))}"
                )
            if t.device != z.device:
                raise ValueError(f"fused_triangle_multiplication: {name}.{part} is on {t.device}, z on {z.device}")
    try:
        torch.broadcast_shapes(mask.shape, z.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"fused_triangle_multiplication: mask {tuple(mask.shape)} does not broadcast to "
            f"z's [*, N, N] = {tuple(z.shape[:-1])}"
        ) from None
    if z.device.type != "cuda" and not interpreter_enabled() and not is_fake(z):
        raise ValueError(
            f"fused_triangle_multiplication: z is on {z.device}; Triton needs CUDA tensors, or "
            "TRITON_INTERPRET=1 set before importing triton to run in the CPU interpreter"
        )


def fused_triangle_multiplication(
    z: Tensor, mask: Tensor, weights: TriangleMultiplicationWeights, outgoing: bool, eps: float = 1e-5
) -> Tensor:
    """Triton triangle multiplication; same signature and semantics as
    :func:`kernels.reference.triangle_multiplication` (limits in the module docstring).

    Args:
        z: ``[*, N_res, N_res, c_z]``; mask: ``[*, N_res, N_res]``; weights: the 16 parameters;
        outgoing: Alg. 11 (True) or Alg. 12 (False).

    Returns:
        ``[*, N_res, N_res, c_z]`` (z's dtype, or the autocast dtype under autocast). Gradients flow
        to z and every weight; none to the mask.

    Raises:
        ValueError: shapes, dtypes or devices the kernels do not take.
    """
    weights = TriangleMultiplicationWeights(*weights)
    _validate(z, mask, weights)
    return FusedTriangleMultiplicationFunction.apply(
        z, mask.detach(), bool(outgoing), float(eps), _compute_dtype(z), *weights
    )
