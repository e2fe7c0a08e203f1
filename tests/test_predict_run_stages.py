"""A prediction run's stages as a newcomer meets them: every second of ``timings.json`` in a named
stage, no ``--out`` left by a missing input, and a long target's predicted run time (planned, not
run) with a warning above an hour and progress lines carrying an ETA."""

from __future__ import annotations

import io
import json
import time

import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, model_config
from alphafold_mem.cli import main
from alphafold_mem.predict import run_time
from alphafold_mem.predict.parallel import Parallel
from alphafold_mem.predict.planning import LONG_RUN_SECONDS, plan_targets, rate_key
from alphafold_mem.predict.progress import ForwardProgress
from alphafold_mem.predict.run_context import LoadedModel, RunContext, TargetRun
from alphafold_mem.predict.target import Target
from alphafold_mem.predict.timings import STAGE_NAMES, StageClock, Stages
from alphafold_mem.weights import save_checkpoint


@pytest.fixture(autouse=True)
def rate_store(tmp_path, monkeypatch):
    """Each test its own store of measured rates."""
    monkeypatch.setenv("ALPHAFOLD_MEM_CACHE", str(tmp_path / "cache"))
    return run_time.RateStore()


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "tiny.ckpt"
    save_checkpoint(AlphaFold(model_config("tiny")), path)
    return path


def test_stage_seconds_sum_to_the_total(tmp_path, tiny_weights, capsys):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(">a\nMKTAYIAKQRQISFVKSHFSRQ\n")
    out = tmp_path / "out"
    args = ["predict", str(fasta), "--out", str(out), "--weights", str(tiny_weights), "--single-sequence"]
    assert main([*args, "--num-recycles", "0"]) == 0
    timings = json.loads((out / "timings.json").read_text())
    by_stage = timings["stage_seconds"]
    assert set(by_stage) <= set(STAGE_NAMES)
    assert {"start-up", "inputs", "weights", "planning", "features", "model", "outputs"} <= set(by_stage)
    assert all(s >= 0 for s in by_stage.values())
    total = timings["total_seconds"]
    assert abs(sum(by_stage.values()) - total) <= 0.02 * total
    assert by_stage["model"] >= timings["stages"]["a/model"]["seconds"] - 0.01  # the forward is in "model"
    err = capsys.readouterr().err
    assert "plan: a: 22 residues, predicted peak" in err and "predicted run time" in err


def test_the_stage_clock_charges_every_second_once():
    clock = StageClock("start-up")
    time.sleep(0.02)
    with clock.stage("model"):
        time.sleep(0.03)
        with clock.stage("outputs"):
            time.sleep(0.01)
    total, by_stage = clock.report()
    assert list(by_stage) == ["start-up", "model", "outputs"]
    assert by_stage["model"] >= 0.03 and by_stage["outputs"] >= 0.01 and by_stage["start-up"] >= 0.02
    assert sum(by_stage.values()) == pytest.approx(total, abs=0.005)


def test_a_missing_input_creates_no_out(tmp_path, capsys):
    out = tmp_path / "new" / "out"
    code = main(["predict", str(tmp_path / "missing.fasta"), "--out", str(out)])
    assert code == 2
    assert "missing.fasta" in capsys.readouterr().err
    assert not out.exists()


def _context(model, log) -> RunContext:
    dev = torch.device("cpu")
    par, dev, log = Parallel.start(1, dev, log)
    return RunContext(
        out_dir="unused",
        device=dev,
        par=par,
        request="auto",
        policy=MemoryPolicy(),
        chosen=True,
        seed=0,
        weights_path="tiny.ckpt",
        options={},
        output_name="{id}/tiny_seed_0",
        log=log,
        clock=StageClock(),
        stages=Stages(dev, track_cpu=False),
    )


def _plan(n_res: int, rate_store, flop_per_s=None) -> list[str]:
    lines: list[str] = []
    model = AlphaFold(model_config("tiny")).eval()
    ctx = _context(model, lines.append)
    lm = LoadedModel(model, weights=None)
    if flop_per_s is not None:
        rate_store.record(rate_key(ctx, lm), flop_per_s, 1.0, "calibration")
    run = TargetRun.of(Target("long", "A" * n_res, "long", "long.fasta:1"))
    plan_targets(ctx, lm, [run])  # planned, not run
    assert run.fit.fits
    return lines


def test_a_long_target_is_planned_with_its_run_time_and_a_warning(rate_store):
    """5,000 residues with the tiny preset, planned and not run: the plan line gives the predicted
    peak and run time; a rate slow enough for more than an hour gets the warning, a fast one not."""
    config = model_config("tiny")
    flops = run_time.forward_flops(config, (5000, 1, 0, 1 if config.template.enabled else 0))
    slow = flops / (3 * LONG_RUN_SECONDS)  # FLOP/s: three hours
    lines = _plan(5000, rate_store, flop_per_s=slow)
    (plan,) = [x for x in lines if x.startswith("plan: long:")]
    assert "5000 residues, predicted peak" in plan and "predicted run time 3 h 00 min on this device" in plan
    (warning,) = [x for x in lines if x.startswith("warning: long:")]
    assert "over an hour" in warning and "at least once a minute" in warning
    fast = _plan(5000, rate_store, flop_per_s=flops / 60)
    assert any("predicted run time 1 min 00 s" in x for x in fast) and not any(x.startswith("warning") for x in fast)


def test_without_a_stored_rate_the_planning_calibrates_and_stores_one(rate_store):
    lines = _plan(300, rate_store)
    (plan,) = [x for x in lines if x.startswith("plan: long:")]
    assert "predicted run time" in plan and "measured by calibration" in plan
    stored = json.loads(open(rate_store.path).read())
    (entry,) = stored.values()
    assert entry["source"] == "calibration" and entry["flop_per_s"] > 0


def test_flops_grow_with_the_cube_of_the_length():
    cfg = model_config("tiny")
    small, large = (run_time.forward_flops(cfg, (n, 1, 0, 0)) for n in (500, 5000))
    assert 100 < large / small <= 1000


class _Stream(io.StringIO):
    def isatty(self):
        return False


def test_progress_lines_come_while_a_block_runs_long_with_an_eta():
    """A block that runs longer than ``every`` seconds still gets lines (the timer), with the ETA of the
    pre-flight's estimate before any block is done."""
    model = AlphaFold(model_config("tiny")).eval()
    stream = _Stream()
    with ForwardProgress(model, "long", after=0.0, every=0.2, stream=stream, expected_seconds=7200).attached():
        time.sleep(0.9)  # no block finishes
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2
    assert all(x.startswith("progress: long: iteration 0/") and ", ETA 1 h 59 min" in x for x in lines)


def test_the_eta_follows_the_blocks_done():
    model = AlphaFold(model_config("tiny")).eval()
    progress = ForwardProgress(model, "x", expected_seconds=10.0)
    with progress.attached():
        progress.start -= 100.0  # 100 s so far
        progress.recycle, progress.block = 1, progress.total_blocks  # the first of total_recycles done
        eta = progress.eta()
    assert eta == pytest.approx(100.0 * (progress.total_recycles - 1), rel=0.01)
