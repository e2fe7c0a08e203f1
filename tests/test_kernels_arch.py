"""Every architecture's launch configuration (kernels.launch_configs) in Triton's interpreter.

The configurations are only block sizes, warps and stages, so the interpreter runs exactly the tiles a
GPU of that architecture runs (:func:`kernels._triton_support.target_arch`); each distinct
configuration gets one small case per op, at sizes that cross a block boundary, with the three-way
tolerance of tests/kernel_checks.py against the reference and an fp64 oracle (outputs and gradients).
The triangle multiplication's entries for narrow pair channels (c_z <= NARROW_C_Z) run at c_z = 8.
"""

from __future__ import annotations

import pytest
import torch

from alphafold_mem import kernels
from alphafold_mem.kernels import TriangleMultiplicationWeights, _triton_support, launch_configs
from tests.kernel_checks import DEVICE, assert_close3, leaf, needs_triton, run_triangle, triangle_inputs  # noqa: I001 (sets TRITON_INTERPRET)


def _distinct(config, dot_bits):
    """One architecture per distinct configuration (identical tables need not run twice)."""
    seen, out = [], []
    for arch in launch_configs.ARCHS:
        cfg = config(arch, dot_bits)
        if cfg not in seen:
            seen.append(cfg)
            out.append(arch)
    return out


ATTENTION_ARCHS = [(a, torch.bfloat16) for a in _distinct(launch_configs.attention_config, 16)] + [
    (a, torch.float32) for a in _distinct(launch_configs.attention_config, 32)
]


def _triangle_cases():
    """(arch, dtype, c_z) per distinct triangle configuration: the general entries at c_z None (the test
    picks one), the narrow ones (c_z <= NARROW_C_Z) at c_z = 8."""
    out = []
    for dtype, bits in ((torch.bfloat16, 16), (torch.float32, 32)):
        seen = []
        for arch in launch_configs.ARCHS:
            for cz in (None, 8):
                cfg = launch_configs.triangle_config(arch, bits, cz)
                if cfg not in seen:
                    seen.append(cfg)
                    out.append((arch, dtype, cz))
    return out


TRIANGLE_CASES = _triangle_cases()


def test_every_listed_architecture_has_a_configuration_within_its_limits():
    for arch in launch_configs.ARCHS:
        assert arch in launch_configs.SHARED_MEMORY_LIMIT
        for bits in (16, 32):
            att = launch_configs.attention_config(arch, bits)
            assert all(min(att[k]) >= 16 for k in ("fwd", "dq", "dkdv", "dbias"))  # tl.dot's smallest tile
            tri = launch_configs.triangle_config(arch, bits)
            assert min(tri[k] for k in "ijkh") >= 16
            narrow = launch_configs.triangle_config(arch, bits, launch_configs.NARROW_C_Z)
            assert set(narrow) == set(tri) and min(narrow[k] for k in "ijkh") >= 16
            assert launch_configs.triangle_config(arch, bits, launch_configs.NARROW_C_Z + 1) == tri
    # the interpreter's tiles do not depend on the channels
    for bits in (16, 32):
        assert launch_configs.triangle_config(None, bits, 8) == launch_configs.triangle_config(None, bits)
    # unlisted capabilities: the largest listed one below, else the smallest-shared-memory table
    assert launch_configs.config_arch(87) == 86 and launch_configs.config_arch(100) == 90
    assert launch_configs.config_arch(75) == 86 and launch_configs.config_arch(None) is None
    with pytest.raises(ValueError, match="16 or 32"):
        launch_configs.attention_config(80, 8)


def test_target_arch_selects_the_table_and_restores():
    assert _triton_support.launch_arch() is None  # the interpreter (no GPU here)
    with _triton_support.target_arch(86):
        assert _triton_support.launch_arch() == 86
        with _triton_support.target_arch(90):
            assert _triton_support.launch_arch() == 90
        assert _triton_support.launch_arch() == 86
    assert _triton_support.launch_arch() is None


def _attention(impl, q, k, v, mask_bias, pair_bias, d_out, dtype):
    qkv = [leaf(t, dtype) for t in (q, k, v)]
    pair = leaf(pair_bias, dtype)
    out = kernels.attention(*qkv, [mask_bias.to(dtype), pair], impl=impl)
    out.backward(d_out.to(dtype))
    return [out.detach()] + [t.grad for t in qkv] + [pair.grad]


@needs_triton
@pytest.mark.parametrize("arch,dtype", ATTENTION_ARCHS, ids=lambda x: str(x).removeprefix("torch."))
def test_fused_attention_at_architecture_config(arch, dtype):
    cfg = launch_configs.attention_config(arch, 32 if dtype == torch.float32 else 16)
    n = max(max(cfg[k]) for k in ("fwd", "dq", "dkdv", "dbias")) + 5  # crosses every kernel's blocks
    g = torch.Generator().manual_seed(3)
    lead, h, c = (1, 2), 2, 16
    q = torch.randn(*lead, h, n, c, generator=g) * c**-0.5
    k, v = torch.randn(*lead, h, n, c, generator=g), torch.randn(*lead, h, n, c, generator=g)
    mask = (torch.rand(*lead, 1, 1, n, generator=g) > 0.3).float()
    mask_bias = (mask - 1.0) * 1e9
    pair_bias = torch.randn(lead[0], 1, h, n, n, generator=g)
    d_out = torch.randn(*lead, h, n, c, generator=g)
    args = [t.to(DEVICE) for t in (q, k, v, mask_bias, pair_bias, d_out)]
    with _triton_support.target_arch(arch):
        got = _attention("triton", *args, dtype)
    ref = _attention("reference", *args, dtype)
    oracle = _attention("reference", *args, torch.float64)
    for name, a, r, o in zip(["out", "dq", "dk", "dv", "dpair"], got, ref, oracle):
        assert a.dtype == dtype and a.shape == o.shape
        assert_close3(f"sm_{arch}/{name}", a, r, o, dtype)


@needs_triton
@pytest.mark.parametrize("arch,dtype,narrow_cz", TRIANGLE_CASES, ids=lambda x: str(x).removeprefix("torch."))
def test_fused_triangle_multiplication_at_architecture_config(arch, dtype, narrow_cz):
    cfg = launch_configs.triangle_config(arch, 32 if dtype == torch.float32 else 16, narrow_cz)
    n = max(cfg[k] for k in "ijk") + 1  # a tail of 1 in i, j, k and the rows (the interpreter's cost ~ N*N)
    # cross the c_z chunks and the hidden-channel blocks (c_hidden = 20: the kernels' alignment at 4);
    # a narrow entry at c_z = 8 (one chunk, half of it padding; alignment at 8)
    cz, ch = narrow_cz or cfg["c"] + 4, max(20, cfg["h"] + 4)
    z, mask, weights, d_out = triangle_inputs((1,), n, cz, ch)
    with _triton_support.target_arch(arch):
        got = run_triangle("triton", z, mask, weights, d_out, True, dtype)
    ref = run_triangle("reference", z, mask, weights, d_out, True, dtype)
    oracle = run_triangle("reference", z, mask, weights, d_out, True, torch.float64)
    names = ["out", "dz"] + list(TriangleMultiplicationWeights._fields)
    for name, a, r, o in zip(names, got, ref, oracle):
        assert a.dtype == dtype and a.shape == o.shape
        assert_close3(f"sm_{arch}/{name}", a, r, o, dtype)
