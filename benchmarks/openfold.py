"""Side by side with OpenFold: time, CPU time and peak-RSS growth of the same forward (or training
step), same inputs, same measure, each run in a fresh process (:mod:`.standalone.openfold_worker`); the
driver of ``scripts/compare_openfold.py`` (a CLI over :func:`openfold_workspace`, :func:`run_cell` and
:func:`median_cell`), which with ``--ablation-out`` also adds the OpenFold section to an
``alphafold-mem ablate`` result directory (:func:`run_openfold`).

OpenFold is imported from a checkout the user names (``openfold_src``; nothing of it is copied). It
is not pip-installable and its CUDA extension cannot be built on a CPU machine; its one compiled
import on the CPU path gets a pure-PyTorch stand-in written to a temporary directory at run time
(with a warning). OpenFold needs ``ml_collections`` and ``dm-tree``: ``openfold_python`` is a Python
that has them (e.g. a venv with ``pip install torch numpy ml-collections dm-tree biopython scipy``).

Both sides get random weights (time and memory do not depend on their values) and the same random
features (:func:`alphafold_mem.testing.random_features`, OpenFold's layout with a trailing recycling
dim of 1), one thread each.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from alphafold_mem.hugepages import environment_as_found

from .standalone.openfold_worker import SETTINGS, STAND_IN, TRAINING_SETTINGS
from .standalone.rss import ALLOCATORS

__all__ = [
    "ALLOCATORS",
    "OpenFoldSetup",
    "SETTINGS",
    "TRAINING_SETTINGS",
    "median_cell",
    "openfold_workspace",
    "run_cell",
    "run_openfold",
    "run_ratios",
    "write_features",
]

WORKER = Path(__file__).resolve().parent / "standalone" / "openfold_worker.py"
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class OpenFoldSetup:
    """Model and inputs of the comparison (defaults: issue 6's configuration, model_1_ptm, 48 + 4
    blocks, N_seq 16, N_extra 64, 2 templates)."""

    openfold_src: Optional[str] = None
    openfold_python: str = sys.executable
    preset: str = "model_1_ptm"
    n_seq: int = 16
    n_extra: int = 64
    templates: int = 2
    evo_blocks: int = 48
    extra_blocks: int = 4
    mode: str = "inference"
    threads: int = 1
    timeout: float = 3600.0

    def describe(self) -> dict:
        return {
            k: getattr(self, k)
            for k in ("preset", "n_seq", "n_extra", "templates", "evo_blocks", "extra_blocks", "mode", "threads")
        } | {"openfold_src": self.openfold_src}


def write_features(path: str, n_res: int, n_seq: int, n_extra: int, n_templ: int) -> None:
    """Random features of the given sizes in OpenFold's layout (trailing recycling dim of 1)."""
    import numpy as np
    import torch

    from alphafold_mem.config import model_config
    from alphafold_mem.geometry import all_atom
    from alphafold_mem.io import atomic_write
    from alphafold_mem.testing import random_features

    batch = random_features(model_config("model_1_ptm"), n_res, n_seq, n_extra, n_templ=n_templ, seed=0)
    batch.update(
        {
            k: v.to(torch.float32) if v.is_floating_point() else v
            for k, v in all_atom.make_atom14_masks(batch["aatype"]).items()
        }
    )
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **{k: v.unsqueeze(-1).numpy() for k, v in batch.items()})


@contextlib.contextmanager
def openfold_workspace(setup: OpenFoldSetup) -> Iterator[str]:
    """A temporary directory holding the stand-in module and the warm-up features."""
    with tempfile.TemporaryDirectory() as tmp:
        if setup.openfold_src:
            warnings.warn(
                "OpenFold's compiled attn_core_inplace_cuda is replaced by a pure-PyTorch stand-in "
                "(same softmax, not in place)",
                stacklevel=3,
            )
        Path(tmp, "attn_core_inplace_cuda.py").write_text(STAND_IN)
        write_features(os.path.join(tmp, "warmup.npz"), 16, 4, 8, setup.templates)
        yield tmp


