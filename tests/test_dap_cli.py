"""Dynamic axial parallelism end to end: ``alphafold-mem predict --dap 2`` writes what ``--dap 1``
writes; a failure on rank 1 ends both processes promptly with rank 1's message; ``alphafold-mem
train --dap 2`` (Lightning, DDP over both processes) reproduces the one-device run. These start
several interpreters each, so they are in SLOW_TESTS (``make test`` and CI run them).

The predict launcher runs in this process (``main([...])``): its ranks are the fresh interpreters
under test (spawned as from the command line; the launcher's own process is tested end to end by
``tests/test_predict_faults_dap.py``). ``train --dap 2`` is launched as a command: Lightning starts
its second rank by running the command line again."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import numpy as np
import torch

from alphafold_mem.cli import main
from alphafold_mem.config import model_config
from alphafold_mem.model import AlphaFold
from alphafold_mem.weights import save_checkpoint
from tests.predict_cli import prediction, ranked

ROOT = pathlib.Path(__file__).resolve().parents[1]
FASTA = ROOT / "data/fasta/per_entry/1lcd.fasta"
MSA = ROOT / "data/alignments/1lcd_A/jackhmmer_pool.a3m"


def _cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "alphafold_mem.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
    )


def _atoms(path: pathlib.Path) -> np.ndarray:
    return np.array(
        [
            [float(line[30:38]), float(line[38:46]), float(line[46:54])]
            for line in path.read_text().splitlines()
            if line.startswith("ATOM")
        ]
    )


def _forked_main(argv: list[str], env: dict) -> int:
    """``main(argv)`` with ``env`` in a process forked from this one (a fresh interpreter would import
    Lightning again: ~5 s CPU); its exit status."""

    def child() -> None:
        os.environ.update(env)
        os._exit(main(argv))

    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join(600)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return proc.exitcode


def test_predict_dap2_writes_what_dap1_writes(tmp_path, capfd):
    common = ["predict", str(FASTA), "--msa", str(MSA), "--device", "cpu", "--num-recycles", "0"]
    # both launched in this process: the fresh interpreters under test are the --dap 2 launcher's ranks
    one = main([*common, "--out", str(tmp_path / "dap1")])
    two = main([*common, "--out", str(tmp_path / "dap2"), "--dap", "2"])
    assert one == 0
    assert two == 0, capfd.readouterr().err
    files = sorted(p.relative_to(tmp_path / "dap1").as_posix() for p in (tmp_path / "dap1").rglob("*"))
    assert sorted(p.relative_to(tmp_path / "dap2").as_posix() for p in (tmp_path / "dap2").rglob("*")) == files
    assert "1lcd_A/ranked_0.pdb" in files and "1lcd_A/ranking_debug.json" in files
    # PDB coordinates have 3 decimals: a difference of ~1e-5 A can round one unit of the last digit apart
    a, b = _atoms(ranked(tmp_path / "dap1", "1lcd_A")), _atoms(ranked(tmp_path / "dap2", "1lcd_A"))
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-3 + 1e-9
    s1, s2 = (json.loads(prediction(tmp_path / d, "1lcd_A", "_scores.json").read_text()) for d in ("dap1", "dap2"))
    assert np.abs(np.array(s1["plddt"]) - np.array(s2["plddt"])).max() <= 0.01 + 1e-9  # written with 2 decimals
    pae1, pae2 = (
        np.array(json.loads(prediction(tmp_path / d, "1lcd_A", "_pae.json").read_text())[0]["predicted_aligned_error"])
        for d in ("dap1", "dap2")
    )
    assert np.abs(pae1 - pae2).max() <= 0.01 + 1e-9
    timings = json.loads((tmp_path / "dap2/timings.json").read_text())
    assert timings["dap"] == 2 and len(timings["ranks"]) == 2
    assert all("peak_mib" in r["1lcd_A/model"] for r in timings["ranks"])


def test_predict_failure_on_rank_1_ends_both(tmp_path, monkeypatch, capfd):
    """A collective of rank 1 raises (injected through a sitecustomize on the spawned ranks' path);
    rank 0 waits in that collective until the launcher (in this process) ends it. A tiny checkpoint:
    what runs before the first collective (weights, the pre-flight) is not under test."""
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent("""
        import os
        if os.environ.get("DAP_TEST_FAIL_RANK"):
            import torch.distributed as dist
            from alphafold_mem.distributed import comm
            _original = comm._all_to_all
            def _failing(*args, **kwargs):
                if dist.get_rank() == int(os.environ["DAP_TEST_FAIL_RANK"]):
                    import time
                    with open(os.environ["DAP_TEST_FAIL_STAMP"], "w") as fh:
                        fh.write(repr(time.time()))
                    raise RuntimeError("injected failure on rank 1")
                return _original(*args, **kwargs)
            comm._all_to_all = _failing
    """)
    )
    stamp = tmp_path / "failed_at"
    torch.manual_seed(0)
    save_checkpoint(AlphaFold(model_config("tiny")), tmp_path / "tiny.ckpt")
    monkeypatch.setenv("DAP_TEST_FAIL_RANK", "1")
    monkeypatch.setenv("DAP_TEST_FAIL_STAMP", str(stamp))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    code = main(
        [
            "predict",
            str(FASTA),
            "--single-sequence",
            "--weights",
            str(tmp_path / "tiny.ckpt"),
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out"),
            "--dap",
            "2",
        ]
    )
    assert time.time() - float(stamp.read_text()) < 60  # from the failure to the end of both processes
    assert code != 0
    err = capfd.readouterr().err
    assert "rank 1 failed" in err and "injected failure on rank 1" in err


def test_train_dap2_reproduces_one_device(tmp_path):
    """Lightning: 2 steps with dropout on ``tiny``; one device under DDP (Lightning re-seeds the same
    way) against two devices sharing every sample."""
    common = [
        "train",
        "--data",
        "data/",
        "--preset",
        "tiny",
        "--max-steps",
        "2",
        "--accelerator",
        "cpu",
        "--no-progress",
        "--val-every",
        "1000",
        "--threads",
        "1",
        "--ckpt-every",
        "1000",
    ]
    # --threads 1 holds in the launcher and its ranks (the CLI sets OMP_NUM_THREADS for Lightning's launcher)
    one = _forked_main([*common, "--strategy", "ddp", "--devices", "1", "--out", str(tmp_path / "one")], {})
    two = _cli(*common, "--dap", "2", "--out", str(tmp_path / "two"))
    assert one == 0
    assert two.returncode == 0, two.stderr[-3000:]

    def losses(run: str) -> np.ndarray:
        lines = (tmp_path / run / "logs/metrics.csv").read_text().splitlines()
        header = lines[0].split(",")
        rows = [dict(zip(header, line.split(","))) for line in lines[1:]]
        return np.array([float(r["train/loss"]) for r in rows if r.get("train/loss")])

    a, b = losses("one"), losses("two")
    assert len(a) == len(b) == 2
    np.testing.assert_allclose(b, a, rtol=1e-4)
