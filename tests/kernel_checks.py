"""Shared by the kernel tests: where the Triton kernels run, and the three-way tolerance.

Tolerance (as in flash-attention's tests/test_flash_attn.py): for every output and gradient,
``err(kernel) <= 3 * err(torch reference, same dtype) + 1 ulp``, errors being the max abs difference
to an fp64 oracle, and additionally ``err(kernel) <= 1e-4 * max(1, |oracle|)`` in fp32.

``TRITON_INTERPRET=1`` must be set before anything imports triton; importing this module sets it
when no GPU is visible (tests/conftest.py does too).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from alphafold_mem import kernels  # noqa: E402
from alphafold_mem.kernels import TriangleMultiplicationWeights, _triton_support  # noqa: E402

REASON = _triton_support.triton_unavailable_reason()
#: triton imported (by another module) before the interpreter was switched on cannot interpret here
TRITON_PREIMPORTED = REASON is not None and "before TRITON_INTERPRET=1" in REASON
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"

needs_triton = pytest.mark.skipif(
    REASON is not None,
    reason=f"Triton kernels cannot run here: {REASON}"
    + ("; rerun in a fresh process by test_triton_in_subprocess" if TRITON_PREIMPORTED else ""),
)


def leaf(t: torch.Tensor, dtype: torch.dtype, grad: bool = True) -> torch.Tensor:
    """A fresh leaf copy of ``t`` in ``dtype``."""
    return t.detach().to(dtype).clone().requires_grad_(grad)


def assert_close3(
    name: str, out: torch.Tensor, ref: torch.Tensor, oracle: torch.Tensor, dtype, fp32_rel: float = 1e-4
) -> tuple:
    """Three-way tolerance (module docstring); returns (kernel error, reference error) against the oracle."""
    assert not torch.isnan(out).any(), f"{name}: kernel produced NaN"
    err_k = (out.double() - oracle.double()).abs().max().item()
    err_r = (ref.double() - oracle.double()).abs().max().item()
    scale = max(1.0, oracle.abs().max().item())
    ulp = torch.finfo(dtype).eps * scale
    assert err_k <= 3 * err_r + ulp, (
        f"{name} ({dtype}): kernel err {err_k:.3g} > 3 x reference err {err_r:.3g} + {ulp:.3g}"
    )
    if dtype == torch.float32:
        assert err_k <= fp32_rel * scale, f"{name}: fp32 kernel err {err_k:.3g} > {fp32_rel:g} x {scale:.3g}"
    return err_k, err_r


def triangle_inputs(lead, n, cz, ch, seed=0):
    """z, mask (both values; one row of the first batch element all 0), the 16 weights (non-trivial:
    the gates are not at their AF2 initial values) and an upstream gradient, fp32 on CPU."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(cz,), (cz,)] + [(ch, cz), (ch,)] * 4 + [(ch,), (ch,), (cz, ch), (cz,), (cz, cz), (cz,)]
    weights = [torch.randn(*s, generator=g) * (0.3 if len(s) == 2 else 0.5) for s in shapes]
    weights[0] += 1.0  # LayerNorm scales around 1
    weights[10] += 1.0
    z = torch.randn(*lead, n, n, cz, generator=g) * 2 + 0.3
    mask = (torch.rand(*lead, n, n, generator=g) > 0.25).float()
    mask.view(-1, n, n)[0, 3] = 0.0
    d_out = torch.randn(*lead, n, n, cz, generator=g)
    return z, mask, weights, d_out


def run_triangle(impl, z, mask, weights, d_out, outgoing, dtype):
    """Forward + backward in ``dtype``: [out, dz, d_weight...]."""
    zs = leaf(z.to(DEVICE), dtype)
    ws = [leaf(w.to(DEVICE), dtype) for w in weights]
    out = kernels.triangle_multiplication(
        zs, mask.to(DEVICE, dtype), TriangleMultiplicationWeights(*ws), outgoing, impl=impl
    )
    out.backward(d_out.to(DEVICE, dtype))
    return [out.detach(), zs.grad] + [w.grad for w in ws]
