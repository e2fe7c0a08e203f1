"""Tests of the top-level ``kernels`` package: dispatch, and the Triton kernels against the reference.

Run (CPU, Triton interpreter; about a minute on 2 cores)::

    TRITON_INTERPRET=1 .venv/bin/python -m pytest tests/test_kernels.py -q

Tolerance: three-way (:func:`tests.kernel_checks.assert_close3`: kernel error to an fp64 oracle at
most 3x the same-dtype torch reference's, plus 1e-4 relative in fp32). The attention
oracle is ``kernels.reference.attention`` on fp64 copies (whose softmax runs in fp32 by spec, so
fully masked rows are uniform there too); the LayerNorm oracle is ``F.layer_norm`` in fp64.

``TRITON_INTERPRET=1`` must be set before anything imports triton. This module sets it (when no GPU
is visible) before importing ``kernels``; if another module imported triton earlier, the Triton
tests here are skipped in-process and rerun in a subprocess instead (``test_triton_in_subprocess``).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from alphafold_mem import kernels
from alphafold_mem.kernels import KernelUnavailableError, _triton_support, reference
from tests.kernel_checks import DEVICE as _DEVICE  # noqa: I001 (sets TRITON_INTERPRET)
from tests.kernel_checks import TRITON_PREIMPORTED as _TRITON_PREIMPORTED
from tests.kernel_checks import assert_close3 as _assert_close3
from tests.kernel_checks import leaf as _leaf
from tests.kernel_checks import needs_triton

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _attention_inputs(lead, H, Q, K, C, CV, dtype, fully_masked_row=False, seed=0):
    """q, k, v, key-mask bias [*, 1, 1, K] (both values, optionally one row all masked), pair bias
    [lead[0], 1, ..., H, Q, K] shared over the other leading dims, and an upstream gradient."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, H, Q, C, generator=g) * C**-0.5
    k = torch.randn(*lead, H, K, C, generator=g)
    v = torch.randn(*lead, H, K, CV, generator=g)
    mask = (torch.rand(*lead, 1, 1, K, generator=g) > 0.3).float()
    mask[..., 0] = 1.0
    if fully_masked_row:
        mask.view(-1, K)[-1] = 0.0  # the last leading row has every key masked
    mask_bias = (mask - 1.0) * 1e9
    pair_shape = (lead[0],) + (1,) * (len(lead) - 1) + (H, Q, K)
    pair_bias = torch.randn(pair_shape, generator=g)
    d_out = torch.randn(*lead, H, Q, CV, generator=g)
    return [t.to(dtype) for t in (q, k, v, mask_bias, pair_bias, d_out)]


def _run_attention(impl, q, k, v, biases, bias_grad, d_out, dtype, transpose_qkv=False):
    """Forward + backward; returns [out, dq, dk, dv, *dbiases] (None where no grad is requested)."""
    if transpose_qkv:  # q, k, v as the transposed views AF2's projections produce ([*, Q, H, C] -> [*, H, Q, C])
        base = [_leaf(t.transpose(-2, -3).contiguous(), dtype) for t in (q, k, v)]
        qkv = [b.transpose(-2, -3) for b in base]
    else:
        base = qkv = [_leaf(t, dtype) for t in (q, k, v)]
    bs = [_leaf(b, dtype, grad) for b, grad in zip(biases, bias_grad)]
    out = kernels.attention(*qkv, bs, impl=impl)
    out.backward(d_out.to(dtype))
    grads = [b.grad.transpose(-2, -3) if transpose_qkv else b.grad for b in base]
    return [out.detach()] + grads + [b.grad for b in bs]


# ---------------------------------------------------------------------------------------------
# dispatch (always run, with or without triton)
# ---------------------------------------------------------------------------------------------


