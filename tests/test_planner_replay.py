"""Replayed module calls (alphafold_mem/planner/replay.py) give the estimates of tracing every call:
the whole inference ladder, monomer and multimer presets, with and without DAP, CPU and accelerator,
exact estimates and traces stopped at a limit."""

from __future__ import annotations

import pytest
import torch

import alphafold_mem.planner.estimate as estimate_mod
from alphafold_mem.config import model_config
from alphafold_mem.planner import policy_candidates, replay

SIZES = (29, 7, 19, 2)


def _ladder(cfg, precision, device, dap, limit=None, sizes=SIZES):
    cands = policy_candidates(False, precision, max(sizes[:3]), device=device)
    cands = [c for c in cands if c.policy.chunk_size in (None, 8)]  # every rung kind, one chunk size
    return [
        estimate_mod._trace(cfg, c.policy, *sizes, False, torch.float32, True, device, False, dap, limit=limit)
        for c in cands
    ]


def _both(monkeypatch, *args, **kwargs):
    replay.forget()
    replays = []
    real = replay._replay
    monkeypatch.setattr(replay, "_replay", lambda *a: replays.append(a[0]) or real(*a))
    fast = _ladder(*args, **kwargs)
    monkeypatch.setattr(replay, "ENABLED", False)
    plain = _ladder(*args, **kwargs)
    monkeypatch.setattr(replay, "ENABLED", True)
    return fast, plain, replays


@pytest.mark.parametrize(
    "preset,precision,device,dap",
    [
        ("tiny", "bf16", "cuda", 1),
        ("tiny", "bf16-full", "cpu", 2),
        ("tiny_multimer", "fp32", "cuda", 1),
        ("tiny_multimer", "bf16-full", "cuda", 2),
    ],
)
def test_replayed_ladder_equals_the_traced_one(monkeypatch, preset, precision, device, dap):
    cfg = model_config(preset, **{"evoformer.num_blocks": 3, "extra_msa.num_blocks": 2})
    fast, plain, replays = _both(monkeypatch, cfg, precision, device, dap)
    assert fast == plain
    if dap == 1:  # under DAP the blocks carry a sharding runner and are not replayed
        assert replays, "no module call was replayed"


def test_replayed_traces_stop_where_the_traced_ones_do(monkeypatch):
    """With a limit between the candidates' peaks, the lower bounds (where the trace stopped) are
    the same with and without replay."""
    cfg = model_config("tiny", **{"evoformer.num_blocks": 3})
    replay.forget()
    peaks = sorted(e.total - e.parameters for e in _ladder(cfg, "fp32", "cuda", 1, sizes=(40, 5, 17, 1)))
    params = estimate_mod.parameter_bytes(cfg)
    for limit in (peaks[0] // 2, (peaks[0] + peaks[-1]) // 2):
        fast, plain, _ = _both(monkeypatch, cfg, "fp32", "cuda", 1, limit=params + limit, sizes=(40, 5, 17, 1))
        assert fast == plain
        assert any(e.lower_bound for e in plain)


@pytest.mark.parametrize(
    "op,args",
    [
        ("narrow", (1, 2, 3)),
        ("narrow", (-1, -4, 2)),
        ("unflatten", (-1, (2, 4))),
        ("unflatten", (0, (-1, 2))),
        ("unflatten", (1, (2, 1, -1))),
    ],
)
def test_plan_tracker_views_equal_torch_views(op, args):
    """The tracker's as_strided stand-ins for narrow and unflatten give torch's view: same sizes,
    strides and offset, on a permuted, offset tensor."""
    from alphafold_mem.planner.trace import _narrow_view, _unflatten_view

    x = torch.empty(3, 4, 6, 8).permute(0, 2, 1, 3)[1:]  # [2, 6, 4, 8], not contiguous, offset
    ref = getattr(x, op)(*args)
    _, size, stride, offset = (_narrow_view if op == "narrow" else _unflatten_view)(x, *args)
    assert (list(ref.shape), list(ref.stride()), ref.storage_offset()) == (list(size), list(stride), offset)
