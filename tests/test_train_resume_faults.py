"""Resume after a killed run: a missing or damaged ``last.ckpt`` falls back to the newest complete
``step=N.ckpt`` (with a line saying so), the settings that change numbers (threads) come back from
the checkpoint, ``metrics.csv`` keeps every step once, and a damaged checkpoint is one line."""

import csv
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

from alphafold_mem.train.resume import remove_stale_temporaries, resolve_resume

from .conftest import REPO_DATA

pytestmark = pytest.mark.filterwarnings("ignore")


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
    argv += ["--set", "data.max_extra_msa=4", "--ckpt-every", "2", "--val-every", "0", *extra]
    return argv


def _train(data_dir, out, *extra):
    argv = [sys.executable, "-m", "alphafold_mem.cli", *_train_args(data_dir, out, *extra)]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}  # the default a resumed run must not keep
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


def _main(argv: list[str]) -> int:
    """``alphafold-mem`` in this process (one interpreter start fewer than ``_train``, ~5 s CPU)."""
    from alphafold_mem.cli.main import main  # the CLI's imports are the test's only where it runs

    threads = torch.get_num_threads()
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)  # --threads 1 set it for this process


NOISE = ("Tip:", "litlogger", "is deprecated", "LeafSpec", "weights_only")  # Lightning's, left out


def test_killed_first_last_ckpt_write_resumes_bit_exact_from_the_newest_complete(data_dir, tmp_path, capfd):
    # the uninterrupted reference and the first (later "killed") run in this process, with one thread
    # given on the command line; the resumed run is a fresh process (it must take its threads from
    # the checkpoint, not the default) and its stderr, a fresh interpreter's, is checked for the noise
    # too: Lightning's log lines (the Tip) reach it, not capfd in this process; the warnings reach both
    assert _main(_train_args(data_dir, tmp_path / "full", "--max-steps", "4", "--threads", "1")) == 0
    part = tmp_path / "part"
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what a fresh interpreter would print (this module ignores them)
        code = _main(_train_args(data_dir, part, "--max-steps", "2", "--threads", "1"))
    first = capfd.readouterr().err + "".join(str(w.message) for w in caught)
    assert code == 0, first[-2000:]
    for noise in NOISE:
        assert noise not in first, first[-2000:]
    ckpts = part / "checkpoints"
    # as after SIGKILL while last.ckpt was written: a cut file and the writer's temporary left behind
    last = ckpts / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    (ckpts / ".last.ckpt.k1ll3d_x.tmp").write_bytes(b"partial")
    (ckpts / "notes.tmp").write_text("not ours")
    resumed = _train(data_dir, part, "--resume", str(last), "--max-steps", "4")  # --threads not given again
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    err = resumed.stderr
    for noise in NOISE:  # the same Trainer set-up as the first run's, and Lightning's resume path
        assert noise not in err, err[-2000:]
    assert f"resume: {last} is damaged or truncated; resuming from {ckpts / 'step=2.ckpt'}" in err
    assert "removed 1 temporary file(s)" in err and (ckpts / "notes.tmp").exists()
    assert not (ckpts / ".last.ckpt.k1ll3d_x.tmp").exists()
    a, b = _weights(tmp_path / "full" / "checkpoints" / "last.ckpt"), _weights(ckpts / "last.ckpt")
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ, first {differ[0]}"
    with open(part / "logs" / "metrics.csv", newline="") as fh:
        steps = [int(float(r["step"])) for r in csv.DictReader(fh) if r.get("train/loss")]
    with open(tmp_path / "full" / "logs" / "metrics.csv", newline="") as fh:
        full_steps = [int(float(r["step"])) for r in csv.DictReader(fh) if r.get("train/loss")]
    assert steps == full_steps and len(steps) == len(set(steps)) == 4


def test_missing_last_ckpt_falls_back_and_damaged_step_is_one_line(tmp_path):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    for n in (2, 4):
        torch.save({"global_step": n}, ckpts / f"step={n}.ckpt")
    (ckpts / "step=6.ckpt").write_bytes((ckpts / "step=4.ckpt").read_bytes()[:100])  # cut
    lines = []
    assert resolve_resume(ckpts / "last.ckpt", lines.append) == str(ckpts / "step=4.ckpt")
    newest = ckpts / "step=4.ckpt"
    assert lines == [
        f"resume: {ckpts / 'last.ckpt'} is missing; resuming from {newest}, the newest complete checkpoint"
    ]
    with pytest.raises(ValueError) as exc:
        resolve_resume(ckpts / "step=6.ckpt", lines.append)
    assert "\n" not in str(exc.value) and "damaged or truncated" in str(exc.value) and "step=4.ckpt" in str(exc.value)
    (ckpts / ".step=6.ckpt.abcd1234.tmp").write_text("x")
    (ckpts / "keep.tmp").write_text("x")
    assert remove_stale_temporaries(ckpts, lines.append) == [".step=6.ckpt.abcd1234.tmp"]
    assert (ckpts / "keep.tmp").exists()


def test_train_resume_of_a_truncated_checkpoint_is_one_line(tmp_path, capsys):
    from alphafold_mem.cli import main

    cut = tmp_path / "model.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, cut)
    cut.write_bytes(cut.read_bytes()[:500])
    rc = main(["train", "--data", str(tmp_path), "--resume", str(cut), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert f"{cut}: damaged or truncated checkpoint" in line


def test_numeric_settings_travel_in_the_checkpoint_and_come_back(tmp_path):
    from alphafold_mem.train.resume import numeric_settings, restore_numeric_settings

    before = numeric_settings()
    saved = {**before, "float32_matmul_precision": "medium", "threads": 1}
    lines = []
    try:
        restore_numeric_settings(saved, lines.append, keep=("threads",))
        assert torch.get_float32_matmul_precision() == "medium" and torch.get_num_threads() == before["threads"]
        was = before["float32_matmul_precision"]
        assert lines == [f"resume: float32_matmul_precision 'medium' restored from the checkpoint (was {was!r})"]
    finally:
        torch.set_float32_matmul_precision(before["float32_matmul_precision"])
