"""Kernel dispatch: the one place that chooses between the Triton kernels and their references.

Entry points (stable):

* ``kernels.attention(q, k, v, biases, impl="reference" | "triton")``
* ``kernels.layer_norm(x, weight, bias, eps=1e-5, impl=...)``
* ``kernels.triangle_multiplication(z, mask, weights, outgoing, eps=1e-5, impl=...)`` with
  ``weights`` a :class:`TriangleMultiplicationWeights` (AF2's 16 parameters, or
  ``TriangleMultiplicationWeights.from_module(module)``)

Triton files are named ``fused_*.py`` so that importing them never shadows these entry points.
``import kernels`` works without a GPU and without Triton. Requesting ``impl="triton"`` where Triton
cannot run raises :class:`KernelUnavailableError`; there is no silent fallback. On CPU the Triton
kernels run in Triton's interpreter when ``TRITON_INTERPRET=1`` is set before anything imports
triton (tests only; it is slow).
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from . import _triton_support, reference
from ._triton_support import KernelUnavailableError
from .reference import TriangleMultiplicationWeights

IMPLS = ("reference", "triton")

__all__ = [
    "IMPLS",
    "KernelUnavailableError",
    "TriangleMultiplicationWeights",
    "attention",
    "layer_norm",
    "triangle_multiplication",
]


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown kernel impl '{impl}'; valid: {', '.join(IMPLS)}")


def attention(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Tensor] = (), impl: str = "reference") -> Tensor:
    """``softmax(q k^T + sum(biases)) v`` with shapes as in :func:`kernels.reference.attention`.

    ``impl="triton"`` runs :func:`kernels.fused_attention.fused_attention` (never stores the
    ``[*, H, Q, K]`` probabilities; limits in that module's docstring).
    """
    _check_impl(impl)
    if impl == "reference":
        return reference.attention(q, k, v, biases)
    _triton_support.require_triton("attention", q)
    from .fused_attention import fused_attention  # imports triton lazily

    return fused_attention(q, k, v, biases)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5, impl: str = "reference") -> Tensor:
    """LayerNorm over the last dim with fp32 statistics, as in :func:`kernels.reference.layer_norm`."""
    _check_impl(impl)
    if impl == "reference":
        return reference.layer_norm(x, weight, bias, eps)
    _triton_support.require_triton("layer_norm", x)
    from .fused_layer_norm import fused_layer_norm

    return fused_layer_norm(x, weight, bias, eps)


def triangle_multiplication(
    z: Tensor,
    mask: Tensor,
    weights: TriangleMultiplicationWeights,
    outgoing: bool,
    eps: float = 1e-5,
    impl: str = "reference",
) -> Tensor:
    """Triangle multiplicative update (AF2 Alg. 11 ``outgoing=True``, Alg. 12 ``outgoing=False``) with
    shapes as in :func:`kernels.reference.triangle_multiplication`: z ``[*, N_res, N_res, c_z]``,
    mask ``[*, N_res, N_res]``; returns the update ``[*, N_res, N_res, c_z]``.

    ``impl="triton"`` runs :func:`kernels.fused_triangle.fused_triangle_multiplication` (no
    ``[*, N_res, N_res, c_hidden]`` projection materialised or saved; limits in that module's docstring).
    """
    _check_impl(impl)
    if impl == "reference":
        return reference.triangle_multiplication(z, mask, weights, outgoing, eps)
    _triton_support.require_triton("triangle_multiplication", z)
    from .fused_triangle import fused_triangle_multiplication

    return fused_triangle_multiplication(z, mask, weights, outgoing, eps)
