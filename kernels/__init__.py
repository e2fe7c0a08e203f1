"""Kernel dispatch: the one place that maps an implementation name to code, for every op that has
more than one implementation.

Entry points (stable), with the implementations each accepts (:data:`IMPLS`):

* ``attention(q, k, v, biases, impl, chunks=(1024, 4096), first_chunks_only=False)``: ``"reference"``
  (:func:`.reference.attention`), ``"chunked"`` (low-memory attention, Rabe & Staats:
  :func:`.low_memory_attention.low_memory_attention` with ``chunks = (q_chunk, kv_chunk)``) or
  ``"triton"`` (:func:`.fused_attention.fused_attention`);
* ``layer_norm(x, weight, bias, eps=1e-5, impl)``: ``"reference"`` or ``"triton"``;
* ``triangle_multiplication(z, mask, weights, outgoing, eps=1e-5, impl, run_step=None,
  normalise_per_part=False)``: ``"reference"`` (AF2 Alg. 11/12, written once in :mod:`.reference` as
  steps that a caller may run in parts: ``run_step``) or ``"triton"`` (the fused kernel, which
  materialises no projection, so it has no parts to run). ``weights`` is a
  :class:`TriangleMultiplicationWeights` (AF2's 16 parameters, or
  ``TriangleMultiplicationWeights.from_module(module)``); the steps themselves,
  :func:`triangle_projection`, :func:`triangle_product` and :func:`triangle_output`, are exported
  for the model's in-place and device-sharded schedules.

Contract with the model (attributes bound from the memory policy, read by the modules and passed here
as ``impl``): ``Attention.attention_impl`` in ``IMPLS["attention"]`` with ``attention_chunks``;
``LayerNorm.kernel_impl`` and ``TriangleMultiplication.kernel_impl`` in ``IMPLS["layer_norm"]`` /
``IMPLS["triangle_multiplication"]``.

Nothing here imports the rest of ``alphafold_mem`` (the bottom layer). Triton files are named
``fused_*.py`` so that importing them never shadows these entry points. Importing this package works
without a GPU and without Triton. An unknown ``impl`` raises ``ValueError``; ``impl="triton"`` where
Triton cannot run raises :class:`KernelUnavailableError`; there is no silent fallback. On CPU the
Triton kernels run in Triton's interpreter when ``TRITON_INTERPRET=1`` is set before anything imports
triton (tests only; it is slow).
"""

from __future__ import annotations

if __name__ != "alphafold_mem.kernels":  # the repository root is on sys.path and this folder was found first
    raise ImportError(
        f"{__file__} is alphafold_mem's kernels folder, found as the top-level '{__name__}' because the "
        "repository root is on sys.path (python -c / python -m run from the checkout): import it as "
        "alphafold_mem.kernels; for the public index's 'kernels' package, run from another directory or with python -P"
    )

from typing import Optional, Sequence  # noqa: E402

from torch import Tensor  # noqa: E402

from . import _triton_support, reference  # noqa: E402
from ._triton_support import KernelUnavailableError  # noqa: E402
from .low_memory_attention import low_memory_attention  # noqa: E402
from .reference import (  # noqa: E402
    StepRunner,
    TriangleMultiplicationWeights,
    triangle_output,
    triangle_product,
    triangle_projection,
)

#: op -> the implementation names it accepts
IMPLS: dict[str, tuple[str, ...]] = {
    "attention": ("reference", "chunked", "triton"),
    "layer_norm": ("reference", "triton"),
    "triangle_multiplication": ("reference", "triton"),
}

__all__ = [
    "IMPLS",
    "KernelUnavailableError",
    "StepRunner",
    "TriangleMultiplicationWeights",
    "attention",
    "layer_norm",
    "triangle_multiplication",
    "triangle_output",
    "triangle_product",
    "triangle_projection",
]


