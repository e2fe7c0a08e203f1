"""The ablation's result rows: ``results.csv`` and ``results.json`` (the same rows), rewritten through
:func:`alphafold_mem.io.atomic_write` after every finished unit of work, so an interrupted run keeps
its partial grid and a re-run skips what is finished (``ok`` and ``skipped`` rows; ``failed`` rows
are retried).

One row per section x technique x chain x measure (x step for loss curves). Columns
(:data:`COLUMNS`):

==============  ===================================================================================
section         ``inference``, ``training``, ``scaling`` or ``openfold``
technique       :attr:`~alphafold_mem.ablation.techniques.Technique.name` (OpenFold rows: ``openfold:<setting>``,
                ``ours:<setting>``)
chain           record id (``1lcd_A``); ``n_res=<N>`` for scaling/OpenFold (synthetic inputs); ``train`` in training
measure         see :data:`MEASURES`; empty on a ``skipped``/``failed`` row
step            training step of a ``loss`` row (1-based), else empty
value           the number (float), empty when not measured
unit            ``bytes``, ``s``, ``Å``, ``pLDDT`` (0-100), ``1`` (a fraction or score)
status          ``ok``, ``skipped`` (cannot run here; see reason) or ``failed`` (raised; see reason)
reason          why skipped / failed, or how a value was obtained when it is not the usual way
n_res           residues of the input
policy          JSON: every MemoryPolicy field and the DAP size (training: also the trainer precision)
config          JSON: model preset, weights file and SHA-256 prefix, sizes, device, threads, seed, repeats
versions        JSON: alphafold_mem, torch, numpy, Python, platform, git commit
finished_at     UTC time the row was written (ISO 8601)
==============  ===================================================================================
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Iterable, Optional

import numpy
import torch

from ..io import atomic_write
from ..version import __version__

__all__ = ["COLUMNS", "MEASURES", "ResultStore", "read_rows", "row", "versions"]

COLUMNS = (
    "section",
    "technique",
    "chain",
    "measure",
    "step",
    "value",
    "unit",
    "status",
    "reason",
    "n_res",
    "policy",
    "config",
    "versions",
    "finished_at",
)

#: measure -> (unit, meaning); the documented measures of each section.
MEASURES = {
    # inference (per technique x chain)
    "peak_counter_bytes": (
        "bytes",
        "activation peak: storage counter alphafold_mem.memory.track_peak (parameters, inputs excluded)",
    ),
    "peak_rss_bytes": (
        "bytes",
        "activation peak by another mechanism: CPU peak-RSS growth of one forward in a fresh "
        "subprocess (VmHWM); CUDA torch.cuda.max_memory_allocated above the baseline",
    ),
    "predicted_peak_bytes": ("bytes", "planner prediction of the activation peak (estimate_breakdown, FakeTensorMode)"),
    "seconds": ("s", "median wall time of the interleaved repeats (one process)"),
    "ca_rmsd_to_reference": ("Å", "Cα-RMSD to the fp32 reference run after superposition"),
    "plddt_max_abs_diff": ("pLDDT", "max |ΔpLDDT| to the reference run"),
    "plddt_mean_abs_diff": ("pLDDT", "mean |ΔpLDDT| to the reference run"),
    "ptm_abs_diff": ("1", "|ΔpTM| to the reference run"),
    "mean_plddt": ("pLDDT", "mean pLDDT of this run"),
    "lddt_ca": ("1", "lDDT-Cα of this run against the experimental structure"),
    "tm_score": ("1", "TM-score of this run against the experimental structure (tmtools)"),
    "gdt_ts": ("1", "GDT-TS of this run against the experimental structure"),
    "lddt_ca_reference": ("1", "lDDT-Cα of the reference run (the same chain)"),
    "tm_score_reference": ("1", "TM-score of the reference run"),
    "gdt_ts_reference": ("1", "GDT-TS of the reference run"),
    # training (per technique)
    "loss": ("1", "training loss at a step (the AF2 loss as trained)"),
    "loss_max_rel_dev": ("1", "max over steps of |loss - reference loss| / |reference loss|"),
    "heldout_lddt_ca": ("1", "mean lDDT-Cα on the held-out chains after the K steps (trained weights, no EMA)"),
    "step_seconds": ("s", "median wall time of a training step"),
    "train_peak_bytes": ("bytes", "storage-counter peak of one training step (forward, AF2 loss, backward)"),
    # scaling (per technique x N_res)
    "measured_peak_bytes": ("bytes", "activation peak measured (storage counter) on synthetic inputs"),
    "predicted_total_bytes": ("bytes", "planner prediction: parameters + inputs + activations at full depth"),
    # openfold (per side x setting x N_res)
    "rss_growth_bytes": ("bytes", "peak-RSS growth of one forward in a fresh process (both sides alike)"),
    "cpu_seconds": ("s", "CPU time (user + system) of that process during the forward"),
}


def _git_commit() -> Optional[str]:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    """Software versions of this run (the ``versions`` column)."""
    return {
        "alphafold_mem": __version__,
        "git": _git_commit(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def row(
    section: str,
    technique: str,
    chain: str,
    measure: str = "",
    value=None,
    *,
    step=None,
    status: str = "ok",
    reason: str = "",
    n_res=None,
    policy=None,
    config=None,
) -> dict:
    """One result row (``policy``/``config`` dicts become JSON; ``unit`` comes from :data:`MEASURES`)."""
    if value is not None and not isinstance(value, str):
        value = float(value)
        if math.isnan(value):
            value = None
    return {
        "section": section,
        "technique": technique,
        "chain": chain,
        "measure": measure,
        "step": step,
        "value": value,
        "unit": MEASURES.get(measure, ("",))[0],
        "status": status,
        "reason": reason,
        "n_res": n_res,
        "policy": policy or {},
        "config": config or {},
        "versions": {},
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


class ResultStore:
    """The rows of ``out/results.json`` + ``out/results.csv``: loads what a previous run finished,
    answers :meth:`done`, and rewrites both files atomically on :meth:`add`."""

    def __init__(self, out_dir: str | os.PathLike, versions_info: Optional[dict] = None):
        self.out = Path(out_dir)
        self.versions = versions_info if versions_info is not None else versions()
        self.rows: list[dict] = []
        path = self.out / "results.json"
        if path.is_file():
            data = json.loads(path.read_text())
            self.rows = [r for r in data.get("rows", []) if r.get("status") != "failed"]

    def done(self, section: str, technique: str, chain: str, measure: Optional[str] = None) -> bool:
        """True when a finished (``ok``/``skipped``) row exists for the key (any measure if None)."""
        return any(
            r["section"] == section
            and r["technique"] == technique
            and r["chain"] == chain
            and (measure is None or r["measure"] == measure or r["status"] == "skipped")
            for r in self.rows
        )

    def get(
        self, section: str, measure: str, technique: Optional[str] = None, chain: Optional[str] = None
    ) -> list[dict]:
        """The ``ok`` rows of ``section`` with ``measure`` (filtered by technique / chain when given)."""
        return [
            r
            for r in self.rows
            if r["section"] == section
            and r["measure"] == measure
            and r["status"] == "ok"
            and (technique is None or r["technique"] == technique)
            and (chain is None or r["chain"] == chain)
        ]

    def value(self, section: str, measure: str, technique: str, chain: str) -> Optional[float]:
        rows = self.get(section, measure, technique, chain)
        return rows[-1]["value"] if rows else None

    def add(self, rows: Iterable[dict]) -> None:
        """Append rows (replacing any earlier row with the same key) and rewrite both files."""
        new = list(rows)
        for r in new:
            r["versions"] = self.versions
        keys = {_key(r) for r in new}
        self.rows = [r for r in self.rows if _key(r) not in keys] + new
        self.write()

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.out / "results.json") as tmp:
            Path(tmp).write_text(
                json.dumps(
                    {"columns": list(COLUMNS), "measures": MEASURES, "rows": self.rows}, indent=1, ensure_ascii=False
                )
            )
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS)
        w.writeheader()
        for r in self.rows:
            w.writerow(
                {
                    k: json.dumps(r[k], sort_keys=True) if isinstance(r[k], dict) else ("" if r[k] is None else r[k])
                    for k in COLUMNS
                }
            )
        with atomic_write(self.out / "results.csv") as tmp:
            Path(tmp).write_text(buf.getvalue(), encoding="utf-8")


def _key(r: dict) -> tuple:
    return (r["section"], r["technique"], r["chain"], r["measure"], r["step"])


def read_rows(out_dir: str | os.PathLike) -> list[dict]:
    """All rows of ``out_dir/results.json`` (failed ones included)."""
    return json.loads((Path(out_dir) / "results.json").read_text())["rows"]
