"""``train --threads N`` holds under Lightning's subprocess launcher (``--strategy ddp``, ``--dap``),
which sets torch's intra-op threads to cores / processes unless ``OMP_NUM_THREADS`` is set."""

from __future__ import annotations

import os

import torch
from lightning.fabric.utilities.distributed import _set_num_threads_if_needed, _suggested_max_num_threads

import alphafold_mem.train as train_package
from alphafold_mem.cli import main


def test_threads_survive_the_launchers_thread_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    wanted = _suggested_max_num_threads(2) + 1  # differs from what the launcher would choose
    seen = {}

    def fake_train(*args, **kwargs):  # what the DDP launcher does in this process before it starts ranks
        _set_num_threads_if_needed(num_processes=2)
        seen.update(threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"))

    monkeypatch.setattr(train_package, "train", fake_train)
    before = torch.get_num_threads()
    try:
        argv = ["train", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--threads", str(wanted)]
        assert main([*argv, "--dap", "2"]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == {"threads": wanted, "omp": str(wanted)}  # the ranks it starts inherit the variable
    assert "OMP_NUM_THREADS" not in os.environ  # restored after training
