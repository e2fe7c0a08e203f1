"""An interrupted first run resumes: SIGINT (or SIGTERM) during training finishes the step under way,
writes ``last.ckpt`` and stops; ``--resume`` from it then gives the uninterrupted run's weights, and
``metrics.csv`` holds every step once (issue 36, item 4)."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings

import pytest
import torch

from .conftest import REPO_DATA

pytestmark = pytest.mark.filterwarnings("ignore")

# the CLI, with a signal sent to the process itself at the end of the given step: the real handler
# path, at a step known in advance (a timed kill from outside would race the steps of the tiny model);
# one fresh interpreter runs the CLI once per (signal, step, argv) in turn, each run's stderr after a
# marker line, and prints the exit codes (one interpreter start for both signals, ~4.5 s CPU less)
_SIGNAL_AT_STEP = """
import json, os, signal, sys
from alphafold_mem.train.progress import StepTimer
from alphafold_mem.cli import main
sig, at = None, None
end = StepTimer.on_train_batch_end
def on_end(self, trainer, *a):
    end(self, trainer, *a)
    if trainer.global_step == at:
        os.kill(os.getpid(), sig)
StepTimer.on_train_batch_end = on_end
codes = []
for name, at, argv in json.loads(sys.argv[1]):
    sig = getattr(signal, name)
    print(f"=== run {name} ===", file=sys.stderr, flush=True)
    codes.append(main(argv))
    sys.stderr.flush()
print(json.dumps(codes))
"""
SIGNALS = ("SIGINT", "SIGTERM")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    if not (REPO_DATA / "mmcif" / "2q2k.cif").is_file():
        pytest.skip("data/ example set not shipped")
    d = tmp_path_factory.mktemp("train_data")
    (d / "mmcif").mkdir()
    shutil.copy(REPO_DATA / "mmcif" / "2q2k.cif", d / "mmcif" / "2q2k.cif")
    return d


def _train_args(data_dir, out, *extra) -> list[str]:
    argv = ["train", "--data", str(data_dir), "--out", str(out)]
    argv += ["--preset", "tiny", "--no-progress", "--accelerator", "cpu", "--held-out", "1a8o"]
    argv += ["--set", "num_recycles=0", "--set", "data.crop_size=16", "--set", "data.max_msa_clusters=4"]
    argv += ["--set", "data.max_extra_msa=4", "--ckpt-every", "200", "--val-every", "0", "--threads", "1", *extra]
    return argv


def _main(argv: list[str]) -> int:
    """``alphafold-mem`` in this process (~6 s CPU less than a fresh interpreter)."""
    from alphafold_mem.cli.main import main  # the CLI's imports are the test's only where it runs

    threads = torch.get_num_threads()
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)  # --threads 1 set it for this process


@pytest.fixture(scope="module")
def full(data_dir, tmp_path_factory):
    """The uninterrupted 4-step run both signals are compared with: one run for the module, in this
    process (the same command line)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "full"
    assert _main(_train_args(data_dir, out, "--max-steps", "4")) == 0
    return out


@pytest.fixture(scope="module")
def stopped(data_dir, tmp_path_factory):
    """Each signal's stopped run (4 steps asked, the signal at the end of step 2), in one fresh
    interpreter (the handler path): ``{signal: (exit code, that run's stderr, its output folder)}``."""
    root = tmp_path_factory.mktemp("stopped")
    runs = [[sig, 2, _train_args(data_dir, root / sig, "--max-steps", "4")] for sig in SIGNALS]
    cmd = [sys.executable, "-c", _SIGNAL_AT_STEP, json.dumps(runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    errs = proc.stderr.split("=== run ")[1:]
    assert len(codes) == len(errs) == len(SIGNALS), proc.stderr[-2000:]
    return {sig: (code, err, root / sig) for sig, code, err in zip(SIGNALS, codes, errs)}


def _steps(out):
    with open(out / "logs" / "metrics.csv", newline="") as fh:
        return [int(float(r["step"])) for r in csv.DictReader(fh) if r.get("train/loss")]


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.parametrize("sig", SIGNALS)
def test_interrupted_first_run_resumes_to_the_uninterrupted_weights(data_dir, full, stopped, sig, capfd):
    code, stderr, part = stopped[sig]
    assert stderr.startswith(f"{sig} ===") and code == 0, stderr[-2000:]
    last = part / "checkpoints" / "last.ckpt"
    said = re.search(rf"train: stopped by {sig} after step (\d+); saved (\S+);", stderr)
    assert said and said.group(1) == "2" and said.group(2) == str(last), stderr[-2000:]
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 2
    assert len(_steps(part)) == 2  # the default checkpoint interval (200) would have left nothing
    assert "validation: no held-out chain is present" in stderr  # 1a8o is held out; only 2q2k is here
    # the resume in this process, as the uninterrupted run (the signal's fresh process is the one above)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what a fresh interpreter would print (this module ignores them)
        code, err = (
            _main(_train_args(data_dir, part, "--resume", str(last), "--max-steps", "4")),
            capfd.readouterr().err,
        )
    assert code == 0, err[-2000:]
    said = err + "".join(str(w.message) for w in caught)
    assert "not resumable" not in said  # Lightning's warning: the training loader keeps its place
    assert _steps(part) == _steps(full) and len(set(_steps(part))) == 4
    a, b = _weights(full / "checkpoints" / "last.ckpt"), _weights(last)
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ, first {differ[0]}"


def test_interrupt_handlers_are_restored_after_training():
    from alphafold_mem.train.progress import InterruptCheckpoint

    before = signal.getsignal(signal.SIGINT)
    cb = InterruptCheckpoint(log=lambda line: None)
    cb.on_train_start(None, None)
    assert signal.getsignal(signal.SIGINT) == cb._handler
    cb.on_train_end(None, None)
    assert signal.getsignal(signal.SIGINT) is before
