"""A staging directory left by a killed ``predict`` (SIGKILL during a target's write) is removed the
next time that target is written; one of a live process, of another host or of another target is
kept."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys

import pytest

from alphafold_mem.io import WriteError
from alphafold_mem.predict.outputs import _owner, remove_stale_stages


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_the_dead_processes_stage_of_this_target_goes(tmp_path):
    host = _owner().rsplit("-", 1)[0]
    dead = _dead_pid()
    stages = {
        "dead": f".T1.{host}-{dead}.ab12cd.tmp",
        "live": f".T1.{host}-{os.getpid()}.ef34gh.tmp",
        "other_host": f".T1.elsewhere-{dead}.ij56kl.tmp",
        "other_target": f".T10.{host}-{dead}.mn78op.tmp",
    }
    for folder in stages.values():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "T1.pdb").write_text("partial\n")
    (tmp_path / "T1.pdb").write_text("a finished result\n")
    removed = remove_stale_stages(str(tmp_path), "T1")
    assert removed == [str(tmp_path / stages["dead"])]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["T1.pdb", stages["live"], stages["other_host"], stages["other_target"]])
    assert (tmp_path / "T1.pdb").read_text() == "a finished result\n"


def test_a_killed_writer_leaves_a_stage_that_the_next_write_removes(tmp_path, monkeypatch):
    """A real process stages target T (the name it would use) and is SIGKILLed; the next
    ``write_target_outputs`` of T removes its folder (here a write that then fails: the stale folder
    goes all the same, and the failed write leaves none of its own)."""
    code = (
        "import os, sys, tempfile, time\n"
        "from alphafold_mem.predict.outputs import _owner\n"
        "d = tempfile.mkdtemp(prefix='.T.' + _owner() + '.', suffix='.tmp', dir=sys.argv[1])\n"
        "open(os.path.join(d, 'T.pdb'), 'w').write('half')\n"
        "print(d, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    stage = proc.stdout.readline().strip()
    assert os.path.isdir(stage) and remove_stale_stages(str(tmp_path), "T") == []  # alive: kept
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    outputs = importlib.import_module("alphafold_mem.predict.outputs")

    def fail(paths, *a):
        raise WriteError(28, "No space left on device", paths["pdb"])

    monkeypatch.setattr(outputs, "check_still_ours", lambda *a: None)
    monkeypatch.setattr(outputs, "_write_all", fail)
    with pytest.raises(WriteError):
        outputs.write_target_outputs(outputs.output_paths(str(tmp_path), "T", True), None, {}, {}, "")
    assert not os.path.exists(stage) and not list(tmp_path.glob(".*.tmp"))
