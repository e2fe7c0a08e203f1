"""``train`` on a full or read-only disk (issue 35 item 5): one line naming the file and the reason,
exit status non-zero, the checkpoints written before intact."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest
import torch

from alphafold_mem import io as af_io
from alphafold_mem.cli.main import main

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


def _argv(data_dir, out, *extra):
    argv = ["train", "--data", str(data_dir), "--out", str(out), "--preset", "tiny", "--no-progress"]
    argv += ["--accelerator", "cpu", "--held-out", "1a8o", "--threads", "1", "--num-workers", "0"]
    argv += ["--set", "num_recycles=0", "--set", "data.crop_size=16", "--set", "data.max_msa_clusters=4"]
    return argv + ["--set", "data.max_extra_msa=4", "--ckpt-every", "1", "--val-every", "0", *extra]


def test_disk_full_at_a_checkpoint_is_one_line_and_earlier_checkpoints_stay(data_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    real_fsync = af_io._fsync
    writes = []

    def full(path):  # the disk fills after the first step's two checkpoints (step=1.ckpt, last.ckpt)
        if os.path.dirname(path) == str(out / "checkpoints"):
            writes.append(path)
            if len(writes) > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(path)

    monkeypatch.setattr(af_io, "_fsync", full)
    code = main(_argv(data_dir, out, "--max-steps", "3"))
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("alphafold-mem train: error:")]
    assert len(lines) == 1 and "No space left on device" in lines[0], err
    assert f"cannot write {out / 'checkpoints'}" in lines[0]
    ckpts = out / "checkpoints"
    for kept in ("step=1.ckpt", "last.ckpt"):
        assert torch.load(ckpts / kept, map_location="cpu", weights_only=False)["global_step"] == 1
    assert not list(ckpts.glob(".*.tmp"))


def test_read_only_out_is_one_line(data_dir, tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)]).returncode:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:  # a fresh interpreter: the logging handlers of an earlier in-process run write to closed captures
        run = subprocess.run(
            [sys.executable, "-m", "alphafold_mem.cli", *_argv(data_dir, d / "out", "--max-steps", "1")],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        subprocess.run(["umount", str(d)])
    err = run.stderr
    assert run.returncode != 0 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("alphafold-mem train: error:")]
    assert len(lines) == 1 and "Read-only file system" in lines[0] and str(d) in lines[0], err
