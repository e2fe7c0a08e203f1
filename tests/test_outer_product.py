"""The outer product mean's row-blocked outer product with recompute in backward
(alphafold_mem.memory.outer_product, policy ``outer_product="recompute"``) against the reference:
outputs and gradients, mixed precision, the memory it saves, and its errors."""

import pytest
import torch

from alphafold_mem import MemoryPolicy, bind
from alphafold_mem.memory.outer_product import outer_product_linear, outer_rows
from alphafold_mem.memory.tracking import track_peak
from alphafold_mem.model.outer_product_mean import OuterProductMean

#: fp32 tolerances (outputs absolute, gradients relative to each gradient's largest entry)
OUT_TOL, GRAD_RTOL = 1e-5, 1e-5


def _reference(a, b, weight, bias):
    return torch.nn.functional.linear(torch.einsum("...sic,...sjd->...ijcd", a, b).flatten(-2), weight, bias)


@pytest.mark.parametrize("rows", [1, 3, 7, None])
def test_gradcheck_fp64_with_leading_dims(rows):
    """fp64 finite differences through every input (a, b, weight, bias), leading batch dims, blocks
    of 1, 3 (uneven: 7 = 3 + 3 + 1) and 7 rows, and the default block."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 3, 7, 4, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(2, 3, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(6, 12, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: outer_product_linear(*t, rows=rows), (a, b, w, bias))
    out = outer_product_linear(a, b, w, bias, rows=rows)
    assert out.shape == (2, 7, 5, 6)
    assert torch.allclose(out, _reference(a, b, w, bias), atol=1e-12)


def test_module_equals_reference_with_masks_outputs_and_gradients():
    """OuterProductMean (Alg. 10) under ``outer_product="recompute"`` == the reference in fp32, odd
    sizes, MSA mask with zeros (and a fully masked column), chunked and unchunked: outputs and the
    gradients of the MSA and of every parameter; without autograd, the in-place path too."""
    torch.manual_seed(0)
    mod = OuterProductMean(c_m=12, c_z=10, c_hidden=6)
    with torch.no_grad():  # the final init is zeros: give the projection something to carry
        mod.output.weight.normal_()
        mod.output.bias.normal_()
    m = torch.randn(5, 13, 12)
    mask = (torch.rand(5, 13) > 0.3).float()
    mask[:, 4] = 0
    runs = {}
    for policy in (
        MemoryPolicy.reference(),
        MemoryPolicy(outer_product="recompute"),
        MemoryPolicy(outer_product="recompute", chunk_size=4),
    ):
        bind(mod, policy)
        mm = m.clone().requires_grad_()
        out = mod(mm, mask)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((out * weights).sum(), [mm, *mod.parameters()])
        with torch.no_grad():
            target = torch.zeros_like(out)
            mod.add_to_(target, m, mask)
        runs[policy.name] = (out.detach(), grads, target)
    (ref_out, ref_grads, ref_inplace), *others = runs.values()
    for out, grads, inplace in others:
        assert (out - ref_out).abs().max() <= OUT_TOL
        assert (inplace - ref_inplace).abs().max() <= OUT_TOL
        for g, r in zip(grads, ref_grads):
            assert (g - r).abs().max() <= GRAD_RTOL * r.abs().max()


def test_autocast_bf16_matches_reference_under_autocast():
    """Under CPU bf16 autocast the blocks run in bf16 as the reference's matmul and linear do; the
    gradients come back in the inputs' dtypes (fp32) and agree with the reference's to bf16
    rounding (2 % of each gradient's largest entry)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 9, 8, generator=g, requires_grad=True)
    b = torch.randn(4, 9, 8, generator=g, requires_grad=True)
    w = torch.randn(16, 64, generator=g, requires_grad=True)
    bias = torch.randn(16, generator=g, requires_grad=True)
    results = []
    for fn in (_reference, lambda *t: outer_product_linear(*t, rows=2)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(a, b, w, bias)
        grads = torch.autograd.grad(out.float().sum(), (a, b, w, bias))
        results.append((out, grads))
    (ref, ref_grads), (out, grads) = results
    assert out.dtype == ref.dtype == torch.bfloat16
    assert (out.float() - ref.float()).abs().max() <= 0.02 * ref.float().abs().max()
    for gr, r, x in zip(grads, ref_grads, (a, b, w, bias)):
        assert gr.dtype == x.dtype
        assert (gr - r).abs().max() <= 0.02 * r.abs().max()


def test_saves_the_projections_not_the_product():
    """fwd + bwd peak by the storage counter: the reference saves the flattened product for the
    weight gradient (N_res^2 * C^2 elements) and forms its gradient, the same size, in backward; the
    row blocks keep each at most one [N_res, N_res, c_out] worth, both copies counted."""
    n, s, c, c_out = 32, 4, 8, 16
    g = torch.Generator().manual_seed(0)
    leaves = [
        torch.randn(s, n, c, generator=g, requires_grad=True),
        torch.randn(s, n, c, generator=g, requires_grad=True),
        torch.randn(c_out, c * c, generator=g, requires_grad=True),
        torch.randn(c_out, generator=g, requires_grad=True),
    ]
    product = n * n * c * c * 4  # bytes of the whole flattened product (fp32)
    peaks = []
    for fn in (_reference, outer_product_linear):
        with track_peak() as mem:
            fn(*leaves).sum().backward()
        peaks.append(mem.peak)
    ref, blocked = peaks
    assert ref >= 2 * product  # the saved product and, in backward, its gradient
    assert outer_rows(n, c, c, c_out) == 4
    assert blocked <= ref - 1.5 * product


def test_no_sequences_gives_the_bias_and_zero_gradients():
    """N_seq 0 (a sample without extra sequences): the product is empty, the output is the bias,
    as the reference's; gradients flow (zeros for a and b, the bias gets the output's)."""
    a = torch.zeros(0, 6, 4, requires_grad=True)
    b = torch.zeros(0, 5, 3, requires_grad=True)
    w = torch.randn(2, 12, requires_grad=True)
    bias = torch.randn(2, requires_grad=True)
    out = outer_product_linear(a, b, w, bias, rows=4)
    assert torch.equal(out, _reference(a, b, w, bias))
    out.sum().backward()
    assert torch.equal(bias.grad, torch.full((2,), 30.0)) and torch.equal(w.grad, torch.zeros_like(w))
    assert a.grad.shape == a.shape and b.grad.shape == b.shape


def test_outer_rows_and_errors():
    assert outer_rows(64, 32, 32, 128) == 4  # AF2's sizes: the two copies of 4 rows = one pair representation
    assert outer_rows(1000, 32, 32, 128) == 62
    assert outer_rows(5, 32, 32, 128) == 1
    assert outer_rows(8, 2, 2, 128) == 8  # everything fits: one block
    a, b = torch.zeros(3, 5, 4), torch.zeros(3, 6, 2)
    with pytest.raises(ValueError, match="N_seq"):
        outer_product_linear(a, torch.zeros(2, 6, 2), torch.zeros(7, 8))
    with pytest.raises(ValueError, match="weight"):
        outer_product_linear(a, b, torch.zeros(7, 9))
    with pytest.raises(ValueError, match="rows"):
        outer_product_linear(a, b, torch.zeros(7, 8), rows=0)
    with pytest.raises(ValueError, match="outer_product"):
        MemoryPolicy(outer_product="blocked")
