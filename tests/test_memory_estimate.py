"""Peak-memory measurement (track_peak), prediction (estimate_peak under FakeTensorMode),
chunk_size="auto" and the memory-plan CLI."""

import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, apply_memory_policy, model_config
from alphafold_mem.memory import track_peak
from alphafold_mem.planner import estimate_breakdown, estimate_peak, resolve_auto_chunk
from alphafold_mem.planner.estimate import parameter_bytes
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


@pytest.mark.parametrize("policy,training", [
    (MemoryPolicy.reference(), False),
    (MemoryPolicy.low_memory_inference(chunk_size=4), False),
    (MemoryPolicy.training(), True),
], ids=["reference-inference", "low-memory-inference", "training"])
def test_estimate_within_5_percent_of_measured(tiny, policy, training):
    cfg, model, batch = tiny
    apply_memory_policy(model, policy)
    model.zero_grad(set_to_none=True)
    if training:  # the real AF2 loss, as the estimate runs it
        batch = {**batch, **ground_truth_batch(cfg, N_RES, N_SEQ)}
    with torch.set_grad_enabled(training), track_peak() as mem:
        out = model(batch)
        if training:
            training_loss(cfg, out, batch).backward()
        del out
    apply_memory_policy(model, MemoryPolicy.reference())
    est = estimate_breakdown(cfg, policy, N_RES, N_SEQ, N_EXTRA, N_TEMPL, training=training)
    assert abs(est.activations - mem.peak) <= 0.05 * mem.peak, (est.activations, mem.peak)
    assert est.parameters == sum(p.numel() * 4 for p in model.parameters())
    assert est.total == est.parameters + est.inputs + est.activations


def test_parameter_bytes_of_model_1_without_allocating():
    # 93.2 M parameters for model_1_ptm (README); model_1 has no PAE head
    assert 92e6 < parameter_bytes(model_config("model_1")) / 4 < 93.3e6


def test_auto_chunk_picks_the_largest_that_fits(monkeypatch):
    import alphafold_mem.planner.estimate as est_mod

    def fake_estimate(config, policy, *args, **kwargs):  # activations grow with the chunk
        act = 10 ** 6 if policy.chunk_size is None else 100 * policy.chunk_size
        return est_mod.PeakEstimate(0, 0, act, policy.chunk_size)

    monkeypatch.setattr(est_mod, "estimate_breakdown", fake_estimate)
    cfg = model_config("tiny")
    pick = lambda budget: resolve_auto_chunk(cfg, MemoryPolicy(chunk_size="auto", max_memory=budget), 40, 6, 10)  # noqa: E731
    assert pick(10 ** 7) is None and pick(3300) == 32 and pick(1000) == 8 and pick(150) == 1 and pick(50) == 1
    assert est_mod.chunk_candidates(40, 6, 10) == [None, 32, 16, 8, 4, 2, 1]


def test_auto_chunk_binds_per_input_size(tiny, monkeypatch):
    import alphafold_mem.planner.estimate as est_mod

    cfg, model, batch = tiny
    seen = []
    monkeypatch.setattr(est_mod, "resolve_auto_chunk", lambda config, policy, *sizes, **kw: seen.append(sizes) or 5)
    with torch.no_grad():
        ref = model(batch)["final_atom_positions"]
        apply_memory_policy(model, MemoryPolicy(chunk_size="auto", max_memory=10 ** 9))
        out = model(batch)["final_atom_positions"]
        model(batch)  # same sizes: resolved once
    chunk = model.evoformer.blocks[0].pair_updates.triangle_attention_starting_node.chunk_size
    apply_memory_policy(model, MemoryPolicy.reference())
    assert seen == [(N_RES, N_SEQ, N_EXTRA, N_TEMPL)] and chunk == 5
    assert (out - ref).abs().max() <= 1e-4
    # with the real estimator, a generous budget means no chunking
    assert resolve_auto_chunk(cfg, MemoryPolicy(chunk_size="auto", max_memory=10 ** 12), N_RES, N_SEQ, N_EXTRA,
                              N_TEMPL) is None


def test_memory_plan_cli(capsys, monkeypatch):
    import alphafold_mem.planner.estimate as est_mod
    from alphafold_mem.cli import main
    from alphafold_mem.cli.memory_plan import parse_bytes

    assert parse_bytes("80GB") == 80 * 10 ** 9 and parse_bytes("40GiB") == 40 * 2 ** 30 and parse_bytes("512MB") == 512 * 10 ** 6
    args = ["memory-plan", "--preset", "tiny", "--n-res", "20", "--n-seq", "4", "--n-extra", "6"]
    assert main(args + ["--budget", "1GB"]) == 0  # the reference fits: one real estimate
    out = capsys.readouterr().out
    assert "reference" in out and "recommended (cheapest in time that fits): reference" in out
    calls = []
    monkeypatch.setattr(est_mod, "estimate_breakdown",
                        lambda *a, **k: calls.append(a[1]) or est_mod.PeakEstimate(10 ** 6, 0, 0, None))
    assert main(args + ["--budget", "1kB"]) == 1
    assert "nothing fits" in capsys.readouterr().out
    assert len(calls) == len(set(calls)) > 5  # every candidate policy, each once
