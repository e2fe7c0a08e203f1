"""Peak-memory measurement (track_peak), prediction (estimate_peak under FakeTensorMode),
chunk_size="auto" and the memory-plan CLI."""

import contextlib

import pytest
import torch

from alphafold_mem import AlphaFold, AutoPolicy, MemoryPolicy, bind, model_config
from alphafold_mem.memory import track_peak
from alphafold_mem.planner import (
    InsufficientMemoryWarning,
    PeakEstimate,
    batch_sizes,
    choose,
    chunk_candidates,
    estimate_breakdown,
    policy_candidates,
    resolve_policy,
)
from alphafold_mem.planner.estimate import parameter_bytes
from alphafold_mem.planner.margins import HOST_LIBRARY_BYTES as M  # the CPU margin plan() takes off a budget
from alphafold_mem.planner.training_loss import ground_truth_batch, training_loss
from alphafold_mem.testing import random_features

N_RES, N_SEQ, N_EXTRA, N_TEMPL = 23, 6, 10, 1


def test_track_peak_counts_live_storages_once():
    keep = torch.zeros(1000)  # made before the context: not counted
    with track_peak() as mem:
        a = torch.empty(1024, dtype=torch.float32)  # 4 KiB
        b = torch.empty(2048, dtype=torch.float32)  # 8 KiB
        a.view(32, 32).add_(1.0)  # views / in-place results add nothing
        keep.view(10, 100)  # nor does a view of an older tensor
        del a, b
        c = torch.empty(256, dtype=torch.float64)  # 2 KiB, after the 12 KiB peak
        del c
    assert mem.peak == 4096 + 8192


@pytest.fixture(scope="module")
def tiny():
    cfg = model_config("tiny", num_recycles=0)
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval()
    return cfg, model, random_features(cfg, N_RES, N_SEQ, N_EXTRA, n_templ=N_TEMPL)


@pytest.mark.parametrize(
    "policy,training",
    [
        (MemoryPolicy.reference(), False),
        (MemoryPolicy.low_memory_inference(chunk_size=4), False),
        (MemoryPolicy.low_memory_inference(chunk_size=4, precision="bf16-full"), False),
        (MemoryPolicy.training(), True),
        (MemoryPolicy.training(outer_product="recompute"), True),
        (MemoryPolicy(outer_product="recompute"), False),
    ],
    ids=[
        "reference-inference",
        "low-memory-inference",
        "low-memory-bf16-full",
        "training",
        "training-outer-recompute",
        "outer-recompute-inference",
    ],
)
def test_estimate_within_5_percent_of_measured(tiny, policy, training):
    cfg, model, batch = tiny
    bind(model, policy)
    model.zero_grad(set_to_none=True)
    if training:  # the real AF2 loss, as the estimate runs it
        batch = {**batch, **ground_truth_batch(cfg, N_RES, N_SEQ)}
    grad = torch.enable_grad() if training else torch.inference_mode()
    with grad, track_peak() as mem:
        out = model(batch)
        if training:
            training_loss(cfg, out, batch).backward()
        del out
    bind(model, MemoryPolicy.reference())
    est = estimate_breakdown(cfg, policy, N_RES, N_SEQ, N_EXTRA, N_TEMPL, training=training)
    assert abs(est.activations - mem.peak) <= 0.05 * mem.peak, (est.activations, mem.peak)
    assert est.parameters == sum(p.numel() * 4 for p in model.parameters())
    assert est.total == est.parameters + est.inputs + est.activations


@pytest.mark.parametrize(
    "policy,device",
    [
        (MemoryPolicy.reference(), "cpu"),
        (MemoryPolicy.low_memory_inference(chunk_size=4), "cpu"),
        (MemoryPolicy.low_memory_inference(chunk_size=4, offload="idle"), "cuda"),
        (MemoryPolicy.low_memory_inference(chunk_size=8, precision="bf16-full"), "cuda"),
        (MemoryPolicy(outer_product="recompute"), "cpu"),
    ],
    ids=["reference", "low-memory-cpu", "idle-offload-accelerator", "buffers-offload-bf16-full", "outer-recompute"],
)
def test_fast_estimate_equals_full_trace(policy, device):
    """The shortcuts (one or two blocks per stack, two iterations of every loop, two templates, the
    structure module's last layer) change the prediction by < 2 % against tracing everything; 4
    templates, 3 Evoformer blocks, several chunks per op (21 residues: six chunks of 4, three of 8,
    each with a tail)."""
    cfg = model_config("tiny", num_recycles=0, **{"evoformer.num_blocks": 3, "template.pair_stack.num_blocks": 2})
    args = (cfg, policy, 21, 7, 19, 4)
    fast = estimate_breakdown(*args, device=device)
    full = estimate_breakdown(*args, device=device, full_trace=True)
    assert abs(fast.activations - full.activations) <= 0.02 * full.activations, (fast, full)
    assert full.host == fast.host


