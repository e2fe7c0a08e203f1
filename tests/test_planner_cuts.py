"""The planner's speed cuts keep its answers: the plan tracker counts what the storage tracker counts,
one traced block per stack (corrected for the second block) equals tracing the stacks, the DAP
estimator's cut collectives equal the uncut ones, and a trace stopped at the budget decides "fits"
exactly as the full estimate does (its total a lower bound above the budget)."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

import alphafold_mem.planner.estimate as estimate_mod
from alphafold_mem.cli import main
from alphafold_mem.config import apply_overrides, model_config
from alphafold_mem.memory.policy import MemoryPolicy
from alphafold_mem.memory.tracking import StorageTracker
from alphafold_mem.planner import cache, choose, estimate_breakdown, policy_candidates
from alphafold_mem.planner.estimate import _activation_peak

# tiny model with stacks long enough for the second block to matter
CFG = model_config("tiny", num_recycles=0, **{"evoformer.num_blocks": 3, "extra_msa.num_blocks": 2})
SIZES = (29, 7, 19, 2)


class _BaseTracker(StorageTracker):
    """The storage tracker of alphafold_mem.memory.tracking, with the plan tracker's constructor."""

    def __init__(self, limit=None):
        super().__init__()
        self.corrected_peak = 0


@pytest.mark.parametrize(
    "policy,device,dap",
    [
        (MemoryPolicy.reference(), "cpu", 1),
        (MemoryPolicy.low_memory_inference(chunk_size=4, offload="buffers", precision="bf16-full"), "cuda", 1),
        (MemoryPolicy.low_memory_inference(chunk_size=8), "cuda", 3),
    ],
    ids=["reference", "buffers-bf16-full", "dap3"],
)
def test_plan_tracker_counts_what_the_storage_tracker_counts(monkeypatch, policy, device, dap):
    args = (*SIZES, False, torch.float32, device)
    cut = apply_overrides(CFG, {"evoformer.num_blocks": 1, "extra_msa.num_blocks": 1})
    fast = _activation_peak(cut, policy, *args, dap=dap)
    monkeypatch.setattr(estimate_mod, "PlanTracker", _BaseTracker)
    base = _activation_peak(cut, policy, *args, dap=dap)
    assert fast == base and fast[1] > 0


@pytest.mark.parametrize(
    "policy,device,dap,sizes",
    [
        # not in place, the extra-MSA stack setting the peak: block two holds block one's inputs too
        (MemoryPolicy.reference().replace(chunk_size=4), "cpu", 1, (29, 7, 200, 2)),
        (MemoryPolicy.low_memory_inference(chunk_size=4, offload="idle"), "cuda", 1, SIZES),
        (MemoryPolicy.low_memory_inference(chunk_size=4, precision="bf16-full"), "cuda", 4, SIZES),
    ],
    ids=["not-in-place", "in-place-idle", "dap4-bf16-full"],
)
def test_one_block_per_stack_equals_tracing_the_stacks(policy, device, dap, sizes):
    """Inference traces one block per stack and adds the second block's growth: the answer equals a
    trace of every block (loops cut as in every estimate)."""
    key = (CFG, policy, *sizes, False, torch.float32, True, device, False, dap)
    fast = estimate_mod._trace(*key)
    args = (*sizes, False, torch.float32, device)
    _, stacks, host, _ = _activation_peak(CFG, policy, *args, dap=dap)  # every block, loops cut
    assert fast.activations == stacks and fast.host == host, (fast, stacks, host)
    assert not fast.lower_bound
    if not policy.inplace:  # the correction is what makes them equal: one block alone peaks lower
        one = apply_overrides(CFG, {"evoformer.num_blocks": 1, "extra_msa.num_blocks": 1})
        assert _activation_peak(one, policy, *args, dap=dap)[1] < stacks