def test_unknown_impl_raises():
    """Each op accepts exactly its own implementations (kernels.IMPLS), naming them when refused."""
    q = torch.randn(2, 5, 4)
    assert kernels.IMPLS == {
        "attention": ("reference", "chunked", "triton"),
        "layer_norm": ("reference", "triton"),
        "triangle_multiplication": ("reference", "triton"),
    }
    with pytest.raises(ValueError, match="unknown attention impl 'cuda'; valid: reference, chunked, triton"):
        kernels.attention(q, q, q, [], impl="cuda")
    with pytest.raises(ValueError, match="unknown layer_norm impl 'chunked'; valid: reference, triton"):
        kernels.layer_norm(q, torch.ones(4), torch.zeros(4), impl="chunked")
    z, mask = torch.randn(1, 3, 3, 4), torch.ones(1, 3, 3)
    w = reference.TriangleMultiplicationWeights(*(torch.ones(4) for _ in range(16)))
    with pytest.raises(ValueError, match="unknown triangle_multiplication impl 'chunked'"):
        kernels.triangle_multiplication(z, mask, w, True, impl="chunked")


@pytest.mark.parametrize("chunks", [(3, 4), (1024, 4096)])
def test_chunked_impl_is_the_low_memory_attention(chunks):
    """``impl="chunked"`` dispatches to the low-memory attention with the given chunks: outputs and
    gradients equal the reference (fp64, 1e-10); under the estimator's loop cut the first two query
    chunks see the first two key chunks only (the reference has no loop: unchanged)."""
    from alphafold_mem.kernels.low_memory_attention import low_memory_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 11, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(2, 3, 11, 11, generator=g, dtype=torch.float64, requires_grad=True)
    out = kernels.attention(q, k, v, [bias], impl="chunked", chunks=chunks)
    ref = reference.attention(q, k, v, [bias])
    torch.testing.assert_close(out, low_memory_attention(q, k, v, [bias], *chunks), rtol=0, atol=0)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v, bias))
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v, bias))
    for got, want in zip((out, *grads), (ref, *ref_grads)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        cut = kernels.attention(q, k, v, [bias], impl="chunked", chunks=(3, 4), first_chunks_only=True)
        whole = kernels.attention(q, k, v, [bias], impl="reference", first_chunks_only=True)
    torch.testing.assert_close(whole, ref.detach(), rtol=0, atol=0)  # no loop to cut
    # the first two query chunks (6 rows), over the first two key chunks (8 keys) only
    first = reference.attention(q[..., :6, :], k[..., :8, :], v[..., :8, :], [bias[..., :6, :8]])
    torch.testing.assert_close(cut[..., :6, :], first.detach(), rtol=1e-12, atol=1e-12)


def test_triangle_reference_steps_run_in_parts():
    """The reference triangle multiplication through a step runner that splits every step's operands
    in row blocks (as the model's chunks do), z normalised per part or once, equals the whole call
    (fp64), outputs and gradients; the steps come in the order and with the names documented."""
    g = torch.Generator().manual_seed(2)
    n, c_z, c = 7, 5, 6
    z = torch.randn(1, n, n, c_z, generator=g, dtype=torch.float64, requires_grad=True)
    mask = (torch.rand(1, n, n, generator=g) > 0.2).double()
    shapes = [(c_z,), (c_z,)] + [(c, c_z), (c,)] * 4 + [(c,), (c,), (c_z, c), (c_z,), (c_z, c_z), (c_z,)]
    w = reference.TriangleMultiplicationWeights(
        *(torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    )
    for outgoing in (True, False):
        names = []

        def run_step(name, fn, *ops):
            names.append(name)
            if name == "project":  # rows of z and mask
                parts = [fn(ops[0][:, i : i + 3], ops[1][:, i : i + 3]) for i in range(0, n, 3)]
                return tuple(torch.cat(p, dim=1) for p in zip(*parts))
            a, b, zz = ops  # output rows i: outgoing reads a and z rows i; incoming reads b's columns i
            rows = [
                fn(a[:, i : i + 3], b, zz[:, i : i + 3]) if outgoing else fn(a, b[:, :, i : i + 3], zz[:, i : i + 3])
                for i in range(0, n, 3)
            ]
            return torch.cat(rows, dim=1)

        whole = kernels.triangle_multiplication(z, mask, w, outgoing)
        want = torch.autograd.grad(whole.square().sum(), (z, *w))
        for per_part in (False, True):
            names.clear()
            out = kernels.triangle_multiplication(z, mask, w, outgoing, run_step=run_step, normalise_per_part=per_part)
            assert names == ["project", "outgoing" if outgoing else "incoming"]
            torch.testing.assert_close(out, whole, rtol=1e-12, atol=1e-12)
            for got, ref_grad in zip(torch.autograd.grad(out.square().sum(), (z, *w)), want):
                torch.testing.assert_close(got, ref_grad, rtol=1e-10, atol=1e-10)


def test_unavailable_triton_raises_without_fallback(monkeypatch):
    monkeypatch.setattr(_triton_support, "triton_unavailable_reason", lambda: "forced by the test")
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(KernelUnavailableError, match="forced by the test"):
        kernels.attention(q, q, q, [], impl="triton")
    with pytest.raises(KernelUnavailableError, match="impl='reference'"):
        kernels.layer_norm(q, torch.ones(4), torch.zeros(4), impl="triton")
    w = reference.TriangleMultiplicationWeights(*(torch.ones(4) for _ in range(16)))
    with pytest.raises(KernelUnavailableError, match="forced by the test"):
        kernels.triangle_multiplication(torch.randn(1, 3, 3, 4), torch.ones(1, 3, 3), w, True, impl="triton")


def test_triton_not_importable_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    assert "cannot be imported" in _triton_support.triton_unavailable_reason()
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(KernelUnavailableError):
        kernels.attention(q, q, q, [], impl="triton")


def test_import_kernels_without_triton_subprocess():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch\nfrom alphafold_mem import kernels\n"
        "q = torch.randn(1, 2, 3, 4)\n"
        "assert kernels.attention(q, q, q, [], impl='reference').shape == (1, 2, 3, 4)\n"
        "try:\n    kernels.attention(q, q, q, [], impl='triton')\n"
        "except kernels.KernelUnavailableError as e:\n    print('raised:', e)\n"
        "else:\n    raise SystemExit('no KernelUnavailableError')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "raised:" in res.stdout


def test_reference_fully_masked_row_is_uniform():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    bias = torch.full((1, 1, 1, 5), -1e9)
    out = reference.attention(q, k, v, [bias])
    torch.testing.assert_close(out, v.mean(-2, keepdim=True).expand_as(out))


# ---------------------------------------------------------------------------------------------
# fused attention
# ---------------------------------------------------------------------------------------------

ATTENTION_CASES = {
    # name: (lead, H, Q, K, C, C_v, dtype, use mask, use pair, mask needs grad, transposed q/k/v)
    # msa_row: Q 21 and K 29 / 19 each span a full and a partial 16-wide interpreter tile, and the 5 rows
    # sharing a pair bias a full and a partial group of z_per_program = 4 (kernels/launch_configs.py);
    # H 2, Q 21 (were 3, 37: a third Q tile and head add no path) cost ~0.55x the interpreter's CPU
    "msa_row_fp32_c8": ((2, 5), 2, 21, 29, 8, 8, torch.float32, True, True, False, True),
    "msa_row_fp32_c16_maskgrad": ((2, 5), 2, 21, 19, 16, 16, torch.float32, True, True, True, False),
    "msa_row_bf16_c8": ((2, 5), 2, 21, 29, 8, 8, torch.bfloat16, True, True, False, True),
    "msa_row_bf16_c16_maskgrad": ((2, 5), 2, 21, 19, 16, 16, torch.bfloat16, True, True, True, False),
    # triangle: 7 rows share the pair bias (a full and a partial z group; were 19 = N, which the kernels
    # do not tie to Q or K), Q = K = 19 cross a tile, C 32
    "triangle_fp32_c32": ((1, 7), 2, 19, 19, 32, 32, torch.float32, True, True, False, False),
    "no_bias_fp32_c12_cv20": ((3,), 2, 37, 29, 12, 20, torch.float32, False, False, False, False),
    "pair_only_bf16_c64": ((2,), 1, 21, 17, 64, 64, torch.bfloat16, False, True, False, False),
}


@needs_triton
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_fused_attention_matches_reference(case):
    lead, H, Q, K, C, CV, dtype, use_mask, use_pair, mask_grad, transposed = ATTENTION_CASES[case]
    q, k, v, mask_bias, pair_bias, d_out = _attention_inputs(lead, H, Q, K, C, CV, dtype)
    assert (mask_bias == 0).any() and (mask_bias < 0).any()  # both mask values present
    biases, bias_grad = [], []
    if use_mask:
        biases.append(mask_bias), bias_grad.append(mask_grad)
    if use_pair:
        biases.append(pair_bias), bias_grad.append(True)
    inputs = [t.to(_DEVICE) for t in (q, k, v)]
    biases = [b.to(_DEVICE) for b in biases]
    d_out = d_out.to(_DEVICE)
    got = _run_attention("triton", *inputs, biases, bias_grad, d_out, dtype, transposed)
    ref = _run_attention("reference", *inputs, biases, bias_grad, d_out, dtype, transposed)
    oracle = _run_attention("reference", *inputs, biases, bias_grad, d_out, torch.float64, transposed)
    names = ["out", "dq", "dk", "dv"] + (["dmask"] if use_mask else []) + (["dpair"] if use_pair else [])
    for name, a, r, o in zip(names, got, ref, oracle):
        if o is None:
            assert a is None, f"{name}: gradient returned for a bias that does not require grad"
            continue
        assert a.shape == o.shape and a.dtype == dtype, f"{name}: {a.shape} {a.dtype} vs {o.shape}"
        err_k, err_r = _assert_close3(f"{case}/{name}", a, r, o, dtype)
        print(f"{case:28s} {name:6s} kernel-vs-fp64 {err_k:.2e}  torch-{str(dtype)[6:]}-vs-fp64 {err_r:.2e}")


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_attention_fully_masked_rows(dtype):
    """Rows whose keys are all masked (-1e9) give the uniform average and finite gradients, as the
    reference does. -1e9 swamps q.k in fp32/bf16 logits but not in fp64, so the oracle here is the
    fp32 reference (the semantics being tested), not fp64."""
    lead, H, Q, K, C = (2, 3), 2, 9, 13, 8
    q, k, v, mask_bias, pair_bias, d_out = _attention_inputs(lead, H, Q, K, C, C, dtype, fully_masked_row=True)
    mask_bias[0] = -1e9  # plus every row of the first batch element
    assert (mask_bias == 0).any()
    inputs = [t.to(_DEVICE) for t in (q, k, v)]
    biases = [mask_bias.to(_DEVICE), pair_bias.to(_DEVICE)]
    d_out = d_out.to(_DEVICE)
    got = _run_attention("triton", *inputs, biases, [True, True], d_out, dtype)
    ref = _run_attention("reference", *inputs, biases, [True, True], d_out, dtype)
    oracle = _run_attention("reference", *inputs, biases, [True, True], d_out, torch.float32)
    masked = mask_bias.expand(lead + (1, 1, K)).reshape(-1, K).eq(mask_bias.min()).all(-1).view(lead)
    out = got[0].float().cpu()
    uniform = v.float().mean(-2, keepdim=True).expand(out.shape)
    torch.testing.assert_close(out[masked], uniform[masked], atol=2e-2 if dtype == torch.bfloat16 else 1e-5, rtol=0)
    for name, a, r, o in zip(["out", "dq", "dk", "dv", "dmask", "dpair"], got, ref, oracle):
        assert torch.isfinite(a).all(), f"{name}: non-finite values"
        if dtype == torch.float32:
            err = (a.double() - o.double()).abs().max().item()
            assert err <= 1e-4, f"fully masked/{name}: kernel vs fp32 reference {err:.3g}"
        else:
            _assert_close3(f"fully masked/{name}", a, r, o, dtype)


@needs_triton
def test_fused_attention_saves_no_qk_sized_tensor():
    """The memory property, structurally: nothing of shape [*, H, Q, K] is saved for backward."""
    lead, H, Q, K, C = (1, 2), 2, 21, 17, 8  # the shapes saved do not depend on the leading sizes
    q, k, v, mask_bias, pair_bias, d_out = _attention_inputs(lead, H, Q, K, C, C, torch.float32)
    full = lead + (H, Q, K)

    def saved_shapes(impl):
        shapes = []

        def pack(t):
            shapes.append(tuple(t.shape))
            return t

        leaves = [_leaf(t.to(_DEVICE), torch.float32) for t in (q, k, v, pair_bias)]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = kernels.attention(*leaves[:3], [mask_bias.to(_DEVICE), leaves[3]], impl=impl)
        out.backward(d_out.to(_DEVICE))
        return shapes

    assert full in saved_shapes("reference")  # the hook sees the reference's probabilities
    shapes = saved_shapes("triton")
    assert shapes, "no saved tensors recorded"
    assert all(math.prod(s) < math.prod(full) for s in shapes), f"saved {shapes}, [*, H, Q, K] = {full}"


@needs_triton
def test_fused_attention_expanded_bias_view_gradient():
    """A bias passed as an expanded (stride-0) view is read in place and its gradient is correct."""
    lead, H, Q, K, C = (2, 3), 2, 11, 7, 8
    q, k, v, _, pair_bias, d_out = _attention_inputs(lead, H, Q, K, C, C, torch.float32)
    grads = {}
    for impl in ("triton", "reference"):
        pb = _leaf(pair_bias.to(_DEVICE), torch.float32)  # [2, 1, H, Q, K]
        expanded = pb.expand(lead + (H, Q, K))  # stride 0 over the rows
        out = kernels.attention(q.to(_DEVICE), k.to(_DEVICE), v.to(_DEVICE), [expanded], impl=impl)
        out.backward(d_out.to(_DEVICE))
        grads[impl] = pb.grad
    torch.testing.assert_close(grads["triton"], grads["reference"], atol=1e-5, rtol=1e-5)


BIAS_PATTERNS = {
    # shared across leading rows: their gradients take the separate dbias pass
    "shared": ((1, 3, 1, "Q", 1), (2, 1, "H", 1, "K")),  # over batch, heads and keys / over rows and queries
    # one bias row per leading row: their gradients are folded into the dk/dv pass
    "per_row": ((2, 3, 1, "Q", 1), (2, 3, "H", 1, "K")),  # over heads and keys / over queries
}


@needs_triton
@pytest.mark.parametrize("pattern", list(BIAS_PATTERNS))
def test_fused_attention_bias_broadcast_patterns(pattern):
    """Biases broadcast along every axis pattern (leading, H, Q, K) get correctly summed gradients."""
    g = torch.Generator().manual_seed(3)
    lead, H, Q, K, C = (2, 3), 2, 21, 17, 16
    q, k, v = (torch.randn(*lead, H, n, C, generator=g) for n in (Q, K, K))
    sizes = {"H": H, "Q": Q, "K": K}
    b0, b1 = (torch.randn(*[sizes.get(d, d) for d in shape], generator=g) for shape in BIAS_PATTERNS[pattern])
    d_out = torch.randn(*lead, H, Q, C, generator=g)
    dev = [t.to(_DEVICE) for t in (q, k, v)]
    got = _run_attention(
        "triton", *dev, [b0.to(_DEVICE), b1.to(_DEVICE)], [True, True], d_out.to(_DEVICE), torch.float32
    )
    ref = _run_attention(
        "reference", *dev, [b0.to(_DEVICE), b1.to(_DEVICE)], [True, True], d_out.to(_DEVICE), torch.float32
    )
    for name, a, r in zip(["out", "dq", "dk", "dv", "db0", "db1"], got, ref):
        torch.testing.assert_close(a, r, atol=2e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")


@needs_triton
def test_benchmarks_smoke(capsys):
    """The benchmark scripts run their --smoke configuration (tiny shape, interpreter on CPU)."""
    from benchmarks.kernels import bench_attention, bench_layer_norm

    bench_attention.main(["--smoke", "--impls", "triton,reference"])
    bench_layer_norm.main(["--smoke"])
    out = capsys.readouterr().out
    assert "device:" in out and "error" not in out and out.count("smoke") >= 5, out


@needs_triton
def test_fused_attention_validates_inputs():
    from alphafold_mem.kernels.fused_attention import fused_attention

    q = torch.randn(1, 2, 5, 8, device=_DEVICE)
    with pytest.raises(ValueError, match="head dims"):
        big = torch.randn(1, 2, 5, 80, device=_DEVICE)
        fused_attention(big, big, big)
    with pytest.raises(ValueError, match="at most two biases"):
        fused_attention(q, q, q, [torch.zeros(5, device=_DEVICE)] * 3)
    with pytest.raises(ValueError, match="does not broadcast"):
        fused_attention(q, q, q, [torch.zeros(1, 3, 5, 5, device=_DEVICE)])
    with pytest.raises(ValueError, match="dtypes differ"):
        fused_attention(q, q.bfloat16(), q)
    with pytest.raises(ValueError, match="leading dims"):
        fused_attention(q, torch.randn(1, 2, 5, 4, device=_DEVICE), q)


# ---------------------------------------------------------------------------------------------
# fused LayerNorm
# ---------------------------------------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("C", [24, 100, 384])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_layer_norm_matches_reference(C, dtype):
    g = torch.Generator().manual_seed(C)
    x = torch.randn(2, 5, 37, C, generator=g) * 2 + 0.5
    w, b = torch.randn(C, generator=g), torch.randn(C, generator=g)
    dy = torch.randn(2, 5, 37, C, generator=g)
    x, dy = x.to(dtype).to(_DEVICE), dy.to(dtype).to(_DEVICE)
    w, b = w.to(_DEVICE), b.to(_DEVICE)  # fp32 parameters, as under bf16 autocast

    def run(fn, dt, pdt):
        xs, ws, bs = _leaf(x, dt), _leaf(w, pdt), _leaf(b, pdt)
        y = fn(xs, ws, bs)
        y.backward(dy.to(dt))
        return [y.detach(), xs.grad, ws.grad, bs.grad]

    got = run(lambda *a: kernels.layer_norm(*a, eps=1e-5, impl="triton"), dtype, torch.float32)
    ref = run(lambda *a: kernels.layer_norm(*a, eps=1e-5, impl="reference"), dtype, torch.float32)
    oracle = run(lambda xs, ws, bs: F.layer_norm(xs, (C,), ws, bs, 1e-5), torch.float64, torch.float64)
    for name, a, r, o in zip(["y", "dx", "dw", "db"], got, ref, oracle):
        assert a.dtype == r.dtype and a.shape == r.shape
        err_k, err_r = _assert_close3(f"layer_norm C={C}/{name}", a, r, o, r.dtype if name in ("dw", "db") else dtype)
        print(
            f"layer_norm C={C:3d} {str(dtype)[6:]:8s} {name:3s} kernel-vs-fp64 {err_k:.2e}  torch-vs-fp64 {err_r:.2e}"
        )


@needs_triton
def test_fused_layer_norm_validates_inputs():
    from alphafold_mem.kernels.fused_layer_norm import fused_layer_norm

    x = torch.randn(3, 385, device=_DEVICE)
    with pytest.raises(ValueError, match="channels"):
        fused_layer_norm(x, torch.ones(385, device=_DEVICE), torch.zeros(385, device=_DEVICE))
    x = torch.randn(3, 8, device=_DEVICE)
    with pytest.raises(ValueError, match="weight"):
        fused_layer_norm(x, torch.ones(7, device=_DEVICE), torch.zeros(8, device=_DEVICE))


# ---------------------------------------------------------------------------------------------
# fallback: triton was imported (without the interpreter) before this module set TRITON_INTERPRET
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not _TRITON_PREIMPORTED, reason="triton was importable as configured: no rerun needed")
def test_triton_in_subprocess():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.abspath(__file__)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_add_bias_adds_in_place_only_when_the_sum_keeps_the_shape():
    """kernels.reference.add_bias (the attention cores' bias addition): into the logits buffer when the
    bias broadcasts to it without enlarging it, else a new tensor; the values of ``logits + bias`` both ways."""
    from alphafold_mem.kernels.reference import add_bias

    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4, 5)
    for shape in [(2, 3, 4, 5), (2, 1, 1, 5), (4, 5), (5,), (1, 1, 1, 1, 5), (2, 3, 4, 1)]:
        bias, fresh = torch.randn(shape), logits.clone()
        out = add_bias(fresh, bias)
        assert torch.equal(out, logits + bias)
        in_place = out.data_ptr() == fresh.data_ptr()
        assert in_place == (len(shape) <= 4 and out.shape == logits.shape), shape
    for shape in [(3, 2, 3, 4, 5), (7, 1, 1, 1, 1)]:  # the sum is larger than the logits: a new tensor
        bias, fresh = torch.randn(shape), logits.clone()
        out = add_bias(fresh, bias)
        assert out.shape == torch.broadcast_shapes(logits.shape, shape) and torch.equal(fresh, logits)
        assert torch.equal(out, logits + bias)
