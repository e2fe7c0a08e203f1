"""The device margins: what a device holds besides the model's tensors (CUDA: context, workspaces,
NCCL, allocator; CPU: the host library caches) is subtracted before the planner calls a policy "fits",
and ``memory-plan`` states the margin it used (line and JSON)."""

from __future__ import annotations

import json

import alphafold_mem.planner.chooser as chooser
from alphafold_mem.cli import main
from alphafold_mem.config import model_config
from alphafold_mem.memory.policy import MemoryPolicy
from alphafold_mem.planner import PeakEstimate, plan
from alphafold_mem.planner.margins import (
    ALLOCATOR_FRACTION,
    CUDA_CONTEXT_BYTES,
    HOST_LIBRARY_BYTES,
    NCCL_BUFFSIZE_DEFAULT,
    blas_workspace_bytes,
    device_margin,
    nccl_bytes,
)
from alphafold_mem.units import gib_value

MiB = 2**20


def test_host_caches_on_cpu_and_every_term_on_cuda():
    cpu = device_margin("cpu", 80 * 10**9, dap=8)
    assert cpu.total == cpu.host_caches == HOST_LIBRARY_BYTES > 0  # no CUDA term on CPU, whatever the DAP size
    gib = gib_value(HOST_LIBRARY_BYTES)
    assert cpu.describe() == f"{gib} GiB = host library caches {gib}"
    assert device_margin("meta", 80 * 10**9).total == 0
    m = device_margin("cuda", 80 * 10**9, environ={})
    assert m.context == CUDA_CONTEXT_BYTES and m.cudnn_workspace == 0 and m.nccl_buffers == 0
    assert m.blas_workspaces == 64 * MiB  # cuBLAS :4096:8 and cuBLASLt 32 MiB (compute capability 9.0)
    assert m.allocator == int(ALLOCATOR_FRACTION * 80 * 10**9)
    assert m.total == m.context + m.blas_workspaces + m.allocator and m.host_caches == 0
    assert device_margin("cuda", 80 * 10**9, context_included=True, environ={}).context == 0
    line = m.describe()
    assert line.startswith(f"{gib_value(m.total)} GiB = CUDA context") and "caching-allocator" in line


def test_library_workspaces_follow_the_environment_and_the_device():
    assert blas_workspace_bytes(80, {}) == (8 * MiB + 128 * 1024) + 4 * MiB  # PyTorch's defaults, sm_80
    assert blas_workspace_bytes(86, {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "CUBLASLT_WORKSPACE_SIZE": "1024"}) == (
        16 * 1024 * 8 + MiB
    )
    assert nccl_bytes(1, {}) == 0
    two, eight = nccl_bytes(2, {}), nccl_bytes(8, {})
    assert 0 < two < eight and eight % (2 * NCCL_BUFFSIZE_DEFAULT) == 0
    assert nccl_bytes(8, {"NCCL_BUFFSIZE": str(MiB)}) * 4 == eight
    assert device_margin("cuda", 10**10, dap=8, environ={}).nccl_buffers == eight


def _fake_estimates(monkeypatch, peak: int):
    def est(config, policy, *a, **k):
        return PeakEstimate(0, 0, peak, policy.chunk_size)

    monkeypatch.setattr(chooser, "estimate_breakdown", est)
    chooser._choose.cache_clear()


def test_fits_means_fits_after_the_margin(monkeypatch):
    """A policy whose peak is within the budget but not within the budget less the margin does not fit
    (CUDA's margin; on CPU the smaller host-cache margin, likewise)."""
    budget = 80 * 10**9
    margin = device_margin("cuda", budget).total
    _fake_estimates(monkeypatch, budget - margin // 2)
    request = MemoryPolicy.reference().replace(max_memory=budget)
    cfg = model_config("tiny")
    assert plan(request, cfg, (10, 2, 2, 0), "cpu").chosen is not None
    _fake_estimates(monkeypatch, budget - HOST_LIBRARY_BYTES // 2)
    on_cpu = plan(request, cfg, (10, 2, 2, 0), "cpu")
    assert on_cpu.chosen is None and on_cpu.budget == budget - HOST_LIBRARY_BYTES
    _fake_estimates(monkeypatch, budget - HOST_LIBRARY_BYTES)
    assert plan(request, cfg, (10, 2, 2, 0), "cpu").chosen is not None
    _fake_estimates(monkeypatch, budget - margin // 2)
    on_cuda = plan(request, cfg, (10, 2, 2, 0), "cuda")
    assert on_cuda.chosen is None and on_cuda.budget == budget - margin
    _fake_estimates(monkeypatch, budget - margin)
    assert plan(request, cfg, (10, 2, 2, 0), "cuda").chosen is not None


def test_memory_plan_states_its_margin(monkeypatch, capsys):
    """``--device cuda --max-memory 80GB --n-res 10000``: the margin line, and ``config.margin`` in --json."""
    _fake_estimates(monkeypatch, 10**9)
    argv = ["memory-plan", "--device", "cuda", "--max-memory", "80GB", "--n-res", "10000", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    margin = device_margin("cuda", 80 * 10**9)
    assert f"margin {margin.describe()}; usable {gib_value(80 * 10**9 - margin.total)} GiB of 74.5 GiB" in out
    assert main(argv + ["--json"]) == 0
    conf = json.loads(capsys.readouterr().out)["config"]
    assert conf["margin"] == margin.as_dict() and conf["usable_budget_bytes"] == 80 * 10**9 - margin.total
    assert conf["budget_bytes"] == 80 * 10**9
    assert main(argv[:-1] + ["--device", "cpu", "--json", "--no-progress"]) == 0
    cpu = json.loads(capsys.readouterr().out)["config"]
    assert cpu["margin"]["total"] == cpu["margin"]["host_caches"] == HOST_LIBRARY_BYTES
    assert cpu["usable_budget_bytes"] == 80 * 10**9 - HOST_LIBRARY_BYTES
