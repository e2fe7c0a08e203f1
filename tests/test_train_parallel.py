"""Data-parallel training for real: 2 processes (gloo, Lightning DDP, started with torchrun's
environment) hold identical weights after every step and equal 1 process on the same global batch;
sharded strategies are refused with a clear message. Every collective and subprocess has a timeout."""

from __future__ import annotations

import argparse

import pytest
import torch

from alphafold_mem.distributed import run_local
from alphafold_mem.train import build_trainer
from alphafold_mem.train.data_module import resolve_index
from alphafold_mem.train.strategies import check_strategy

from . import ddp_worker
from .test_train import data_dir  # noqa: F401  (fixture)
from .torchrun_fork import run_forked

pytestmark = pytest.mark.filterwarnings("ignore")


def _flat(weights: dict) -> torch.Tensor:
    return torch.cat([v.double().flatten() for v in weights.values() if v.is_floating_point()])


def _draws(rank: int, world: int, steps: int) -> list:
    """One rank of a gloo group: the recycling-iteration counts of steps 0..steps-1 as the training
    step draws them, gathered over the group (what ``tests/ddp_worker.py draws`` does in a fresh
    interpreter per rank)."""
    import torch.distributed as dist

    from alphafold_mem.train import AlphaFoldLightning, TrainConfig

    module = AlphaFoldLightning(ddp_worker.config(), TrainConfig(seed=3))
    mine = [module.num_iterations(k, 4) for k in range(steps)]  # AF2: num_recycles 3, 1..4 iterations
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"rank": dist.get_rank(), "counts": mine})
    return gathered


def test_recycling_draws_uniform_and_identical_across_gloo_ranks():
    """Over 200 steps the iteration counts cover 1..4 near-uniformly (expected 50 each, binomial
    sd 6.1) and two gloo ranks draw exactly the same sequence. The ranks are forked from this process
    (:func:`alphafold_mem.distributed.run_local`): two fresh interpreters importing Lightning cost
    ~10 s CPU, and the draw is a function of (seed, step) whatever started the process."""
    results = run_local(_draws, 2, 200, start_method="fork", timeout=120)
    gathered = results[0]
    assert results[1] == gathered  # both ranks gathered the same lists
    assert [g["rank"] for g in gathered] == [0, 1]
    assert gathered[0]["counts"] == gathered[1]["counts"]
    counts = [gathered[0]["counts"].count(n) for n in (1, 2, 3, 4)]
    assert sum(counts) == 200 and all(30 <= c <= 70 for c in counts), counts


def _train_rank(out: str, index: str) -> None:
    """One rank of ``tests/ddp_worker.py train`` (forked, torchrun's environment)."""
    torch.set_num_threads(1)
    ddp_worker.train(argparse.Namespace(out=out, data=index, steps=2, batch_size=1))


def test_two_process_ddp_equals_one_process_on_the_same_global_batch(data_dir, tmp_path):  # noqa: F811
    """2 ranks x batch 1 vs 1 rank x batch 2 (the same draws: draw k = (b * world + rank) * B + j),
    tiny preset without dropout, sampled recycling, 2 steps. Measured on this machine: ranks
    bit-identical (weights and EMA); vs one process ||dw|| / ||w|| = 7e-9 after step 2 (fp32
    reordering: the batch of 2 pads the smaller MSA)."""
    index = resolve_index(data_dir, tmp_path / "index")
    d2, d1 = tmp_path / "ddp", tmp_path / "single"
    d2.mkdir()
    d1.mkdir()
    assert run_forked(_train_rank, 2, str(d2), str(index), timeout=400) == [0, 0]
    # the one-process reference in this process (the launch under test is the two ranks'), one thread as there
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ddp_worker.train(argparse.Namespace(out=str(d1), data=str(index), steps=2, batch_size=2))
    finally:
        torch.set_num_threads(threads)
    for step in (1, 2):
        r0, r1 = (torch.load(d2 / f"rank{r}_step{step}.pt") for r in (0, 1))
        single = torch.load(d1 / f"rank0_step{step}.pt")
        assert r0["iterations"] == r1["iterations"] == single["iterations"]
        for key in r0["weights"]:
            assert torch.equal(r0["weights"][key], r1["weights"][key]), (step, key)
        for key in r0["ema"]:
            assert torch.equal(r0["ema"][key], r1["ema"][key]), (step, key)
        w_ddp, w_one = _flat(r0["weights"]), _flat(single["weights"])
        assert float((w_ddp - w_one).norm() / w_one.norm()) <= 1e-6, step
        assert float((w_ddp - w_one).abs().max()) <= 1e-6, step
        e_ddp, e_one = _flat(r0["ema"]), _flat(single["ema"])
        assert float((e_ddp - e_one).norm() / e_one.norm()) <= 1e-6, step


def test_sharded_strategies_are_refused_clearly(tmp_path, capsys):
    from lightning.pytorch.strategies import FSDPStrategy

    from alphafold_mem.cli import main

    for name in ("fsdp", "deepspeed_stage_2"):
        with pytest.raises(ValueError, match=r"not supported.*EMA.*Use --strategy ddp"):
            build_trainer(tmp_path, 1, strategy=name, accelerator="cpu", devices=1, loggers=())
    with pytest.raises(ValueError, match="FSDP shards the parameters"):
        check_strategy(FSDPStrategy())
    assert main(["train", "--data", "nowhere", "--strategy", "fsdp", "--out", str(tmp_path)]) == 2
    assert "--strategy fsdp is not supported" in capsys.readouterr().err
