"""scripts/aot_compile.py: the launch table is recorded from the launchers without launching, the
limit check fails an oversized configuration, and (slow) a representative subset (CI_SUBSET on every
listed architecture, CI_TRIANGLE on sm_86, CI_TRIANGLE_SMALL at the test presets' channel counts)
compiles within the limits with Triton's bundled ptxas (the full table: the script itself, ``python
scripts/aot_compile.py --arch 80 86 90``; docs/kernels.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.kernel_checks import needs_triton  # noqa: F401 (sets TRITON_INTERPRET)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "aot_compile.py"
sys.path.insert(0, str(ROOT / "scripts"))

import aot_compile  # noqa: E402

#: the CI subset (tests/conftest.py SLOW_TESTS): model_1's sizes, bf16 and fp32, the attention
#: forward and dk/dv backward (the largest attention tiles) and the LayerNorm kernels, every arch
CI_SUBSET = ("attn_fwd_kernel", "attn_bwd_dkdv_kernel", "_ln_fwd_kernel", "_ln_bwd_kernel")
#: and the triangle multiplication's two heaviest kernels (the contraction, the projection backward;
#: most registers) for sm_86, whose shared memory per block is the smallest, in bf16 (no spill allowed)
CI_TRIANGLE = ("tri_fwd_kernel", "tri_bwd_proj_kernel")
#: and at the presets tiny and demo (c_z = 8, 16, 32), bf16, on sm_80 and sm_90: the kernels that spilled
#: there before the channel alignment hints and the narrow-channel launch configuration
CI_TRIANGLE_SMALL = ("tri_fwd_kernel", "tri_bwd_proj_kernel", "tri_bwd_out_kernel")


def _script(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@needs_triton
def test_launch_table_records_every_kernel_without_launching():
    table = aot_compile.launch_table(80, ("tiny",), (torch.float32, torch.bfloat16), aot_compile.DRY_SIZES)
    names = {r.launch.name for r in table}
    assert names == {
        "attn_fwd_kernel",
        "attn_bwd_dq_kernel",
        "attn_bwd_dkdv_kernel",
        "attn_bwd_dbias_kernel",
        "tri_fwd_kernel",
        "tri_fwd_out_kernel",
        "tri_bwd_out_weights_kernel",
        "tri_bwd_out_kernel",
        "tri_bwd_proj_kernel",
        "_ln_fwd_kernel",
        "_ln_bwd_kernel",
    }
    by_case: dict = {}
    for r in table:
        by_case.setdefault(r.case.variant, []).append(r.launch.name)
    # the launchers' own counts: triangle 3 forward (x in one slab) + 5 backward; attention 1 + (2 + shared pair bias)
    from alphafold_mem.kernels.fused_triangle import launch_counts

    for variant, launched in by_case.items():
        if variant.startswith("pair "):
            assert len(launched) == launch_counts["forward"] + launch_counts["backward"] == 8, (variant, launched)
        if variant.startswith("msa_row") and "no-grad" not in variant:
            assert launched[-1] == "attn_bwd_dbias_kernel" and len(launched) == 4
        if "no-grad" in variant:
            assert launched == ["attn_fwd_kernel"]
    assert any("incoming" in v for v in by_case) and any("outgoing" in v for v in by_case)
    assert {r.case.dtype for r in table} == {torch.float32, torch.bfloat16}
    # the blocks recorded are the table's for that architecture
    fwd = next(r.launch for r in table if r.launch.name == "attn_fwd_kernel" and r.case.dtype == torch.bfloat16)
    from alphafold_mem.kernels.launch_configs import attention_config

    assert (fwd.kwargs["BLOCK_Q"], fwd.kwargs["BLOCK_K"]) == attention_config(80, 16)["fwd"]


@needs_triton
def test_small_channel_launches_carry_their_alignment_and_narrow_tiles():
    """c_z = c_hidden = 8 (preset tiny): every triangle launch passes the channels' power-of-two divisor
    (8; Triton's own specialisation only knows multiples of 16), and on sm_90 in bf16 the narrow entry's
    rows of kernels.launch_configs."""
    from alphafold_mem.kernels.launch_configs import triangle_config

    table = aot_compile.launch_table(90, ("tiny",), (torch.bfloat16,), aot_compile.DRY_SIZES)
    tri = [r.launch for r in table if r.launch.name.startswith("tri_")]
    assert len({la.name for la in tri}) == 5 and all(la.kwargs["ALIGN_Z"] == la.kwargs["ALIGN_H"] == 8 for la in tri)
    rows = {la.kwargs["BLOCK_R"] for la in tri if "BLOCK_R" in la.kwargs}
    assert rows == {triangle_config(90, 16, 8)["rows"]} and rows != {triangle_config(90, 16)["rows"]}
    wide = aot_compile.launch_table(90, ("model_1",), (torch.bfloat16,), aot_compile.DRY_SIZES)
    assert {r.launch.kwargs.get("ALIGN_Z") for r in wide if r.launch.name.startswith("tri_")} == {16}


def test_check_marks_limits():
    row = dict(error=None, registers=255, spill_bytes=0, shared_bytes=166_913)
    assert not aot_compile.check(dict(row), 80, "bf16")["ok"]
    assert aot_compile.check(dict(row, shared_bytes=166_912), 80, "bf16")["ok"]
    assert not aot_compile.check(dict(row, shared_bytes=101_377), 86, "bf16")["ok"]
    assert aot_compile.check(dict(row, shared_bytes=200_000), 90, "bf16")["ok"]
    spill = dict(row, shared_bytes=1024, spill_bytes=8)
    assert not aot_compile.check(dict(spill), 80, "bf16")["ok"] and aot_compile.check(dict(spill), 80, "fp32")["ok"]
    assert not aot_compile.check(dict(spill, spill_bytes=257), 80, "fp32")["ok"]
    failed = aot_compile.check(dict(row, error="PTXASError: x"), 80, "fp32")
    assert not failed["ok"] and failed["error"] == "PTXASError: x"


_OVERSIZED = """
import json, sys
sys.path.insert(0, {scripts!r})
import os
os.environ["TRITON_INTERPRET"] = "0"
import aot_compile
from alphafold_mem.kernels import launch_configs
reason = aot_compile.private_helpers_reason()
if reason:
    print(json.dumps({{"skip": reason}})); sys.exit(0)
# a deliberately oversized forward tile: 1024 keys per block, 3 stages (its K and V tiles alone exceed
# sm_86's shared memory); one launch, the first forward of the table (the MSA row attention), compiled
import torch
launch_configs._ATTENTION[(86, "16")] = dict(launch_configs._ATTENTION[(86, "16")], fwd=(16, 1024), num_stages=3)
os.environ["TRITON_CACHE_DIR"] = {cache!r}
table = aot_compile.launch_table(86, ("model_1",), (torch.bfloat16,))
launch = next(r.launch for r in table if r.launch.name == "attn_fwd_kernel")
row = dict(kernel=launch.name, arch=86, **aot_compile.compile_launch(launch, 86))
print(json.dumps({{"rows": [aot_compile.check(row, 86, "bf16")]}}))
"""


#: The two ptxas compile tests run when ALPHAFOLD_MEM_AOT=1 (CPU-heavy: ptxas on every launch of the subset;
#: ``python scripts/aot_compile.py`` runs the full table). The oversized check compiles one launch whose tile
#: overflows shared memory (a tile that overflows registers instead makes ptxas run for many minutes).
needs_aot = pytest.mark.skipif(
    os.environ.get("ALPHAFOLD_MEM_AOT") != "1", reason="set ALPHAFOLD_MEM_AOT=1 to compile with ptxas"
)


@needs_aot
def test_oversized_configuration_fails_the_check(tmp_path):
    code = _OVERSIZED.format(scripts=str(ROOT / "scripts"), cache=str(tmp_path / "cache"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    rows = out["rows"]
    assert rows and all(r["kernel"] == "attn_fwd_kernel" and r["arch"] == 86 for r in rows)
    assert not any(r["ok"] for r in rows), rows
    assert all(("spills" in r["error"]) or ("shared memory" in r["error"]) for r in rows), rows


@needs_aot
def test_representative_subset_compiles_within_every_architecture(tmp_path):
    out = tmp_path / "aot.json"
    res = _script("--arch", "80", "86", "90", "--presets", "model_1", "--json", str(out), "--only", *CI_SUBSET)
    if res.returncode == 2 and "skipped" in res.stderr:
        pytest.skip(res.stderr.strip())
    result = json.loads(out.read_text())
    assert result["triton"] and result["rows"]
    rows = result["rows"]
    assert {r["arch"] for r in rows} == {80, 86, 90} and {r["dtype"] for r in rows} == {"fp32", "bf16"}
    assert {r["kernel"] for r in rows} == set(CI_SUBSET)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)
    assert res.returncode == 0, res.stderr[-2000:]
    out = tmp_path / "aot_triangle.json"
    args = ("--arch", "86", "--presets", "model_1", "--dtypes", "bfloat16", "--json", str(out), "--only", *CI_TRIANGLE)
    res = _script(*args)
    triangle = json.loads(out.read_text())["rows"]
    assert {r["kernel"] for r in triangle} == set(CI_TRIANGLE) and {r["arch"] for r in triangle} == {86}
    assert not [r for r in triangle if not r["ok"]], json.dumps(triangle, indent=1)
    assert res.returncode == 0, res.stderr[-2000:]
    out = tmp_path / "aot_triangle_small.json"
    args = ("--arch", "80", "90", "--presets", "tiny", "demo", "--dtypes", "bfloat16", "--json", str(out))
    res = _script(*args, "--only", *CI_TRIANGLE_SMALL)
    small = json.loads(out.read_text())["rows"]
    assert {r["kernel"] for r in small} == set(CI_TRIANGLE_SMALL) and {r["arch"] for r in small} == {80, 90}
    assert not [r for r in small if not r["ok"]], json.dumps(small, indent=1)
    assert res.returncode == 0, res.stderr[-2000:]
    triangle += small
    for r in rows + triangle:
        assert r["shared_bytes"] <= r["shared_limit_bytes"]
        assert r["spill_bytes"] <= (256 if r["dtype"] == "fp32" else 0)
        assert r["registers"] > 0
