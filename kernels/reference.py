"""Plain-PyTorch reference implementations: the executable specification of every kernel.

Each op function here has exactly the signature of its Triton counterpart and is what the kernel tests
compare against. They run anywhere PyTorch runs (CPU included). The triangle multiplication (AF2 Suppl.
Alg. 11/12) is written once, as its steps (:func:`triangle_projection`, :func:`triangle_product`,
:func:`triangle_output`): :func:`triangle_multiplication` composes them, and the model's memory
schedules (row chunks, in-place blocks, device shards) run the same steps on parts of the pair
representation. Where autograd records nothing, the gating computes into the fresh projection
(:func:`sigmoid_gate`); the values are the same bit for bit.
"""

from __future__ import annotations

from typing import Callable, Literal, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

#: the two gated projections of the triangle multiplication (AF2's left / right)
Side = Literal["left", "right"]

#: dtypes whose statistics are computed as they are (no cast)
_FULL = (torch.float32, torch.float64)


def _stat_dtype(x: Tensor) -> torch.dtype:
    """fp32 for half-precision inputs; fp64 stays fp64 (statistics are never computed narrower)."""
    return torch.promote_types(x.dtype, torch.float32)


def broadcasts_into(other: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether a tensor of shape ``other`` broadcasts to ``shape`` without enlarging it (so an
    elementwise op with it can write into a tensor of ``shape`` in place). Written out, not
    ``torch.broadcast_shapes``: it runs for every chunk of the in-place paths, and that call costs
    ~15-25 us on CPU, as much as the op on a small chunk."""
    n = len(other)
    return n <= len(shape) and all(b == 1 or b == s for b, s in zip(other, shape[len(shape) - n :]))


def recording(*tensors: Optional[Tensor]) -> bool:
    """Whether autograd records an op on these tensors (then nothing may be overwritten in place)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def holds(out: Tensor, *others: Optional[Tensor]) -> bool:
    """Whether ``out`` can receive ``out * other`` for each other in place: same result dtype, and
    the others broadcast to its shape (:func:`broadcasts_into`: this runs on every chunk)."""
    return all(
        o is None or (torch.result_type(out, o) == out.dtype and broadcasts_into(o.shape, out.shape)) for o in others
    )


def sigmoid_gate(x: Tensor, gate_logits: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """AF2's sigmoid gating ``x * sigmoid(gate_logits)``, times ``mask[..., None]`` when a mask is
    given (Suppl. Alg. 7 line 5, Alg. 11 lines 3-4 and 9).

    Shapes: x broadcastable to gate_logits ``[*, C]``; mask ``[*]`` (broadcastable to
    ``gate_logits.shape[:-1]``; float or bool). ``gate_logits`` must be a fresh tensor the caller
    does not read again (a linear's output): when autograd records nothing (no-grad inference) and
    the dtypes allow, the result is computed in it (``sigmoid_``, ``mul_``), one tensor where the
    plain formula makes three. The values are the same bit for bit: each product is the same two
    numbers (IEEE multiplication commutes) in the same order. Otherwise the plain formula runs.
    """
    m = None if mask is None else mask[..., None]
    if recording(x, gate_logits, m) or not holds(gate_logits, x, m):
        out = x * torch.sigmoid(gate_logits)
        return out if m is None else out * m
    out = gate_logits.sigmoid_().mul_(x)
    return out if m is None else out.mul_(m)


def add_bias(logits: Tensor, bias: Tensor) -> Tensor:
    """``logits + bias``, added into ``logits`` in place when the sum keeps its shape (``bias``
    broadcasts to ``logits`` without enlarging it, :func:`broadcasts_into`), in ``logits``' dtype (a
    caller that wants a wider bias to promote the sum adds out of place); otherwise ``logits + bias``.
    ``logits`` must be a fresh buffer nothing else reads (an attention core's ``q k^T``: autograd saved
    q and k, not it); the values are those of ``logits + bias`` either way."""
    if broadcasts_into(bias.shape, logits.shape):
        return logits.add_(bias)
    return logits + bias


def attention(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Tensor] = ()) -> Tensor:
    """Multi-head attention core ``softmax(q k^T + sum(biases)) v`` (AF2 Suppl. Alg. 7, 13, 14 core).

    The 1/sqrt(C) scaling is NOT applied here: AF2 (and this project) scales ``q`` before the call.
    Half-precision inputs (bf16): the logits ``q k^T`` are accumulated and kept in fp32, the biases
    added to them in fp32, the softmax and ``probs v`` run in fp32 (autocast off), and only the result
    is rounded, to ``q.dtype``: one rounding where bf16 logits, biases and probabilities would make
    four (the largest per-module error of ``bf16-full``). The fp32 logits are the buffer the softmax
    needs anyway, so this holds no more than the bf16 logits plus their fp32 copy did.

    Args:
        q: queries ``[*, H, Q, C]``.
        k: keys ``[*, H, K, C]``.
        v: values ``[*, H, K, C_v]``.
        biases: up to two additive biases, each broadcastable to ``[*, H, Q, K]`` (typically the key
            mask bias ``[*, 1, 1, K]`` and a pair bias ``[*, H, Q, K]`` shared by the leading rows).

    Returns:
        ``[*, H, Q, C_v]``.

    Raises:
        ValueError: more than two biases, or mismatched head/channel sizes.
    """
    if len(biases) > 2:
        raise ValueError(f"attention takes at most two biases, got {len(biases)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attention shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.dtype not in _FULL:  # half precision: fp32 from the (rounded) operands to the output
        sd = _stat_dtype(q)
        with torch.autocast(q.device.type, enabled=False):
            logits = torch.matmul(q.to(sd), k.to(sd).transpose(-1, -2))  # [*, H, Q, K], fp32
            for b in biases:  # a half bias is widened as it is added (in place where it fits)
                logits = add_bias(logits, b) if torch.result_type(logits, b) == logits.dtype else logits + b
            probs = torch.softmax(logits, dim=-1)
            return torch.matmul(probs, v.to(sd)).to(q.dtype)  # [*, H, Q, C_v]
    logits = torch.matmul(q, k.transpose(-1, -2))  # [*, H, Q, K]
    for b in biases:  # in place only at equal dtypes: a wider bias promotes the sum, as logits + b would
        logits = add_bias(logits, b) if b.dtype == logits.dtype else logits + b
    if logits.dtype not in _FULL:  # the casts cost a call each even when they change nothing
        logits = logits.to(_stat_dtype(logits))
    probs = torch.softmax(logits, dim=-1)  # [*, H, Q, K]
    return torch.matmul(probs if probs.dtype == v.dtype else probs.to(v.dtype), v)  # [*, H, Q, C_v]


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dim, statistics in fp32, output in ``x.dtype``.

    Args:
        x: ``[*, C]``; weight, bias: ``[C]``.
    """
    if x.dtype in _FULL and weight.dtype == x.dtype and bias.dtype == x.dtype:  # no cast to make: one call
        return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    sd = _stat_dtype(x)
    out = F.layer_norm(x.to(sd), x.shape[-1:], weight.to(sd), bias.to(sd), eps)
    return out.to(x.dtype)


#: The submodules of a triangle multiplication, under AF2's names (Suppl. Alg. 11/12; OpenFold uses
#: the same in its AF2 weight import), in the order of :class:`TriangleMultiplicationWeights`.
TRIANGLE_MULTIPLICATION_MODULES = (
    "layer_norm_input",
    "left_projection",
    "right_projection",
    "left_gate",
    "right_gate",
    "center_layer_norm",
    "output_projection",
    "gating_linear",
)


class TriangleMultiplicationWeights(
    NamedTuple(
        "_TriangleMultiplicationWeights",
        [(f"{module}_{part}", Tensor) for module in TRIANGLE_MULTIPLICATION_MODULES for part in ("weight", "bias")],
    )
):
    """The 16 parameters of one triangle multiplication (AF2 Suppl. Alg. 11/12): ``<module>_weight``
    and ``<module>_bias`` for each name of :data:`TRIANGLE_MULTIPLICATION_MODULES`, in that order.
    With ``c`` = c_hidden (128 in AF2) and ``c_z`` the pair channels, in ``torch.nn.Linear`` layout
    ``[c_out, c_in]``: ``layer_norm_input`` [c_z], [c_z]; ``left_projection``, ``right_projection``,
    ``left_gate``, ``right_gate`` [c, c_z], [c]; ``center_layer_norm`` [c], [c]; ``output_projection``
    [c_z, c], [c_z]; ``gating_linear`` [c_z, c_z], [c_z]."""

    __slots__ = ()

    @classmethod
    def from_module(cls, module) -> "TriangleMultiplicationWeights":
        """The parameters of a module holding submodules named as in :data:`TRIANGLE_MULTIPLICATION_MODULES`,
        each with ``weight`` and ``bias`` (e.g. ``alphafold_mem.model.triangle.TriangleMultiplication``)."""
        return cls(
            *(
                getattr(getattr(module, name), part)
                for name in TRIANGLE_MULTIPLICATION_MODULES
                for part in ("weight", "bias")
            )
        )


def triangle_projection(zn: Tensor, mask: Tensor, weights: TriangleMultiplicationWeights, side: Side) -> Tensor:
    """The gated, masked projection a (``side="left"``) or b (``"right"``) of Suppl. Alg. 11/12 lines
    3-4: ``mask * sigmoid(zn W_gate + b_gate) * (zn W + b)``.

    Args:
        zn: the normalised pair representation (line 1), ``[*, I, J, c_z]`` (any rows or columns of it).
        mask: the pair mask at the same positions ``[*, I, J]`` (1 = keep, 0 = padding; float or bool).
        weights: the 16 parameters (:class:`TriangleMultiplicationWeights`).
        side: ``"left"`` or ``"right"``.

    Returns:
        ``[*, I, J, c]``.

    Raises:
        ValueError: another ``side``.
    """
    if side not in ("left", "right"):
        raise ValueError(f"triangle_projection side must be 'left' or 'right', got {side!r}")
    w = weights
    if side == "left":
        proj, gate = (w.left_projection_weight, w.left_projection_bias), (w.left_gate_weight, w.left_gate_bias)
    else:
        proj, gate = (w.right_projection_weight, w.right_projection_bias), (w.right_gate_weight, w.right_gate_bias)
    return sigmoid_gate(F.linear(zn, *proj), F.linear(zn, *gate), mask)


def triangle_product(a: Tensor, b: Tensor, outgoing: bool) -> Tensor:
    """Suppl. Alg. 11/12 line 5, the sum over the third node k: outgoing ``x_ij = sum_k a_ik b_jk``
    (a ``[*, I, K, c]``, b ``[*, J, K, c]``), incoming ``x_ij = sum_k a_kj b_ki`` (a ``[*, K, J, c]``,
    b ``[*, K, I, c]``). Returns ``[*, I, J, c]``."""
    if outgoing:
        return torch.einsum("...ikc,...jkc->...ijc", a, b)
    return torch.einsum("...kjc,...kic->...ijc", a, b)


def triangle_output(x: Tensor, zn: Tensor, weights: TriangleMultiplicationWeights, eps: float = 1e-5) -> Tensor:
    """Suppl. Alg. 11/12 lines 6-7: ``sigmoid(zn W_g + b_g) * (LayerNorm(x) W_out + b_out)``.

    Args:
        x: the product (:func:`triangle_product`) ``[*, I, J, c]``.
        zn: the normalised pair representation at the same positions ``[*, I, J, c_z]``.
        weights: the 16 parameters; eps: the LayerNorm epsilon.

    Returns:
        ``[*, I, J, c_z]``.
    """
    w = weights
    x = layer_norm(x, w.center_layer_norm_weight, w.center_layer_norm_bias, eps)
    x = F.linear(x, w.output_projection_weight, w.output_projection_bias)  # [*, I, J, c_z]
    return sigmoid_gate(x, F.linear(zn, w.gating_linear_weight, w.gating_linear_bias))


#: ``run_step(name, fn, *operands)``: runs ``fn(*operands)`` for one step of
#: :func:`triangle_multiplication` (whole, or in parts of its operands) and returns its result.
StepRunner = Callable[..., object]


def _whole(name: str, fn: Callable[..., object], *operands: Tensor) -> object:
    return fn(*operands)


def triangle_multiplication(
    z: Tensor,
    mask: Tensor,
    weights: TriangleMultiplicationWeights,
    outgoing: bool,
    eps: float = 1e-5,
    run_step: Optional[StepRunner] = None,
    normalise_per_part: bool = False,
) -> Tensor:
    """Triangular multiplicative update (Jumper et al. 2021, Suppl. Alg. 11 outgoing, Alg. 12 incoming)::

        z' = LayerNorm(z)
        a = mask * sigmoid(z' W_left_gate) * (z' W_left),   b = the same with the right weights
        x_ij = sum_k a_ik b_jk   (outgoing)        x_ij = sum_k a_kj b_ki   (incoming)
        out = sigmoid(z' W_gate) * (LayerNorm(x) W_out)

    (every linear with its bias). LayerNorm statistics in fp32, as :func:`layer_norm`. The update is
    returned; the caller adds it to z.

    Args:
        z: pair representation ``[*, N_res, N_res, c_z]``.
        mask: pair mask ``[*, N_res, N_res]`` (1 = keep, 0 = padding; any float or bool dtype).
        weights: the 16 parameters (:class:`TriangleMultiplicationWeights`).
        outgoing: Alg. 11 (True) or Alg. 12 (False).
        eps: LayerNorm epsilon (1e-5 as in AF2).
        run_step: runs the two steps, ``run_step("project", fn, z, mask) -> (a, b)`` and
            ``run_step("outgoing" | "incoming", fn, a, b, z) -> update``, whole (the default) or
            in parts of the operands (the model's row chunks and device shards: its declared steps
            of the same names).
        normalise_per_part: z' is computed by each part of a step from its own rows (no normalised
            copy of the whole of z is kept) instead of once, up front.

    Returns:
        ``[*, N_res, N_res, c_z]``.
    """
    w, run = weights, run_step or _whole

    def norm(x: Tensor) -> Tensor:
        return layer_norm(x, w.layer_norm_input_weight, w.layer_norm_input_bias, eps)

    if not normalise_per_part:
        z, norm = norm(z), (lambda x: x)  # noqa: E731

    def project(zc: Tensor, mc: Tensor) -> tuple[Tensor, Tensor]:
        zn = norm(zc)
        return triangle_projection(zn, mc, w, "left"), triangle_projection(zn, mc, w, "right")

    def output(a: Tensor, b: Tensor, zc: Tensor) -> Tensor:
        return triangle_output(triangle_product(a, b, outgoing), norm(zc), w, eps)

    a, b = run("project", project, z, mask)  # 2 x [*, N_res, N_res, c]
    return run("outgoing" if outgoing else "incoming", output, a, b, z)
