"""Faults under ``predict --dap 2`` (issue 35 items 2, 3): a record too short to share fails in the
pre-flight and the batch goes on; a SIGKILLed launcher leaves no rank alive and nothing written
after it; a killed rank 0 is named as the failed rank. Each starts several interpreters: SLOW_TESTS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from alphafold_mem.cli import main
from alphafold_mem.config import model_config
from alphafold_mem.model import AlphaFold
from alphafold_mem.weights import save_checkpoint
from tests.predict_cli import predict_args, predict_command, prediction

ROOT = Path(__file__).resolve().parents[1]
#: "a" and "c" of one length: the pre-flight traces the model once for both
RECORDS = {"a": "MKPVTLYDVAEYAGVSYQTV", "short": "MK", "c": "LNYIPNRMKPVTLYDVAEYA"}

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("dap_faults")
    save_checkpoint(AlphaFold(model_config("tiny")), d / "tiny.ckpt")
    (d / "three.fasta").write_text("".join(f">{k}\n{v}\n" for k, v in RECORDS.items()))
    return d


def _argv(tiny: Path, out: Path, *extra: str) -> list[str]:
    return predict_command(tiny / "three.fasta", out, tiny / "tiny.ckpt", "--dap", "2", *extra)


def _ranks(launcher: int) -> list[int]:
    """PIDs of the launcher's spawned ranks, in start order (the resource tracker left out)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher and b"spawn_main" in cmd:
            pids.append(int(entry.name))
    return sorted(pids)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended


def _start(argv: list[str], log: Path) -> tuple[subprocess.Popen, list[int]]:
    """Start a run and wait until its ranks have loaded the weights (the 'weights:' line)."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 300
    while "weights:" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, log.read_text()
    ranks = _ranks(proc.pid)
    assert len(ranks) == 2, ranks
    return proc, ranks


def test_a_record_too_short_to_share_fails_in_the_preflight_and_the_batch_goes_on(tiny, tmp_path, capfd):
    """The launcher in this process (``main([...])``; the two tests below start it as a command): the
    spawned ranks run the batch."""
    out = tmp_path / "out"
    code = main(predict_args(tiny / "three.fasta", out, tiny / "tiny.ckpt", "--dap", "2"))
    stderr = capfd.readouterr().err
    assert code == 1, stderr
    assert "Traceback" not in stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "record 'short'" in errors[0]
    assert "2 residue(s) cannot be shared by --dap 2 processes" in errors[0]
    assert stderr.index(errors[0]) < stderr.index("[1/3] a:")  # in the pre-flight, before model work
    for name in ("a", "c"):
        assert json.loads(prediction(out, name, "_scores.json").read_text())["length"] == len(RECORDS[name])
    assert not list(out.glob("short*"))
    timings = json.loads((out / "timings.json").read_text())
    assert {k: v["status"] for k, v in timings["targets"].items()} == {"a": "ok", "short": "failed", "c": "ok"}
    assert "1 of 3 target(s) rejected or failed" in stderr


def test_sigkill_of_the_launcher_leaves_no_rank_and_nothing_written_after(tiny, tmp_path):
    out = tmp_path / "out"
    launcher, ranks = _start(_argv(tiny, out), tmp_path / "log")
    launcher.send_signal(signal.SIGKILL)
    killed_at = time.time()
    launcher.wait(10)
    time.sleep(10)
    assert [pid for pid in ranks if _alive(pid)] == []
    late = [f.name for f in out.rglob("*") if f.stat().st_mtime > killed_at + 0.5]
    assert late == []


def test_a_killed_rank_0_is_named_as_the_failed_rank(tiny, tmp_path):
    log = tmp_path / "log"
    launcher, ranks = _start(_argv(tiny, tmp_path / "out"), log)
    os.kill(ranks[0], signal.SIGKILL)
    assert launcher.wait(120) == 1
    err = log.read_text()
    assert "rank 0 failed" in err and "was killed by SIGKILL" in err, err
    assert "rank 1 failed" not in err
    time.sleep(1)
    assert not _alive(ranks[1])
