"""The fused triangle multiplication (``kernels.triangle_multiplication(impl="triton")``, AF2 Alg. 11/12)
against its torch reference, in Triton's interpreter on CPU: output and every gradient (z and all 16
weights) within 3x torch's own same-dtype error to an fp64 oracle (:func:`tests.kernel_checks.assert_close3`),
both directions, masks with both values, N and c_hidden not multiples of the 16-wide blocks; the
backward saves no ``[*, N, N, c_hidden]`` tensor; the model's module equals the reference function."""

from __future__ import annotations

import pytest
import torch

from alphafold_mem import kernels
from alphafold_mem.kernels import TriangleMultiplicationWeights, reference
from tests.kernel_checks import DEVICE, assert_close3, leaf, needs_triton  # noqa: I001 (sets TRITON_INTERPRET)
from tests.kernel_checks import run_triangle as _run
from tests.kernel_checks import triangle_inputs as _inputs

NAMES = ["out", "dz"] + [f"d_{n}" for n in TriangleMultiplicationWeights._fields]


CASES = {
    # name: (lead, N, c_z, c_hidden, dtype, outgoing)
    "outgoing_fp32": ((1,), 21, 12, 20, torch.float32, True),
    "incoming_fp32": ((1,), 21, 12, 20, torch.float32, False),
    # N = 17: one past the 16-wide blocks (tails of 1 in i, j, k and the output branch's rows; the
    # interpreter's cost grows with the batch's N*N rows); c_z = 24: the only case crossing a c_z chunk
    "outgoing_bf16_batch2": ((2,), 17, 24, 12, torch.bfloat16, True),
    "incoming_bf16": ((1,), 21, 12, 20, torch.bfloat16, False),
}


@needs_triton
@pytest.mark.parametrize("case", list(CASES))
def test_fused_triangle_multiplication_matches_reference(case):
    lead, n, cz, ch, dtype, outgoing = CASES[case]
    z, mask, weights, d_out = _inputs(lead, n, cz, ch)
    assert (mask == 0).any() and (mask == 1).any()
    got = _run("triton", z, mask, weights, d_out, outgoing, dtype)
    ref = _run("reference", z, mask, weights, d_out, outgoing, dtype)
    oracle = _run("reference", z, mask, weights, d_out, outgoing, torch.float64)
    for name, a, r, o in zip(NAMES, got, ref, oracle):
        assert a is not None and a.shape == o.shape and a.dtype == dtype, f"{name}: {a.shape} {a.dtype}"
        err_k, err_r = assert_close3(f"{case}/{name}", a, r, o, dtype)
        print(f"{case:22s} {name:28s} kernel-vs-fp64 {err_k:.2e}  torch-vs-fp64 {err_r:.2e}")


@needs_triton
def test_fused_triangle_multiplication_saves_no_projection():
    """The memory property, structurally: nothing of shape [*, N, N, c_hidden] is saved for backward
    (the reference saves several), and nothing saved is larger than z."""
    lead, n, cz, ch = (1,), 17, 8, 24
    z, mask, weights, d_out = _inputs(lead, n, cz, ch)

    def saved_shapes(impl):
        shapes = []

        def pack(t):
            shapes.append(tuple(t.shape))
            return t

        zs = leaf(z.to(DEVICE), torch.float32)
        ws = [leaf(w.to(DEVICE), torch.float32) for w in weights]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = kernels.triangle_multiplication(
                zs, mask.to(DEVICE), TriangleMultiplicationWeights(*ws), True, impl=impl
            )
        out.backward(d_out.to(DEVICE))
        return shapes

    projection = lead + (n, n, ch)
    assert projection in saved_shapes("reference")  # the hook sees the reference's projections
    shapes = saved_shapes("triton")
    assert shapes and projection not in shapes, shapes
    assert max(torch.Size(s).numel() for s in shapes) <= z.numel(), shapes


@needs_triton
def test_fused_triangle_multiplication_under_fake_tensors_launches_nothing():
    """The memory planner traces with FakeTensors: the kernel allocates its outputs and buffers and
    launches nothing, also where Triton could not run."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    z, mask, weights, d_out = _inputs((1,), 9, 8, 8)
    with FakeTensorMode(allow_non_fake_inputs=True):
        zs = z.clone().requires_grad_(True)
        ws = [w.clone().requires_grad_(True) for w in weights]
        out = kernels.triangle_multiplication(
            zs, mask.clone(), TriangleMultiplicationWeights(*ws), False, impl="triton"
        )
        out.backward(d_out.clone())
        assert out.shape == z.shape and zs.grad.shape == z.shape
        assert all(w.grad.shape == w.shape for w in ws)


@needs_triton
def test_fused_triangle_multiplication_validates_inputs():
    from alphafold_mem.kernels.fused_triangle import fused_triangle_multiplication

    z, mask, weights, _ = _inputs((1,), 5, 8, 8)
    w = TriangleMultiplicationWeights(*[t.to(DEVICE) for t in weights])
    z, mask = z.to(DEVICE), mask.to(DEVICE)
    with pytest.raises(ValueError, match=r"z must be \[\*, N, N, c_z\]"):
        fused_triangle_multiplication(z[..., :4, :], mask, w, True)
    with pytest.raises(ValueError, match="left_gate.weight"):
        fused_triangle_multiplication(z, mask, w._replace(left_gate_weight=w.left_gate_weight[:, :3]), True)
    with pytest.raises(ValueError, match="does not broadcast"):
        fused_triangle_multiplication(z, mask[..., :3], w, True)
    with pytest.raises(ValueError, match="dtype"):
        fused_triangle_multiplication(z.double(), mask, w, True)


@pytest.mark.parametrize("outgoing", [True, False])
def test_model_module_equals_reference_function(outgoing):
    """The model's TriangleMultiplication (reference path, also chunked) computes
    :func:`kernels.reference.triangle_multiplication` on its own parameters: the spec the kernel matches."""
    from alphafold_mem.model.triangle import TriangleMultiplication

    torch.manual_seed(0)
    module = TriangleMultiplication(8, 12, outgoing=outgoing)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    z, mask, _, _ = _inputs((2,), 13, 8, 12)
    expected = reference.triangle_multiplication(z, mask, TriangleMultiplicationWeights.from_module(module), outgoing)
    for chunk in (None, 5):
        module.chunk_size = chunk
        torch.testing.assert_close(module(z, mask), expected, rtol=1e-5, atol=1e-5)
