"""``memory-plan``'s first-hour behaviour: the device and budget it defaults to (and says so), progress
on stderr, the ``predict`` flags of its recommendation (parsed back and run by ``predict``), the host
memory offload needs, and ``--json`` rows under DAP."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import torch

import alphafold_mem.planner.chooser as chooser
from alphafold_mem.cli import main
from alphafold_mem.cli.main import build_parser
from alphafold_mem.cli.memory_args import predict_request
from alphafold_mem.cli.memory_plan import predict_flags
from alphafold_mem.config import model_config
from alphafold_mem.memory.policy import MemoryPolicy
from alphafold_mem.model.alphafold import AlphaFold
from alphafold_mem.planner import PeakEstimate, policy_candidates
from alphafold_mem.weights import save_checkpoint

from .conftest import REPO_DATA
from .predict_cli import prediction

PEPTIDE = REPO_DATA / "fasta" / "awkward" / "colabfold_5AWL_1_peptide.fasta"
#: A memory size printed in another unit than GiB (issue 45: one unit in every command).
OTHER_UNITS = re.compile(r"\d\s*(bytes|[kKMGT]B|[KMT]iB)\b")


def _parse_predict(flags: str):
    return predict_request(build_parser().parse_args(["predict", "x.fasta", "--out", "o", *shlex.split(flags)]))


@pytest.mark.parametrize("training", [False])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16-full"])
def test_predict_flags_bind_every_ladder_policy(training, precision):
    """Every inference candidate's flags, read back by predict's option parser, are that policy."""
    for cand in policy_candidates(training, precision, 1000, device="cuda"):
        assert _parse_predict(predict_flags(cand.policy)) == cand.policy, cand.label
    odd = MemoryPolicy.low_memory_inference(chunk_size=8, attention_chunks=(32, 64), offload="idle", precision="bf16")
    assert _parse_predict(predict_flags(odd)) == odd


def _fake_peaks(monkeypatch, per_residue: int, host: int = 0):
    """Peaks of ``per_residue`` bytes per residue, 0.8 of that chunked (falling with the chunk size) and
    halved by offload (no fake model run)."""

    def est(config, policy, n, *a, dap=1, **k):
        scale = 1.0 if policy.chunk_size is None else 0.8 + policy.chunk_size / 10240
        scale *= 0.5 if policy.offload != "none" else 1.0
        return PeakEstimate(
            0, 0, int(per_residue * n * scale / dap), policy.chunk_size, host if policy.offload != "none" else 0
        )

    monkeypatch.setattr(chooser, "estimate_breakdown", est)


def test_recommendation_flags_run_predict(tmp_path, monkeypatch, capsys):
    """The acceptance command's shape: ``--n-res 10000 --precision bf16-full --max-memory 48GB`` prints one line
    of ``predict`` flags; predict accepts them and runs the tiny model with them."""
    _fake_peaks(monkeypatch, per_residue=7_000_000, host=104 * 10**9)  # 70 GB unchunked at N_res 10,000
    argv = ["memory-plan", "--n-res", "10000", "--precision", "bf16-full", "--max-memory", "48GB", "--device", "cuda"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    flag_lines = [line for line in captured.out.splitlines() if line.startswith("flags: alphafold-mem predict ")]
    assert len(flag_lines) == 1
    flags = flag_lines[0].removeprefix("flags: alphafold-mem predict ")
    assert "--precision bf16-full" in flags and "needs 96.9 GiB of host memory for offload; this machine has" in (
        captured.out
    )
    assert "memory-plan: device cuda" in captured.err and "memory-plan: estimating 1:" in captured.err
    request = _parse_predict(flags)
    assert request.precision == "bf16-full" and request.chunk_size is not None
    monkeypatch.undo()

    torch.manual_seed(0)
    weights = tmp_path / "tiny.ckpt"
    save_checkpoint(AlphaFold(model_config("tiny")), weights)
    out = tmp_path / "out"
    common = ["predict", str(PEPTIDE), "--weights", str(weights), "--single-sequence", "--num-recycles", "0"]
    assert main(common + ["--out", str(out), "--device", "cpu", "--no-track-memory", *shlex.split(flags)]) == 0
    printed = captured.out + captured.err + "".join(capsys.readouterr())  # memory-plan's, then predict's
    assert "GiB" in printed and not OTHER_UNITS.search(printed), OTHER_UNITS.findall(printed)
    scores = json.loads(prediction(out, "5AWL_1", "_scores.json").read_text())
    assert scores["precision"] == "bf16-full" and scores["chunk_size"] == request.chunk_size


def test_defaults_to_this_machine_and_says_so(monkeypatch, capsys):
    """No --device/--max-memory: the device this process runs on and its free memory, named on stderr."""
    _fake_peaks(monkeypatch, per_residue=1000)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(chooser, "available_memory", lambda device=None: 7 * 10**9)
    import alphafold_mem.planner as planner

    monkeypatch.setattr(planner, "available_memory", lambda device=None: 7 * 10**9)
    assert main(["memory-plan", "--preset", "tiny", "--n-res", "100", "--json"]) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert plan["config"]["device"] == "cpu" and plan["config"]["budget_bytes"] == 7 * 10**9
    assert "device cpu (this machine's" in captured.err and "budget 6.5 GiB (available RAM" in captured.err
    assert all(r["policy"]["offload"] == "none" for r in plan["rows"])  # on CPU offload moves nothing
    assert main(["memory-plan", "--preset", "tiny", "--n-res", "100", "--device", "cuda"]) == 2  # no CUDA here
    assert "give --max-memory" in capsys.readouterr().err


def test_json_rows_carry_dap_and_host_bytes(monkeypatch, capsys):
    """Under --dap 8 every row says dap 8; host bytes per row; ``recommended`` holds the policy's fields."""
    _fake_peaks(monkeypatch, per_residue=10**6, host=5 * 10**9)
    argv = ["memory-plan", "--n-res", "30000", "--dap", "8", "--precision", "bf16-full", "--json", "--no-progress"]
    assert main(argv + ["--max-memory", "3GB", "--device", "cuda"]) == 0  # 2 GB usable after the CUDA margin
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert captured.err == "" and plan["rows"] and all(r["dap"] == 8 for r in plan["rows"])
    rec = plan["recommended"]
    assert rec["dap"] == 8 and rec["host_bytes"] == 5 * 10**9 and rec["policy"]["offload"] != "none"
    assert MemoryPolicy(**{**rec["policy"], "attention_chunks": tuple(rec["policy"]["attention_chunks"])})
    assert rec["flags"].startswith("predict --low-memory") and rec["flags"].endswith(" --dap 8")


def test_a_closed_pipe_ends_the_command_quietly():
    """``memory-plan --json | head``: the reader has gone when the JSON is written; the command stops
    with status 141 (128 + SIGPIPE, as a tool killed by the signal) and no traceback."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "alphafold_mem.cli", "memory-plan", "--preset", "tiny", "--n-res", "20"]
    argv += ["--n-seq", "4", "--n-extra", "6", "--max-memory", "1GB", "--precision", "fp32", "--json", "--no-progress"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # nothing will read the output
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_every_printed_size_is_in_gib(capsys):
    """memory-plan's table, header, margin, recommendation, -v parts and --max-length lines: GiB only."""
    args = ["memory-plan", "--preset", "tiny", "--n-res", "20", "--n-seq", "4", "--n-extra", "6"]
    assert main(args + ["--max-memory", "1GB", "--precision", "fp32", "-v", "--device", "cpu"]) == 0
    assert main(args + ["--max-memory", "1kB", "--precision", "fp32", "--device", "cpu"]) == 1  # nothing fits
    printed = "".join(capsys.readouterr())
    assert printed.count("GiB") >= 8 and not OTHER_UNITS.search(printed), OTHER_UNITS.findall(printed)
