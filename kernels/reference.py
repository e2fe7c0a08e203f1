"""Plain-PyTorch reference implementations: the executable specification of every kernel.

Each function here has exactly the signature of its Triton counterpart and is what the kernel tests
compare against. They run anywhere PyTorch runs (CPU included).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

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
    The softmax runs in fp32 whatever the input dtype; the result is cast back to ``q.dtype``.

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


def triangle_multiplication(
    z: Tensor, mask: Tensor, weights: TriangleMultiplicationWeights, outgoing: bool, eps: float = 1e-5
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

    Returns:
        ``[*, N_res, N_res, c_z]``.
    """
    w = weights
    zn = layer_norm(z, w.layer_norm_input_weight, w.layer_norm_input_bias, eps)  # [*, N, N, c_z]
    m = mask[..., None].to(zn.dtype) if mask.dtype == torch.bool else mask[..., None]
    a = (
        F.linear(zn, w.left_projection_weight, w.left_projection_bias)
        * torch.sigmoid(F.linear(zn, w.left_gate_weight, w.left_gate_bias))
        * m
    )  # [*, N, N, c]
    b = (
        F.linear(zn, w.right_projection_weight, w.right_projection_bias)
        * torch.sigmoid(F.linear(zn, w.right_gate_weight, w.right_gate_bias))
        * m
    )  # [*, N, N, c]
    if outgoing:
        x = torch.einsum("...ikc,...jkc->...ijc", a, b)
    else:
        x = torch.einsum("...kjc,...kic->...ijc", a, b)
    x = layer_norm(x, w.center_layer_norm_weight, w.center_layer_norm_bias, eps)
    x = F.linear(x, w.output_projection_weight, w.output_projection_bias)  # [*, N, N, c_z]
    return x * torch.sigmoid(F.linear(zn, w.gating_linear_weight, w.gating_linear_bias))
