"""DAP rows of the inference ablation: the chains predicted by :func:`alphafold_mem.predict` with
``dap=P`` (P processes share one protein; :mod:`alphafold_mem.distributed`), one ``predict`` batch per
MSA directory, then each compared with its reference prediction like every other row.

Used only when :func:`.techniques.dap_unavailable_reason` is None. What differs from the in-process
rows, and is said in each row's ``reason``: the peak is the largest per-rank storage-counter peak
that ``timings.json`` records for the model stage; the time is one run (the target's seconds in
``timings.json``), not a median of interleaved repeats; the coordinates are read back from the PDB file
(rounded to 1e-3 Å there, which bounds the smallest deviation that can be seen).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from ..io import atomic_write
from .chains import Chain, experimental_chain
from .results import row
from .scores import Prediction, accuracy, deviation
from .techniques import Technique

__all__ = ["run_dap", "largest_peak_mib"]

ROOT = Path(__file__).resolve().parents[2]


def largest_peak_mib(record) -> float | None:
    """The largest number under a key containing ``peak`` anywhere in a ``timings.json`` stage record
    (per-rank records nest), or None."""
    found = []

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, (int, float)) and "peak" in key:
            found.append(float(x))

    walk(record)
    return max(found) if found else None


def _target_seconds(timings: dict, name: str) -> float | None:
    """The per-target seconds ``predict`` records in ``timings.json``, or None."""
    return (timings.get("targets", {}).get(name) or {}).get("seconds")


def _predict_command(run, t: Technique, fasta: Path, msa_dir, out: Path) -> list[str]:
    """``alphafold-mem predict FASTA ... --dap P``: the launch users run (P local processes), over every
    record of ``fasta`` (one batch: the ranks start once, not once per chain)."""
    if t.policy.name != "reference":
        raise ValueError(
            f"{t.name}: DAP rows run the reference policy (predict --memory-policy reference), not {t.policy.name}"
        )
    cmd = [
        sys.executable,
        "-m",
        "alphafold_mem.cli",
        "predict",
        str(fasta),
        "--out",
        str(out),
        "--dap",
        str(t.dap),
        "--weights",
        str(run.weights),
        "--seed",
        str(run.seed),
        "--device",
        str(run.device),
        "--memory-policy",
        "reference",
        "--overwrite",
    ]
    cmd += ["--msa-dir", str(msa_dir)] if msa_dir else ["--single-sequence"]
    return cmd


def run_dap(run, t: Technique, chains: Sequence[Chain], refs: dict) -> list[dict]:
    """The rows of ``t`` (``t.dap`` > 1) on ``chains``; ``run`` is the :class:`.inference.InferenceRun`,
    ``refs`` maps a chain's name to its reference :class:`.scores.Prediction`.

    The chains are predicted by ``alphafold-mem predict --dap P`` in a child process (which starts the
    P ranks), as a user runs it: one batch per MSA directory (and one for the chains without an MSA),
    so the ranks start once per batch; the outputs are then read back per chain. A chain the batch
    did not produce is a ``failed`` row with predict's last lines."""
    groups: dict = {}
    for chain in chains:
        groups.setdefault(chain.msa_dir if chain.msa_files else None, []).append(chain)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    rows: list[dict] = []
    for i, (msa_dir, group) in enumerate(groups.items()):
        out = run.work_dir / "dap" / f"P{t.dap}" / f"batch{i}"
        fasta = out / "inputs" / "chains.fasta"
        with atomic_write(fasta) as tmp:
            Path(tmp).write_text("".join(f">{c.name}\n{c.sequence}\n" for c in group))
        proc = subprocess.run(_predict_command(run, t, fasta, msa_dir, out), capture_output=True, text=True, env=env)
        summary = out / "timings.json"
        timings = json.loads(summary.read_text()) if summary.exists() else {}
        for chain in group:
            rows += _chain_rows(run, t, chain, refs[chain.name], out, timings, proc)
    return rows


def _chain_rows(run, t: Technique, chain: Chain, ref, out: Path, timings: dict, proc) -> list[dict]:
    """One chain's rows from a finished ``predict --dap P`` batch in ``out``."""
    common = dict(n_res=chain.n_res, policy=t.policy_json(), config={**run.config, **chain.describe()})
    ranked = out / chain.name / "ranked_0.pdb"  # the layout: alphafold_mem.predict.layout
    if not ranked.exists() or not timings:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return [
            row(
                "inference",
                t.name,
                chain.name,
                status="failed",
                **common,
                reason=f"predict --dap {t.dap} (exit {proc.returncode}): {tail}"[:400],
            )
        ]
    seconds = _target_seconds(timings, chain.name)
    best = json.loads((out / chain.name / f"{chain.name}_scores.json").read_text())["models"][0]
    pred = Prediction.from_pdb(ranked, best.get("ptm"))
    peak = largest_peak_mib(timings.get("stages", {}).get(f"{chain.name}/model", {}))
    rows = [
        row(
            "inference",
            t.name,
            chain.name,
            "peak_counter_bytes",
            None if peak is None else peak * 2**20,
            **common,
            reason="largest per-rank peak in predict's timings.json (model stage)",
        ),
        row(
            "inference",
            t.name,
            chain.name,
            "seconds",
            seconds,
            **common,
            reason="one predict() run of this target (features, model, outputs), not interleaved",
        ),
        row("inference", t.name, chain.name, "mean_plddt", float(pred.plddt.mean()), **common),
    ]
    for k, v in deviation(pred, ref).items():
        rows.append(row("inference", t.name, chain.name, k, v, **common, reason="from the PDB file (1e-3 Å rounding)"))
    true, why = experimental_chain(chain)
    if true is not None:
        for k, v in accuracy(pred, true.atom37_positions, true.atom37_mask, chain.sequence).items():
            rows.append(row("inference", t.name, chain.name, k, v, **common))
    return rows
