"""``predict --devices N`` (target parallelism, :mod:`alphafold_mem.cli.devices_launch`): the shares,
and the CLI on CPU (2 spawned processes) against one process over a 5-record FASTA.

The CLI runs in a subprocess bounded by a timeout, so that a hung rank fails the test instead of
hanging it (the rejected-record run: its launcher in this process, bounded alike)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest
import torch

import alphafold_mem
from alphafold_mem.cli.main import main
from alphafold_mem.config import model_config
from alphafold_mem.model import AlphaFold
from alphafold_mem.predict.devices import launcher_rank, merge, shares, target_cost, wait_for_parts, write_part
from alphafold_mem.predict.results import TargetResult
from alphafold_mem.predict.targets import Target
from alphafold_mem.weights import save_checkpoint
from tests.predict_cli import main_bounded, prediction, ranked

RUN_TIMEOUT_S = 600  # a bound, not an expectation: on a loaded 2-core machine one run takes minutes
# Short chains: the run stays fast; lengths differ so that the shares are not trivial (t4 alone on
# rank 0, the other four on rank 1). Three lengths for five targets: every new length costs each
# process a pre-flight memory trace (~2 s CPU at the tiny preset), and the shares only need the order.
SEQUENCES = {
    "t1": "MKTAYIAKQRQISFVKSHFS",
    "t2": "GSHMLEDPVDAFQ",
    "t3": "MKVLAAGIVGLLL",
    "t4": "MSEQNNTEMTFQIQRIYTKDISFEAPNAPHVFQK",
    "t5": "ACDEFGHIKLMNPQRSTVWY",
}


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    torch.manual_seed(0)
    model = AlphaFold(model_config("tiny"))
    with torch.no_grad():  # as tests/test_inference.py: pLDDT and frames vary per residue
        model.aux_heads.predicted_lddt.logits.weight.normal_(0.0, 0.5)
        model.structure_module.affine_update.weight.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("weights") / "tiny.ckpt"
    save_checkpoint(model, path)
    return path


def _fasta(path, records: dict[str, str]):
    path.write_text("".join(f">{name} record {name}\n{seq}\n" for name, seq in records.items()))
    return path


def _predict(fasta, out, weights, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "alphafold_mem.cli", "predict", str(fasta), "--out", str(out)]
    cmd += ["--weights", str(weights), "--single-sequence", "--num-recycles", "0", "--device", "cpu", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(k, None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)


def _predict_here(capfd, fasta, out, weights, *extra: str) -> tuple[int, str]:
    """The command line of :func:`_predict` run by this process (the launcher in-process, its ranks
    still spawned interpreters; the launcher in a fresh one: test_devices_2_writes_what_one_process_writes):
    exit status and stderr (:func:`tests.predict_cli.main_bounded`)."""
    argv = ["predict", str(fasta), "--out", str(out), "--weights", str(weights), "--single-sequence"]
    return main_bounded(capfd, [*argv, "--num-recycles", "0", "--device", "cpu", *extra], RUN_TIMEOUT_S)


def _listing(out) -> set[str]:
    """The files under ``out`` (hidden ones and those in hidden folders aside), relative to it."""
    files = (p.relative_to(out) for p in out.rglob("*") if p.is_file())
    return {p.as_posix() for p in files if not any(part.startswith(".") for part in p.parts)}


def _coordinates(pdb_path) -> np.ndarray:
    rows = [line for line in open(pdb_path) if line.startswith("ATOM")]
    return np.array([[float(line[30:38]), float(line[38:46]), float(line[46:54])] for line in rows])


def _target(name: str, n: int, depth: int = 1, order: int = 0) -> Target:
    return Target(name, "A" * n, name, f"x.fasta:{order}", msa_depth=depth, order=order)


def test_shares_are_lpt_longest_first_and_cover_every_target_once():
    targets = [_target(f"t{k}", n, order=k) for k, n in enumerate([10, 50, 20, 40, 30, 5])]
    got = shares(targets, 2)
    # costs N_res^2 (1 + N_res): 50 -> rank 0; 40, 30, 20, 10, 5 on rank 1 stay below rank 0's load
    assert got == [["t1"], ["t3", "t4", "t2", "t0", "t5"]]
    assert sorted(sum(got, [])) == sorted(t.name for t in targets)
    assert shares(targets, 3) == [["t1"], ["t3"], ["t4", "t2", "t0", "t5"]]
    assert shares(targets, 4) == shares(list(reversed(targets)), 4)  # depends on the inputs only
    assert shares(targets, 8)[6:] == [[], []]  # more ranks than targets: idle ranks
    with pytest.raises(ValueError, match="--devices"):
        shares(targets, 0)


def test_cost_grows_with_msa_depth_up_to_the_rows_read():
    assert target_cost(100, 1) < target_cost(100, 1000) < target_cost(100, 6000) == target_cost(100, 100_000)


def test_launcher_rank_from_torchrun_or_slurm():
    assert launcher_rank({}) is None
    assert launcher_rank({"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process: nothing to share
    rank, world, key = launcher_rank({"RANK": "3", "WORLD_SIZE": "4", "MASTER_PORT": "29500"})
    assert (rank, world) == (3, 4) and "29500" in key
    rank, world, key = launcher_rank({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "77"})
    assert (rank, world) == (1, 2) and "77" in key


def test_waiting_for_parts_times_out_and_ignores_another_runs_parts(tmp_path):
    write_part(str(tmp_path), 0, "this-run", {"results": [], "exit_code": 0})
    write_part(str(tmp_path), 1, "an-earlier-run", {"results": [], "exit_code": 0})
    parts = wait_for_parts(str(tmp_path), 2, "this-run", timeout=0.3, poll=0.05)
    assert parts[0]["key"] == "this-run" and parts[1] is None


def test_the_merge_keeps_the_earlier_records_of_skipped_targets(tmp_path):
    def part(status, seconds):
        r = TargetResult(name=f"t{status}", length=8, status=status, seconds=seconds, recycles_run=None)
        return {"results": [asdict(r)], "exit_code": 0, "seconds": 1.0, "device": "cpu", "error": ""}

    earlier = {"targets": {"tskipped": {"status": "ok", "seconds": 12.5, "length": 8, "recycles_run": 3}}}
    merge(
        str(tmp_path),
        [["tok"], ["tskipped"]],
        {0: part("ok", 2.0), 1: part("skipped", None)},
        [],
        {"tok": 8, "tskipped": 8},
        {"tok": 0, "tskipped": 1},
        3.0,
        lambda k: "gone",
        lambda line: None,
        earlier,
    )
    targets = json.loads((tmp_path / "timings.json").read_text())["targets"]
    assert targets["tskipped"] == {"status": "skipped", "seconds": 12.5, "length": 8, "recycles_run": 3}
    assert targets["tok"]["seconds"] == 2.0 and targets["tok"]["status"] == "ok"


def test_devices_2_writes_what_one_process_writes(tmp_path, tiny_weights):
    """Acceptance (issue 34 item 4): 5 records, --devices 2 on CPU: the same files, equal coordinates,
    each target once, one summary and one timings.json, exit 0."""
    fasta = _fasta(tmp_path / "five.fasta", SEQUENCES)
    one = alphafold_mem.predict(
        fasta,
        tmp_path / "one",
        weights=tiny_weights,
        single_sequence=True,
        num_recycles=0,
        device="cpu",
        log=lambda line: None,
    )
    assert one.exit_code == 0
    two = _predict(fasta, tmp_path / "two", tiny_weights, "--devices", "2")
    assert two.returncode == 0, two.stderr
    assert "Traceback" not in two.stderr
    assert _listing(tmp_path / "one") == _listing(tmp_path / "two")
    for name in SEQUENCES:
        np.testing.assert_array_equal(
            _coordinates(ranked(tmp_path / "one", name)), _coordinates(ranked(tmp_path / "two", name))
        )
        s1 = json.loads(prediction(tmp_path / "one", name, "_scores.json").read_text())
        s2 = json.loads(prediction(tmp_path / "two", name, "_scores.json").read_text())
        assert s1["plddt"] == s2["plddt"] and s1["source"] == s2["source"] and s1["provenance"] == s2["provenance"]
    timings = json.loads((tmp_path / "two" / "timings.json").read_text())
    assert timings["devices"] == 2 and set(timings["targets"]) == set(SEQUENCES)
    assert all(v["status"] == "ok" for v in timings["targets"].values())
    ran = [name for r in timings["ranks"] for name in r["targets"]]
    assert sorted(ran) == sorted(SEQUENCES)  # each target on exactly one rank
    assert all(r["exit_code"] == 0 and r["targets"] for r in timings["ranks"])
    for name in SEQUENCES:  # each target's line in the merged summary once
        assert sum(line.split()[:1] == [name] for line in two.stderr.splitlines()) >= 1
    summary = two.stderr[two.stderr.rindex("target ") :]
    assert sorted(line.split()[0] for line in summary.splitlines()[2:] if line.strip()) == sorted(SEQUENCES)


def test_devices_2_with_a_rejected_record_finishes_the_others_and_exits_1(tmp_path, tiny_weights, capfd):
    records = dict(SEQUENCES, t3="MKV1LAG")  # a digit: rejected by the input check
    fasta = _fasta(tmp_path / "bad.fasta", records)
    code, stderr = _predict_here(capfd, fasta, tmp_path / "out", tiny_weights, "--devices", "2")
    assert code == 1, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {fasta}:6:4: record 't3': digit '1' in a protein sequence (residue 4)"]
    for name in set(SEQUENCES) - {"t3"}:
        assert ranked(tmp_path / "out", name).exists()
    assert not any(p.startswith("t3") for p in os.listdir(tmp_path / "out"))
    timings = json.loads((tmp_path / "out" / "timings.json").read_text())
    assert timings["targets"]["t3"]["status"] == "invalid"
    assert sorted(n for r in timings["ranks"] for n in r["targets"]) == sorted(set(SEQUENCES) - {"t3"})


def test_a_rank_that_fails_as_a_whole_fails_its_targets_and_the_others_finish(tmp_path, tiny_weights):
    """Rank 1 dies (SIGKILL on its first forward: a stand-in for the OOM killer); rank 0's targets are
    written, rank 1's are reported failed by name, the exit status is 1, nothing hangs."""
    fasta = _fasta(tmp_path / "five.fasta", SEQUENCES)
    hook = tmp_path / "sitecustomize.py"
    hook.write_text(
        "import os, signal, sys\n"
        "if os.environ.get('KILL_RANK_MARK'):\n"
        "    import alphafold_mem.predict.runner\n"
        "    r = sys.modules['alphafold_mem.predict.runner']\n"
        "    real = r._run_target\n"
        "    def _run_target(ctx, lm, run):\n"
        "        if os.path.exists(os.environ['KILL_RANK_MARK'] + run.name):\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return real(ctx, lm, run)\n"
        "    r._run_target = _run_target\n"
    )
    assigned = shares([_target(n, len(s), order=k) for k, (n, s) in enumerate(SEQUENCES.items())], 2)
    mark = str(tmp_path / "kill_")
    for name in assigned[1][:1]:
        open(mark + name, "w").close()
    env_extra = {"KILL_RANK_MARK": mark, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    old = {k: os.environ.get(k) for k in env_extra}
    os.environ.update(env_extra)
    try:
        run = _predict(fasta, tmp_path / "out", tiny_weights, "--devices", "2")
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert run.returncode == 1, run.stderr
    assert "error: device rank 1" in run.stderr and "SIGKILL" in run.stderr
    for name in assigned[0]:
        assert ranked(tmp_path / "out", name).exists()
    timings = json.loads((tmp_path / "out" / "timings.json").read_text())
    assert {n for n, v in timings["targets"].items() if v["status"] == "failed"} >= set(assigned[1][:1])
    assert {n for n, v in timings["targets"].items() if v["status"] == "ok"} == set(assigned[0])


def test_devices_with_dap_is_refused_in_one_line(tmp_path, tiny_weights, capsys):
    fasta = _fasta(tmp_path / "one.fasta", {"t1": SEQUENCES["t1"]})
    assert main(["predict", str(fasta), "--out", str(tmp_path / "out"), "--devices", "2", "--dap", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --devices with --dap is not supported yet: run --devices N (one target per device) or --dap P"
    ]
    with pytest.raises(SystemExit) as exit_:  # checked as the command line is read
        main(["predict", str(fasta), "--out", str(tmp_path / "out"), "--devices", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "alphafold-mem predict: error: argument --devices: expected a positive integer, got '0' "
        "(alphafold-mem predict --help lists the options)"
    ]


def test_predict_runs_only_the_named_targets_and_reports_no_rejected_record(tmp_path, tiny_weights):
    """``predict(targets=...)``, one rank's run: only the named valid targets are run and reported; the
    inputs are read silently (the launcher reported the rejected record once)."""
    records = {"t2": SEQUENCES["t2"], "bad": "MKV1LAG", "t3": SEQUENCES["t3"]}
    fasta = _fasta(tmp_path / "three.fasta", records)
    lines: list[str] = []
    run = alphafold_mem.predict(
        fasta,
        tmp_path / "out",
        weights=tiny_weights,
        single_sequence=True,
        num_recycles=0,
        device="cpu",
        log=lines.append,
        targets=["t3"],
    )
    assert run.exit_code == 0 and [r.name for r in run.results] == ["t3"]
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.pdb")) == [
        "t3/ranked_0.pdb",
        "t3/tiny_seed_0.pdb",
    ]
    assert not any("bad" in line or line.startswith("error:") for line in lines), lines