def test_streamed_buffer_cut_puts_no_pair_sized_block_on_the_device():
    """Under the loop cut the in-place triangle multiplication computes two of its buffer's host
    blocks and counts the rest as host bytes, without a device allocation: its simulated device
    peak equals the full loop's and stays below the bytes of z (the buffer, as large as z, is all in
    host memory)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from alphafold_mem.memory.chunking import first_chunk_only
    from alphafold_mem.memory.offload import simulated_device
    from alphafold_mem.memory.tracking import StorageTracker
    from alphafold_mem.model.triangle import TriangleMultiplication

    peaks = {}
    modules = [TriangleMultiplication(64, 64, outgoing=outgoing) for outgoing in (True, False)]
    with FakeTensorMode(allow_non_fake_inputs=True):
        for tm in modules:
            outgoing = tm.outgoing
            tm.chunk_size, tm.offload = 16, "buffers"
            z, mask = torch.ones(160, 160, 64), torch.ones(160, 160)
            for cut in (True, False):
                tracker = StorageTracker()
                with (
                    torch.inference_mode(),
                    first_chunk_only() if cut else contextlib.nullcontext(),
                    simulated_device(tracker),
                    tracker,
                ):
                    tm.add_to_(z, z, mask)
                peaks[outgoing, cut] = (tracker.peak, tracker.host_peak)
    z_bytes = 160 * 160 * 64 * 4
    for outgoing in (True, False):
        assert peaks[outgoing, True] == peaks[outgoing, False], peaks
        assert peaks[outgoing, True][0] < z_bytes and peaks[outgoing, True][1] == z_bytes, peaks


def test_offload_lowers_the_accelerator_prediction_only():
    # model_1 channels (pair-dominated at these sizes); a fake run costs the same at any channel size
    cfg = model_config(
        "model_1",
        num_recycles=0,
        **{"evoformer.num_blocks": 1, "extra_msa.num_blocks": 1, "structure_module.num_layers": 2},
    )
    sizes = (256, 16, 64, 2)
    none, idle, buffers = (
        MemoryPolicy.low_memory_inference(chunk_size=4, offload=o) for o in ("none", "idle", "buffers")
    )
    on_gpu = [estimate_breakdown(cfg, p, *sizes, device="cuda") for p in (none, idle, buffers)]
    on_cpu = [estimate_breakdown(cfg, p, *sizes, device="cpu") for p in (none, idle, buffers)]
    assert on_cpu[0].total == on_cpu[1].total == on_cpu[2].total and on_cpu[2].host == 0
    assert on_gpu[0].total == on_cpu[0].total
    assert on_gpu[2].total <= on_gpu[1].total < on_gpu[0].total and on_gpu[1].host > 0


def test_parameter_bytes_of_model_1_without_allocating():
    # 93.2 M parameters for model_1_ptm (README); model_1 has no PAE head
    assert 92e6 < parameter_bytes(model_config("model_1")) / 4 < 93.3e6


def _fake_estimates(monkeypatch, act_of):
    """Replace the estimator by ``act_of(policy)`` activation bytes; returns the list of policies asked."""
    import alphafold_mem.planner.chooser as choose_mod

    asked = []

    def fake(config, policy, *args, **kwargs):
        asked.append(policy)
        return PeakEstimate(0, 0, act_of(policy), policy.chunk_size)

    monkeypatch.setattr(choose_mod, "estimate_breakdown", fake)
    choose_mod._choose.cache_clear()
    return asked


def test_auto_chunk_picks_the_largest_that_fits(monkeypatch):
    asked = _fake_estimates(monkeypatch, lambda p: 10**6 if p.chunk_size is None else 100 * p.chunk_size)
    cfg = model_config("tiny")

    def pick(budget, **kw):
        request = MemoryPolicy(chunk_size="auto", max_memory=M + budget, **kw)
        return resolve_policy(request, cfg, (200, 6, 10, 0)).chunk_size

    assert chunk_candidates(200) == [None, 128, 64, 32, 16, 8, 4]
    assert chunk_candidates(40, max_chunk_size=16) == [None, 16, 8, 4]
    assert pick(10**7) is None and pick(3300) == 32 and pick(1000) == 8 and pick(400) == 4
    assert pick(3300, max_chunk_size=16) == 16
    asked.clear()
    assert pick(3199) == 16 and len(asked) <= 5  # unchunked, then a bisection of the six chunk sizes
    size = r"\d\.\d+(e-\d+)? GiB"
    with pytest.warns(InsufficientMemoryWarning, match=rf"need {size}.*budget {size}.*chunk 4"):
        assert pick(50) == 4  # nothing fits: said so, and the smallest-peak chunk (here the smallest)


def test_auto_chunk_nothing_fits_takes_the_smallest_peak_not_chunk_1(monkeypatch):
    # a profile where small chunks cost more (per-chunk buffers): the smallest peak is chunk 32
    _fake_estimates(monkeypatch, lambda p: 10**6 if p.chunk_size is None else abs(p.chunk_size - 32) + 500)
    with pytest.warns(InsufficientMemoryWarning):
        policy = resolve_policy(MemoryPolicy(chunk_size="auto", max_memory=10), model_config("tiny"), (200, 6, 10, 0))
        assert policy.chunk_size == 32


def test_auto_is_resolved_before_binding(tiny):
    """``bind`` takes concrete chunk sizes only and names the resolver; the resolver returns a
    concrete policy as it is and resolves ``chunk_size="auto"`` for the input sizes."""
    cfg, model, batch = tiny
    with pytest.raises(ValueError, match=r"alphafold_mem\.planner\.resolve_policy\(policy, config, sizes, device\)"):
        bind(model, MemoryPolicy(chunk_size="auto", max_memory=10**9))
    sizes = batch_sizes(batch)
    assert sizes == (N_RES, N_SEQ, N_EXTRA, N_TEMPL)
    concrete = MemoryPolicy(chunk_size=5)
    assert resolve_policy(concrete, cfg, sizes) is concrete  # not estimated
    # with the real estimator, a generous budget means no chunking
    generous = resolve_policy(MemoryPolicy(chunk_size="auto", max_memory=10**12), cfg, sizes)
    assert generous == MemoryPolicy(chunk_size=None, max_memory=10**12)


def test_auto_policy_takes_the_fastest_rung_that_fits(monkeypatch):
    """``"auto"`` (``AutoPolicy()``): the ladder in the request's precision; nothing fits: said so, and
    the most frugal rung (the one estimated)."""
    ladder = policy_candidates(False, "bf16", 200, device="cpu")
    peaks = {c.policy: 10 * (len(ladder) - i) for i, c in enumerate(ladder)}  # the peak falls down the ladder
    _fake_estimates(monkeypatch, lambda p: peaks[p])
    cfg = model_config("tiny")
    assert resolve_policy(AutoPolicy(precision="bf16", max_memory=M + 10**6), cfg, (200, 6, 10, 0)) == ladder[0].policy
    assert resolve_policy(AutoPolicy(precision="bf16", max_memory=M + 25), cfg, (200, 6, 10, 0)) == ladder[-2].policy
    with pytest.warns(InsufficientMemoryWarning, match="nothing fits"):
        assert resolve_policy(AutoPolicy(precision="bf16", max_memory=M + 5), cfg, (200, 6, 10, 0)) == ladder[-1].policy
    with pytest.raises(ValueError, match="a memory policy request is"):
        resolve_policy("reference", cfg, (200, 6, 10, 0))


def test_choose_walks_the_ladder_fastest_first(monkeypatch):
    peaks = {}
    asked = _fake_estimates(monkeypatch, lambda p: peaks[p])
    ladder = policy_candidates(False, "bf16-full", 300, device="cuda")
    assert [c.label for c in ladder[:3]] == [
        "reference",
        "in place, unchunked",
        "low_memory_inference, chunk 256, offload none",
    ]
    assert ladder[-1].label == "low_memory_inference, chunk 4, offload buffers"
    assert all(c.policy.precision == "bf16-full" for c in ladder)
    assert len(policy_candidates(False, "fp32", 300, device="cpu")) == 2 + 7  # no offload rows on CPU
    for i, c in enumerate(ladder):  # peaks fall down the ladder
        peaks[c.policy] = 1000 - i
    cfg = model_config("tiny")
    choice = choose(cfg, 300, 8, 8, 1, 1000 - 12, ladder, frugal_last=True)  # first fit: ladder[12]
    assert choice.chosen.candidate is ladder[12] and len(asked) <= 8
    asked.clear()
    none = choose(cfg, 300, 8, 8, 1, 10, ladder, frugal_last=True)
    assert none.chosen is None and len(asked) == 1 and "budget 9.31e-09 GiB" in none.shortfall()
    # first_fit (the pre-flight): a fitting first candidate is the choice from its one estimate; else the
    # search is the frugal-last one (one more estimate, the first candidate's)
    asked.clear()
    first = choose(cfg, 300, 8, 8, 1, 1000, ladder, frugal_last=True, first_fit=True)
    assert first.chosen.candidate is ladder[0] and asked == [ladder[0].policy] and len(first.rows) == 1
    assert choose(cfg, 300, 8, 8, 1, 1000, ladder, frugal_last=True).chosen.candidate is ladder[0]
    asked.clear()
    later = choose(cfg, 300, 8, 8, 1, 1000 - 12, ladder, frugal_last=True, first_fit=True)
    assert later.chosen.candidate is ladder[12] and asked[0] == ladder[0].policy and len(asked) <= 9
    asked.clear()
    none = choose(cfg, 300, 8, 8, 1, 10, ladder, frugal_last=True, first_fit=True)
    assert none.chosen is None and asked == [ladder[0].policy, ladder[-1].policy]


def test_memory_plan_cli(capsys, monkeypatch):
    import json

    from alphafold_mem.cli import main
    from alphafold_mem.units import parse_size

    assert parse_size("80GB") == 80 * 10**9 and parse_size("40GiB") == 40 * 2**30 and parse_size("512MB") == 512 * 10**6
    args = ["memory-plan", "--preset", "tiny", "--n-res", "20", "--n-seq", "4", "--n-extra", "6"]
    assert main(args + ["--max-memory", "1GB", "--precision", "fp32"]) == 0  # the reference fits: one real estimate
    out = capsys.readouterr().out
    assert "reference" in out and "recommended (fastest that fits): reference, fp32" in out
    assert main(args + ["--max-memory", "1GB", "--precision", "fp32", "-v"]) == 0
    assert "= parameters " in capsys.readouterr().out
    assert main(args + ["--max-memory", "1GB", "--precision", "bf16-full", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert set(plan) == {"config", "rows", "recommended"} and plan["config"]["n_res"] == 20
    row = {
        "setting",
        "policy",
        "precision",
        "chunk_size",
        "dap",
        "peak_bytes",
        "peak_lower_bound",
        "host_bytes",
        "fits",
    }
    assert set(plan["rows"][0]) == row and set(plan["recommended"]) == row | {"flags", "host_memory_enough"}
    assert {k: plan["recommended"][k] for k in row} == plan["rows"][0]
    assert plan["recommended"]["precision"] == plan["recommended"]["policy"]["precision"] == "bf16-full"
    assert isinstance(plan["rows"][0]["peak_bytes"], int) and plan["rows"][0]["dap"] == 1
    assert main(args + ["--max-memory", "1kB"]) == 1
    out = capsys.readouterr().out
    assert "nothing fits: the smallest predicted need is" in out and "the budget 0.00 GiB" in out


def test_memory_plan_max_length(capsys, monkeypatch):
    import json

    import alphafold_mem.planner.chooser as choose_mod
    from alphafold_mem.cli import main

    # a peak of 1000 bytes per residue: a 24 kB budget fits 24 residues (the CUDA margin, which would
    # leave nothing of 24 kB, is tested in tests/test_planner_margins.py)
    monkeypatch.setattr(
        choose_mod, "estimate_breakdown", lambda config, policy, n, *a, **k: PeakEstimate(0, 0, 1000 * n, 4)
    )
    import alphafold_mem.planner.margins as margins
    from alphafold_mem.planner.margins import DeviceMargin

    for mod in (choose_mod, margins):  # memory-plan imports device_margin from planner.margins when it runs
        monkeypatch.setattr(mod, "device_margin", lambda *a, **k: DeviceMargin())
    assert (
        main(
            [
                "memory-plan",
                "--preset",
                "tiny",
                "--max-length",
                "--device",
                "cuda",
                "--max-memory",
                "24kB",
                "--precision",
                "bf16-full",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["config"]["n_res"] == 24 and plan["recommended"]["n_res"] == 24
    assert plan["recommended"]["setting"] == "low_memory_inference, chunk 4, offload buffers"  # the table's name
    assert plan["recommended"]["policy"]["chunk_size"] == 4 and plan["config"]["device"] == "cuda"
