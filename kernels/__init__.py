"""Kernel dispatch: the one place that chooses between the Triton kernels and their references.

Entry points (stable):

* ``kernels.attention(q, k, v, biases, impl="reference" | "triton")``
* ``kernels.layer_norm(x, weight, bias, eps=1e-5, impl=...)``

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

IMPLS = ("reference", "triton")

__all__ = ["IMPLS", "KernelUnavailableError", "attention", "layer_norm"]


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
    _triton_support.require_triton("attention")
    from .fused_attention import fused_attention  # imports triton lazily

    return fused_attention(q, k, v, biases)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5, impl: str = "reference") -> Tensor:
    """LayerNorm over the last dim with fp32 statistics, as in :func:`kernels.reference.layer_norm`."""
    _check_impl(impl)
    if impl == "reference":
        return reference.layer_norm(x, weight, bias, eps)
    _triton_support.require_triton("layer_norm")
    from .fused_layer_norm import fused_layer_norm

    return fused_layer_norm(x, weight, bias, eps)
