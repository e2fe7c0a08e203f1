"""Fake ops served from recipes (alphafold_mem/planner/opcache.py) give the estimates of dispatching
every op through FakeTensorMode: inference ladders (every row kind, so recipes are shared between
rows), monomer and multimer presets, with and without DAP, CPU and accelerator, with and
without module replay, full traces and traces stopped at a limit; and op by op, the same outputs."""

from __future__ import annotations

import pytest
import torch

import alphafold_mem.planner.estimate as estimate_mod
from alphafold_mem.config import model_config
from alphafold_mem.planner import opcache, policy_candidates, replay
from alphafold_mem.planner.trace import PlanTracker

SIZES = (29, 7, 19, 2)
#: full traces run every chunk of every loop: fewer residues (still several chunks of 8, with a tail)
#: and one template keep them short
FULL_SIZES = (17, 5, 11, 1)
#: every row kind of the ladder (reference, in place, chunked at every offload level), at one chunk
#: size: its rows share recipes (the offload levels run the same chunks); one case adds a second size
ONE_CHUNK, TWO_CHUNKS = (None, 8), (None, 8, 4)


def _ladder(cfg, precision, device, dap, limit=None, full=False, sizes=SIZES, chunks=ONE_CHUNK):
    cands = policy_candidates(False, precision, max(sizes[:3]), device=device)
    cands = [c for c in cands if c.policy.chunk_size in chunks]
    # full or stopped: the reference, in place, chunked without offload (the limit the test sets stops
    # the first two; the offload rows, below it, trace as without a limit: the ladders above)
    cands = cands[:3] if full or limit is not None else cands
    return [
        estimate_mod._trace(cfg, c.policy, *sizes, False, torch.float32, True, device, full, dap, limit=limit)
        for c in cands
    ]


def _both(monkeypatch, *args, **kwargs):
    served = []
    real = opcache._synth
    monkeypatch.setattr(opcache, "_synth", lambda *a: served.append(a[1]) or real(*a))
    opcache.forget()
    replay.forget()
    fast = _ladder(*args, **kwargs)
    monkeypatch.setattr(opcache, "ENABLED", False)
    replay.forget()
    plain = _ladder(*args, **kwargs)
    monkeypatch.setattr(opcache, "ENABLED", True)
    return fast, plain, served


@pytest.mark.parametrize(
    "preset,precision,device,dap,with_replay",
    [
        # every preset, precision, device kind, DAP size and replay setting at least once
        ("tiny", "fp32", "cuda", 1, False),
        ("tiny", "bf16-full", "cpu", 2, True),
        ("tiny_multimer", "bf16", "cuda", 2, True),
        ("tiny_multimer", "fp32", "cpu", 1, False),
    ],
)
def test_served_ladder_equals_the_dispatched_one(monkeypatch, preset, precision, device, dap, with_replay):
    cfg = model_config(preset, **{"evoformer.num_blocks": 3, "extra_msa.num_blocks": 2})
    monkeypatch.setattr(replay, "ENABLED", with_replay)
    chunks = TWO_CHUNKS if preset == "tiny_multimer" and device == "cpu" else ONE_CHUNK  # the cheapest ladder
    fast, plain, served = _both(monkeypatch, cfg, precision, device, dap, chunks=chunks)
    assert fast == plain
    assert served, "no op was served from a recipe"


def test_served_full_and_stopped_traces_equal_the_dispatched_ones(monkeypatch):
    cfg = model_config("tiny", **{"evoformer.num_blocks": 2})
    fast, plain, _ = _both(monkeypatch, cfg, "fp32", "cuda", 1, full=True, sizes=FULL_SIZES)
    assert fast == plain
    peaks = sorted(e.total - e.parameters for e in plain)
    limit = estimate_mod.parameter_bytes(cfg) + (peaks[0] + peaks[-1]) // 2
    fast, plain, _ = _both(monkeypatch, cfg, "fp32", "cuda", 1, limit=limit, sizes=FULL_SIZES)
    assert fast == plain
    assert any(e.lower_bound for e in plain)


def _ops(x, w, p):
    """Views (of tensors made in and outside inference mode), in-place ops, composite ops, tuple
    outputs, dtype and device queries."""
    y = x.transpose(0, 1)
    outs = [
        y,
        x[1],
        p.t(),
        p[0].unsqueeze(0),
        x.reshape(6, 4),
        y.reshape(4, 6),
        y.contiguous(),
        torch.nn.functional.linear(x, w),
        torch.nn.functional.layer_norm(y, (3,)),
        x.to(torch.bfloat16),
        x.to(torch.float32),
        x.flatten(),
        x + 1,
        *x.split(1),
        *torch.unbind(y),
        torch.einsum("abc,dc->abd", x, w),
    ]
    z = torch.zeros(2, 4, 3)
    outs.append(z.add_(1))
    outs.append(z[0].mul_(2))
    return outs, x.device, torch.result_type(x, w)


def _describe(outs, inputs):
    ids = {id(t.untyped_storage()): i for i, t in enumerate(inputs)}
    new = {}
    rows = []
    for t in outs[0]:
        sid = id(t.untyped_storage())
        where = ("in", ids[sid]) if sid in ids else ("new", new.setdefault(sid, len(new)))
        rows.append(
            (
                tuple(t.shape),
                t.stride(),
                t.storage_offset(),
                t.dtype,
                t.device,
                t.is_inference(),
                t.requires_grad,
                torch._C._dispatch_key_set(t),
                t.untyped_storage().nbytes(),
                where,
            )
        )
    return rows, outs[1:]


def test_served_ops_equal_dispatched_ops():
    opcache.forget()
    results = []
    for mode in (torch._subclasses.fake_tensor.FakeTensorMode(), opcache.PlanFakeMode()):
        mode.cache_enabled = False
        with mode:
            p = torch.nn.Parameter(torch.empty(5, 3))
            with torch.inference_mode():
                x, w = torch.ones(2, 4, 3), torch.ones(5, 3)
                runs = []
                for _ in range(3):  # recorded, then served
                    with PlanTracker() as tracker:
                        runs.append((_describe(_ops(x, w, p), [x, w, p]), tracker.peak))
        assert runs[0] == runs[1] == runs[2]
        results.append(runs[0])
    assert results[0] == results[1]
    assert any(r is not None for r in opcache._recipes.values())


def test_resizing_ops_are_not_served():
    opcache.forget()
    with opcache.PlanFakeMode(), torch.inference_mode():
        for _ in range(2):
            t = torch.empty(3)
            t.resize_(6)
            assert t.shape == (6,) and t.untyped_storage().nbytes() == 24
    assert all(r is None for k, r in opcache._recipes.items() if k[0] == torch.ops.aten.resize_.default)
