"""The ``alphafold-mem predict`` command line the predict fault tests run: a tiny checkpoint on CPU,
single-sequence, no recycling, no memory tracking (fast and deterministic)."""

from __future__ import annotations

import faulthandler
import json
import sys
from pathlib import Path

from alphafold_mem.cli.main import main
from alphafold_mem.predict.layout import prediction_path


def predict_args(fasta: Path, out: Path, weights: Path, *extra: str) -> list[str]:
    """Arguments of :func:`alphafold_mem.cli.main.main` for ``predict fasta --out out --weights weights``."""
    return [
        "predict",
        str(fasta),
        "--out",
        str(out),
        "--weights",
        str(weights),
        "--device",
        "cpu",
        "--single-sequence",
        "--num-recycles",
        "0",
        "--no-track-memory",
        *extra,
    ]


def predict_command(fasta: Path, out: Path, weights: Path, *extra: str) -> list[str]:
    """The same run as a subprocess command (this interpreter, ``-m alphafold_mem.cli``)."""
    return [sys.executable, "-m", "alphafold_mem.cli", *predict_args(fasta, out, weights, *extra)]


def main_bounded(capfd, argv: list[str], timeout: float) -> tuple[int, str]:
    """``main(argv)`` in this process (a launcher's ranks are still spawned interpreters), bounded as a
    subprocess would be: after ``timeout`` seconds a hang ends this test process, with every thread's
    stack. The exit status and what this run wrote to stderr, the ranks' lines included."""
    capfd.readouterr()  # only this run's lines
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        code = main(argv)
    finally:
        faulthandler.cancel_dump_traceback_later()
    return code, capfd.readouterr().err


def prediction(out, name: str, suffix: str = ".pdb", weights=None, seed: int = 0) -> Path:
    """The file ``suffix`` of a prediction of target ``name`` in the layout,
    ``<out>/<name>/<model>_seed_<seed><suffix>`` (:mod:`alphafold_mem.predict.layout`): the one made
    with ``weights`` (a file name is enough: ``tiny.ckpt`` -> ``tiny_seed_0``) and ``seed``, or
    without ``weights`` the best one of ``ranking_debug.json``."""
    if weights is None:
        best = json.loads((Path(out) / name / "ranking_debug.json").read_text())["order"][0]
        return Path(out) / name / f"{best}{suffix}"
    return Path(prediction_path(out, name, weights, seed, suffix))


def ranked(out, name: str, rank: int = 0) -> Path:
    """``<out>/<name>/ranked_<rank>.pdb``."""
    return Path(out) / name / f"ranked_{rank}.pdb"