def _check_impl(op: str, impl: str) -> None:
    if impl not in IMPLS[op]:
        raise ValueError(f"unknown {op} impl '{impl}'; valid: {', '.join(IMPLS[op])}")


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    biases: Sequence[Tensor] = (),
    impl: str = "reference",
    chunks: tuple[int, int] = (1024, 4096),
    first_chunks_only: bool = False,
) -> Tensor:
    """``softmax(q k^T + sum(biases)) v`` (AF2 Alg. 7, 13, 14 core) with shapes as in
    :func:`.reference.attention`: q ``[*, H, Q, C]`` (already scaled), k ``[*, H, K, C]``,
    v ``[*, H, K, C_v]``, at most two biases broadcastable to ``[*, H, Q, K]``; returns ``[*, H, Q, C_v]``.

    ``impl="chunked"`` never stores the ``[*, H, Q, K]`` probabilities: queries and keys in chunks of
    ``chunks = (q_chunk, kv_chunk)``, probabilities recomputed in backward; ``first_chunks_only`` (the
    memory estimator's loop cut) runs only its first two query and key chunks. ``impl="triton"`` runs
    :func:`.fused_attention.fused_attention` (flash-style; limits in that module's docstring). The
    reference ignores ``chunks`` and ``first_chunks_only`` (it has no loop), as does the fused kernel.

    Raises:
        ValueError: unknown ``impl``, or bad shapes / chunks.
        KernelUnavailableError: ``impl="triton"`` where Triton cannot run.
    """
    _check_impl("attention", impl)
    if impl == "reference":
        return reference.attention(q, k, v, biases)
    if impl == "chunked":
        return low_memory_attention(q, k, v, biases, *chunks, first_chunks_only=first_chunks_only)
    _triton_support.require_triton("attention", q)
    from .fused_attention import fused_attention  # imports triton lazily

    return fused_attention(q, k, v, biases)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5, impl: str = "reference") -> Tensor:
    """LayerNorm over the last dim with fp32 statistics, as in :func:`.reference.layer_norm`: x ``[*, C]``,
    weight and bias ``[C]``; returns ``[*, C]`` in ``x.dtype``.

    Raises:
        ValueError: unknown ``impl``.
        KernelUnavailableError: ``impl="triton"`` where Triton cannot run.
    """
    _check_impl("layer_norm", impl)
    if impl == "reference":
        return reference.layer_norm(x, weight, bias, eps)
    _triton_support.require_triton("layer_norm", x)
    from .fused_layer_norm import fused_layer_norm  # imports triton lazily

    return fused_layer_norm(x, weight, bias, eps)


def triangle_multiplication(
    z: Tensor,
    mask: Tensor,
    weights: TriangleMultiplicationWeights,
    outgoing: bool,
    eps: float = 1e-5,
    impl: str = "reference",
    run_step: Optional[StepRunner] = None,
    normalise_per_part: bool = False,
) -> Tensor:
    """Triangle multiplicative update (AF2 Alg. 11 ``outgoing=True``, Alg. 12 ``outgoing=False``) with
    shapes as in :func:`.reference.triangle_multiplication`: z ``[*, N_res, N_res, c_z]``,
    mask ``[*, N_res, N_res]``; returns the update ``[*, N_res, N_res, c_z]``.

    ``impl="reference"`` runs the reference's steps, through ``run_step`` when given (the model's
    row chunks and device shards), with ``normalise_per_part`` as there. ``impl="triton"`` runs
    :func:`.fused_triangle.fused_triangle_multiplication` (no ``[*, N_res, N_res, c_hidden]``
    projection materialised or saved, so nothing to run in parts: ``run_step`` and
    ``normalise_per_part`` are not used; limits in that module's docstring).

    Raises:
        ValueError: unknown ``impl``.
        KernelUnavailableError: ``impl="triton"`` where Triton cannot run.
    """
    _check_impl("triangle_multiplication", impl)
    if impl == "reference":
        return reference.triangle_multiplication(z, mask, weights, outgoing, eps, run_step, normalise_per_part)
    _triton_support.require_triton("triangle_multiplication", z)
    from .fused_triangle import fused_triangle_multiplication  # imports triton lazily

    return fused_triangle_multiplication(z, mask, weights, outgoing, eps)