def run_cell(
    setup: OpenFoldSetup, side: str, n_res: int, setting: str, allocator: str, tmp: str, alternations: int = 3
) -> dict:
    """One fresh worker process: ``{"seconds", "cpu_s", "rss_bytes"[, "counter_bytes"]}`` or ``{"error": ...}``;
    for ``side="both"`` (both models in one process, timed alternately ``alternations`` times, run by
    OpenFold's Python) ``{"openfold_seconds": [...], "ours_seconds": [...]}``."""
    features = os.path.join(tmp, f"features_{n_res}.npz")
    if not os.path.exists(features):
        write_features(features, n_res, setup.n_seq, setup.n_extra, setup.templates)
    python = setup.openfold_python if side in ("openfold", "both") else sys.executable
    cmd = [
        python,
        str(WORKER),
        "--side",
        side,
        "--setting",
        setting,
        "--mode",
        setup.mode,
        "--features",
        features,
        "--warmup-features",
        os.path.join(tmp, "warmup.npz"),
        "--preset",
        setup.preset,
        "--evo-blocks",
        str(setup.evo_blocks),
        "--extra-blocks",
        str(setup.extra_blocks),
        "--stand-in-dir",
        tmp,
        "--openfold-src",
        setup.openfold_src or "",
        "--threads",
        str(setup.threads),
        "--alternations",
        str(alternations),
    ]
    # the environment as the user left it (without the huge-page switch a request in this process added):
    # OpenFold runs without it; our worker sets it itself, as the command line does
    env = {
        **environment_as_found(os.environ),
        **ALLOCATORS[allocator],
        "OMP_NUM_THREADS": str(setup.threads),
        "PYTHONPATH": str(ROOT),
    }
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=setup.timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if proc.returncode != 0:
        return {"error": " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_ratios(ours: Sequence[dict], openfold: Sequence[dict], key: str = "seconds") -> list[float]:
    """``ours[i][key] / openfold[i][key]`` for each pair of interleaved runs (run i of each side ran
    back to back), so a table shows how far one run's ratio moves on this machine, not only the
    median; pairs where either run failed are skipped."""
    return [
        o[key] / f[key]
        for o, f in zip(ours, openfold)
        if "error" not in o and "error" not in f and f.get(key, 0) > 0 and key in o
    ]


def median_cell(runs: Sequence[dict]) -> dict:
    """The median of each numeric measure over repeated cells (other fields, e.g. ``malloc``, from the
    first run), or the first error."""
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        return {"error": errors[0]}
    return {k: statistics.median(r[k] for r in runs) if isinstance(v, (int, float)) else v for k, v in runs[0].items()}


def run_openfold(
    setup: OpenFoldSetup,
    store,
    n_res: Sequence[int],
    settings: Sequence[str] = SETTINGS,
    tick: Callable[[str], None] = lambda label: None,
    config: Optional[dict] = None,
) -> None:
    """The OpenFold section of an ablation result store (:class:`alphafold_mem.ablation.results.ResultStore`):
    both sides, every setting and size, allocator ``mmap``; rows ``openfold:<setting>`` /
    ``ours:<setting>`` on chain ``n_res=<N>`` (seconds, CPU seconds, RSS growth; ours also the storage
    counter); cells already in ``store`` are skipped."""
    from alphafold_mem.ablation.results import row

    cfg = {
        **(config or {}),
        **setup.describe(),
        "allocator": "mmap (MALLOC_MMAP_THRESHOLD_=65536)",
        "measure": "fresh process per cell, one forward after a warm-up",
    }
    with openfold_workspace(setup) as tmp:
        for n in n_res:
            for setting in settings:
                for side in ("openfold", "ours"):
                    name, key = f"{side}:{setting}", f"n_res={n}"
                    if store.done("openfold", name, key):
                        continue
                    tick(f"openfold {name} N_res {n}")
                    res = run_cell(setup, side, n, setting, "mmap", tmp)
                    common = dict(n_res=n, policy={"setting": setting, "side": side}, config=cfg)
                    if "error" in res:
                        store.add([row("openfold", name, key, status="failed", reason=res["error"][:400], **common)])
                        continue
                    rows = [
                        row("openfold", name, key, "seconds", res["seconds"], **common),
                        row("openfold", name, key, "rss_growth_bytes", res["rss_bytes"], **common),
                    ]
                    if "cpu_s" in res:
                        rows.append(row("openfold", name, key, "cpu_seconds", res["cpu_s"], **common))
                    if "counter_bytes" in res:
                        rows.append(row("openfold", name, key, "peak_counter_bytes", res["counter_bytes"], **common))
                    store.add(rows)
