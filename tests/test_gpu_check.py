"""scripts/gpu_check.py without a GPU: it exits 0 saying so, and its dry mode (the same code path in
Triton's interpreter at tiny sizes) runs every section end to end and writes the JSON and Markdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _run(*args: str, timeout: float = 3000) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ALPHAFOLD_MEM_GPU_CHECK_DRY")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: the check would run")
def test_without_cuda_exits_zero_saying_so(tmp_path, capsys, monkeypatch):
    """In this process (the script's ``main``, what ``sys.exit`` returns): a fresh interpreter costs
    ~5 s CPU, and the script returns before it imports anything the test session has not."""
    import importlib.util

    monkeypatch.delenv("ALPHAFOLD_MEM_GPU_CHECK_DRY", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the repository first
    spec = importlib.util.spec_from_file_location("gpu_check_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "--dry" in out
    assert not (tmp_path / "out").exists()


def test_dry_run_end_to_end(tmp_path):
    """Every section, and what each one checks. The kernel-test section runs tests/test_kernels_cuda.py in
    the interpreter, so this is also the suite's model-level Triton check: the tiny model with
    ``kernels="triton"`` against the reference policy, outputs and parameter gradients
    (``test_model_compiled_matches_reference``; no second copy runs in-process). The launch section runs
    scripts/aot_compile.py's launch table (tiny preset and sizes, sm_80's launch configuration): every op
    call launches exactly the recorded kernels (checked here rather than in a second, launches-only run)."""
    out = tmp_path / "out"
    res = _run(str(out), "--dry", "--budget-s", "3000")  # a loaded 2-core machine: no section may time out
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert (out / "gpu_check.md").read_text() in res.stdout
    tests = report["kernel_tests"]
    assert tests["status"] == "passed", tests
    names = {t["test"].split("[")[0] for t in tests["tests"]}
    assert names == {
        "test_attention_compiled",
        "test_triangle_multiplication_compiled",
        "test_layer_norm_compiled",
        "test_model_compiled_matches_reference",
    }
    assert all(t["outcome"] == "passed" for t in tests["tests"]), tests["tests"]
    for kernel in ("attention", "triangle_multiplication", "layer_norm"):
        rows = report["benchmarks"][kernel]
        assert {"triton", "reference"} <= {r["impl"] for r in rows}
        assert all(r["error"] is None and r["fwd_ms"] > 0 for r in rows), rows
    mem = report["model_memory"]
    assert {r["mode"] for r in mem} == {"inference", "training step"}
    assert any("triton" in r["policy"] for r in mem)
    assert all(r["error"] is None and r["peak_bytes"] > 0 and r["predicted_bytes"] > 0 for r in mem), mem
    table = report["launch_table"]
    assert table["arch"] == 80 and table["rows"]
    assert {r["op"] for r in table["rows"]} == {"attention", "triangle_multiplication", "layer_norm"}
    for r in table["rows"]:
        assert r["error"] is None and r["same_as_table"] is True and r["launches"] >= 1, r
        assert r["triton_ms"] > 0 and r["reference_ms"] > 0, r


def test_benchmark_peak_on_cpu_is_none_without_a_run():
    """On CPU there is no peak to read: :func:`peak_mib` returns None without running the call (a third
    run of each benchmark row in the interpreter, 40 % of the dry run's benchmark section)."""
    from benchmarks.kernels._common import measure

    calls = []
    fwd_ms, bwd_ms, peak = measure(lambda: calls.append("fwd"), lambda: calls.append("all"), torch.device("cpu"), 0, 1)
    assert calls == ["fwd", "all"] and peak is None and fwd_ms >= 0
