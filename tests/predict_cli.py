"""The ``alphafold-mem predict`` command line the predict fault tests run: a tiny checkpoint on CPU,
single-sequence, no recycling, no memory tracking (fast and deterministic)."""

from __future__ import annotations

import sys
from pathlib import Path


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
