"""Kernel dispatch: the one place that chooses between the Triton kernels and their references.

Entry points (stable):

* ``kernels.attention(q, k, v, biases, impl="reference" | "triton")``
* ``kernels.layer_norm(x, weight, bias, eps=1e-5, impl=...)``

Triton files are named ``fused_*.py`` so that importing them never shadows these entry points.
``import kernels`` works without a GPU and without Triton. Requesting ``impl="triton"`` where Triton
cannot run raises :class:`KernelUnavailableError`; there is no silent fallback.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from . import reference

IMPLS = ("reference", "triton")


class KernelUnavailableError(RuntimeError):
    """A requested kernel implementation cannot run here (no Triton, no GPU and no interpreter)."""


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown kernel impl '{impl}'; valid: {', '.join(IMPLS)}")


def attention(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Tensor] = (), impl: str = "reference") -> Tensor:
    """``softmax(q k^T + sum(biases)) v`` with shapes as in :func:`kernels.reference.attention`."""
    _check_impl(impl)
    if impl == "reference":
        return reference.attention(q, k, v, biases)
    from .fused_attention import fused_attention  # imports triton lazily; raises if it cannot run
    return fused_attention(q, k, v, biases)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5, impl: str = "reference") -> Tensor:
    """LayerNorm over the last dim with fp32 statistics, as in :func:`kernels.reference.layer_norm`."""
    _check_impl(impl)
    if impl == "reference":
        return reference.layer_norm(x, weight, bias, eps)
    from .fused_layer_norm import fused_layer_norm
    return fused_layer_norm(x, weight, bias, eps)
