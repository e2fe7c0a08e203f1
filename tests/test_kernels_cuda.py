"""Compiled-kernel tests (``@pytest.mark.cuda``): the Triton kernels compiled for a GPU, at shapes that
span several 64-wide tiles (Q, K and N_res >= 129, odd), bf16 and fp32, against the same-dtype torch
reference and an fp64 oracle (:func:`tests.kernel_checks.assert_close3`), and the tiny model with
``kernels="triton"`` on the GPU against the reference policy.

Skipped without CUDA. ``ALPHAFOLD_MEM_GPU_CHECK_DRY=1`` runs the same tests in Triton's interpreter
on CPU at tiny shapes, fp32 only (the dry mode of ``scripts/gpu_check.py``, which runs this file either way)::

    python -m pytest -m cuda tests/test_kernels_cuda.py          # on a CUDA machine
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from alphafold_mem import kernels
from alphafold_mem.kernels import TriangleMultiplicationWeights
from tests.kernel_checks import DEVICE, assert_close3, leaf, needs_triton, run_triangle, triangle_inputs  # noqa: I001 (sets TRITON_INTERPRET)

DRY = os.environ.get("ALPHAFOLD_MEM_GPU_CHECK_DRY") == "1"
pytestmark = [pytest.mark.cuda, needs_triton]

# (lead, H, Q, K, C, mask needs grad, pair bias shared by rows)
ATTENTION = {
    "triangle_131": ((1, 131), 4, 131, 131, 32, False, True),
    "msa_row_257": ((1, 9), 8, 257, 257, 32, True, True),
    "per_row_bias_133x197": ((2, 3), 2, 133, 197, 64, True, False),
}
TRIANGLE = {"n131_cz128_c128": (131, 128, 128), "n197_cz64_c96": (197, 64, 96)}
LAYER_NORM = {"pair_131x129x128": (131, 129, 128), "msa_33x257x256": (33, 257, 256)}
if DRY:  # the same code path at interpreter sizes
    ATTENTION = {"dry": ((1, 5), 2, 19, 21, 8, True, True)}
    TRIANGLE = {"dry": (19, 16, 16)}
    LAYER_NORM = {"dry": (3, 19, 24)}
DTYPES = [torch.float32, torch.bfloat16]
if DRY:  # fp32 runs every test function; the interpreter's bf16 cases are test_kernels.py's attention and
    # LayerNorm, test_kernels_triangle.py's outgoing/incoming and test_kernels_arch.py's (same oracle check)
    DTYPES = [torch.float32]
DTYPE_IDS = [{torch.float32: "fp32", torch.bfloat16: "bf16"}[d] for d in DTYPES]


def _check(label, impl_run, dtype, names):
    got, ref, oracle = impl_run("triton", dtype), impl_run("reference", dtype), impl_run("reference", torch.float64)
    for name, a, r, o in zip(names, got, ref, oracle):
        assert a.shape == o.shape and a.dtype == r.dtype, f"{label}/{name}: {a.shape} {a.dtype}"
        assert_close3(f"{label}/{name}", a, r, o, dtype)  # the inputs' dtype sets the tolerance


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", list(ATTENTION))
def test_attention_compiled(case, dtype):
    lead, H, Q, K, C, mask_grad, shared = ATTENTION[case]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*lead, H, n, C, generator=g) * s for n, s in ((Q, C**-0.5), (K, 1.0), (K, 1.0)))
    mask_bias = ((torch.rand(*lead, 1, 1, K, generator=g) > 0.2).float() - 1.0) * 1e9
    mask_bias[..., 0] = 0.0
    pair = torch.randn(*((lead[0],) + (1,) * (len(lead) - 1) if shared else lead), H, Q, K, generator=g)
    d_out = torch.randn(*lead, H, Q, C, generator=g)

    def run(impl, dt):
        qkv = [leaf(t.to(DEVICE), dt) for t in (q, k, v)]
        biases = [leaf(mask_bias.to(DEVICE), dt, mask_grad), leaf(pair.to(DEVICE), dt)]
        out = kernels.attention(*qkv, biases, impl=impl)
        out.backward(d_out.to(DEVICE, dt))
        return [out.detach()] + [t.grad for t in qkv] + [b.grad for b in biases if b.requires_grad]

    _check(case, run, dtype, ["out", "dq", "dk", "dv"] + (["dmask"] if mask_grad else []) + ["dpair"])


@pytest.mark.parametrize("outgoing", [True, False], ids=["outgoing", "incoming"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", list(TRIANGLE))
def test_triangle_multiplication_compiled(case, dtype, outgoing):
    n, cz, ch = TRIANGLE[case]
    z, mask, weights, d_out = triangle_inputs((1,), n, cz, ch, seed=1)

    def run(impl, dt):
        return run_triangle(impl, z, mask, weights, d_out, outgoing, dt)

    _check(case, run, dtype, ["out", "dz"] + list(TriangleMultiplicationWeights._fields))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", list(LAYER_NORM))
def test_layer_norm_compiled(case, dtype):
    shape = LAYER_NORM[case]
    g = torch.Generator().manual_seed(2)
    x, dy = torch.randn(*shape, generator=g) * 2 + 0.5, torch.randn(*shape, generator=g)
    w, b = torch.randn(shape[-1], generator=g), torch.randn(shape[-1], generator=g)

    def run(impl, dt):
        xs = leaf(x.to(DEVICE), dt)
        ps = [leaf(t.to(DEVICE), torch.float64 if dt == torch.float64 else torch.float32) for t in (w, b)]
        y = kernels.layer_norm(xs, *ps, 1e-5, impl=impl) if dt != torch.float64 else F.layer_norm(xs, shape[-1:], *ps)
        y.backward(dy.to(DEVICE, dt))
        return [y.detach(), xs.grad] + [p.grad for p in ps]

    _check(case, run, dtype, ["y", "dx", "dw", "db"])


def test_model_compiled_matches_reference():
    """The tiny model with every Triton kernel (compiled on the GPU) against the reference policy:
    outputs within 1e-4 (Å for coordinates), parameter gradients within 1e-3 relative."""
    from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
    from alphafold_mem.testing import random_features

    cfg = model_config("tiny", num_recycles=0, **{"evoformer.num_blocks": 1, "structure_module.num_layers": 2})
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval().to(DEVICE)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    # dry: N_res 5, N_seq 3, N_extra 3 (were 11, 5, 6; 7, 5, 6 cost 1.4x these): the interpreter's tiles
    # are 16 wide (kernels/launch_configs.py), so all of them run one partial, masked tile per axis, the
    # same path; row 2 of the MSA keeps a masked residue (4)
    batch = random_features(cfg, *((5, 3, 3) if DRY else (137, 5, 6)), n_templ=1, seed=3)
    batch["msa_mask"][2, 4:7] = 0
    batch = {k: t.to(DEVICE) for k, t in batch.items()}

    def run(policy):
        bind(model, policy)
        model.zero_grad()
        out = model(batch)
        (out["final_atom_positions"].square().mean() + out["plddt"].mean() + out["distogram_logits"].mean()).backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_out, ref_grads = run(MemoryPolicy.reference())
    out, grads = run(MemoryPolicy(kernels="triton"))
    for key in ("final_atom_positions", "plddt", "pair", "msa"):
        assert (ref_out[key] - out[key]).abs().max().item() <= 1e-4, key
    for name, g in ref_grads.items():
        rel = ((g - grads[name]).norm() / max(g.norm().item(), 1e-12)).item()
        assert rel <= 1e-3 or (g - grads[name]).abs().max() <= 1e-6, f"{name}: relative gradient error {rel:.2e}"