def test_a_trace_stopped_at_the_limit_decides_fits_exactly(monkeypatch):
    """Below the exact peak: a lower bound above the limit (and not above the peak); at or above it:
    the exact estimate. Known peaks are served from the cache whatever the limit."""
    policy = MemoryPolicy.reference()
    args = (CFG, policy, 31, 5, 17, 1)
    monkeypatch.setenv(cache.CACHE_ENV, "off")  # every estimate below traced or kept in this process
    cache.forget()
    exact_total = estimate_breakdown(*args, limit=10**12).total  # far above: runs to the end, exact
    cache.forget()
    for limit in (exact_total // 3, exact_total - 1):
        low = estimate_breakdown(*args, limit=limit)
        assert low.lower_bound and limit < low.total <= exact_total, (limit, low, exact_total)
    exact = estimate_breakdown(*args, limit=exact_total)
    assert not exact.lower_bound and exact.total == exact_total
    assert estimate_breakdown(*args, limit=1) is exact  # cached exact estimate


def test_choose_with_stopped_traces_picks_what_full_estimates_pick():
    """The ladder searched with traces stopped at the budget recommends the same candidate as the
    ladder evaluated exactly, for budgets around the candidates' peaks."""
    n_res, n_seq, n_extra, n_templ = 40, 5, 17, 1
    ladder = policy_candidates(False, "fp32", n_res, device="cuda")
    full = choose(CFG, n_res, n_seq, n_extra, n_templ, 10**12, ladder, device="cuda", evaluate_all=True)
    peaks = sorted({r.estimate.total for r in full.rows})
    budgets = [peaks[0] - 1, peaks[0], (peaks[0] + peaks[-1]) // 2, peaks[-1] - 1, peaks[-1]]
    for budget in budgets:
        exact = choose(CFG, n_res, n_seq, n_extra, n_templ, budget, ladder, device="cuda", evaluate_all=True)
        fast = choose(CFG, n_res, n_seq, n_extra, n_templ, budget, ladder, device="cuda", frugal_last=True)
        label = None if exact.chosen is None else exact.chosen.candidate.label
        assert (None if fast.chosen is None else fast.chosen.candidate.label) == label, budget
        for row in fast.rows:
            assert row.fits == (not row.estimate.lower_bound and row.estimate.total <= budget)
            if row.estimate.lower_bound:
                assert budget < row.estimate.total


def test_memory_plan_marks_lower_bounds(capsys, monkeypatch):
    """Rows whose estimate stopped past the budget show '>' in the table and ``peak_lower_bound`` in
    --json; --all estimates every row exactly."""
    args = ["memory-plan", "--preset", "tiny", "--n-res", "40", "--n-seq", "5", "--n-extra", "17", "--no-progress"]
    args += ["--device", "cpu", "--precision", "fp32"]
    monkeypatch.setenv(cache.CACHE_ENV, "off")  # peaks known exactly are served as such: none on disk
    plan = json.loads(_run(capsys, args + ["--max-memory", "1GB", "--json", "--all"]))
    smallest = min(r["peak_bytes"] for r in plan["rows"])
    budget = str(smallest + 1 + plan["config"]["margin"]["total"])  # the trace's budget is what the margin leaves
    cache.forget()  # peaks known exactly are served as such: forget them
    plan = json.loads(_run(capsys, args + ["--max-memory", budget, "--json"]))
    usable = plan["config"]["usable_budget_bytes"]
    assert usable == smallest + 1
    bounded = [r for r in plan["rows"] if r["peak_lower_bound"]]
    assert bounded and all(not r["fits"] and r["peak_bytes"] > usable for r in bounded)
    cache.forget()
    table = _run(capsys, args + ["--max-memory", budget])
    assert ">" in table and "--all for every peak" in table
    exact = json.loads(_run(capsys, args + ["--max-memory", budget, "--json", "--all"]))
    assert not any(r["peak_lower_bound"] for r in exact["rows"])


def _run(capsys, argv: list[str]) -> str:
    main(argv)
    return capsys.readouterr().out


@pytest.mark.parametrize("split_dim,cat_dim", [(0, 1), (1, 0)], ids=["contiguous-pieces", "strided-pieces"])
def test_estimated_all_to_all_allocates_what_the_exchange_does(split_dim, cat_dim):
    """Under the estimator's cut the all-to-all of a simulated group makes one send and one receive
    allocation per slice (two slices) instead of P pieces each: the tracked peak equals the uncut one."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from alphafold_mem.distributed.comm import all_to_all, simulated_group
    from alphafold_mem.memory.chunking import first_chunk_only

    peaks = []
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.ones(38, 36, 24)  # 38 rows: padded to 40 for 4 devices; 24 channels: 8 slices
        for cut in (False, True):
            tracker = StorageTracker()
            with torch.inference_mode(), first_chunk_only() if cut else contextlib.nullcontext(), tracker:
                out = all_to_all(x, split_dim, cat_dim, simulated_group(4))
            assert out.shape[split_dim] == -(-x.shape[split_dim] // 4) and out.shape[cat_dim] == 4 * x.shape[cat_dim]
            peaks.append(tracker.peak)
    assert peaks[0] == peaks[1] > 0, peaks


def test_dap_estimate_with_cuts_is_close_to_the_full_trace():
    """The DAP estimate (one block per stack, loops and collectives cut) against tracing every block,
    loop and piece of a simulated group of 3 (the loop cut's tolerance, 2 %)."""
    policy = MemoryPolicy.low_memory_inference(chunk_size=4, offload="none")
    # two Evoformer blocks: the second block (the one the cut estimate corrects for) is still traced,
    # a third would only lengthen the full trace
    args = (apply_overrides(CFG, {"evoformer.num_blocks": 2}), policy, *SIZES)
    fast = estimate_breakdown(*args, device="cuda", dap=3)
    full = estimate_breakdown(*args, device="cuda", dap=3, full_trace=True)
    assert abs(fast.activations - full.activations) <= 0.02 * full.activations, (fast, full)


def test_the_parser_does_not_load_the_ablation_package():
    """Building the command line (every command, memory-plan's included) imports no Lightning: the
    ablate subcommand names the runner's sections without importing the runner."""
    import subprocess
    import sys

    code = (
        "import sys; from alphafold_mem.cli.main import build_parser; build_parser(); "
        "print('lightning' in sys.modules, 'alphafold_mem.ablation' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"], out
    from alphafold_mem.ablation.runner import SECTIONS
    from alphafold_mem.cli.ablate import SECTIONS as CLI_SECTIONS

    assert CLI_SECTIONS == SECTIONS
