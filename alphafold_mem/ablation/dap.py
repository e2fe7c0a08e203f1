"""DAP rows of the inference ablation: one chain predicted by :func:`alphafold_mem.predict` with
``dap=P`` (P processes share one protein; :mod:`alphafold_mem.distributed`), then compared with the
reference prediction like every other row.

Used only when :func:`.techniques.dap_unavailable_reason` is None. What differs from the in-process
rows, and is said in each row's ``reason``: the peak is the largest per-rank storage-counter peak
that ``timings.json`` records for the model stage; the time is one run (``predict``'s per-target
seconds), not a median of interleaved repeats; the coordinates are read back from the PDB file
(rounded to 1e-3 Å there, which bounds the smallest deviation that can be seen).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..io import atomic_write
from .chains import Chain, experimental_chain
from .results import row
from .scores import Prediction, accuracy, deviation
from .techniques import Technique

__all__ = ["run_dap", "largest_peak_mib"]


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


def run_dap(run, t: Technique, chain: Chain, ref: Prediction) -> list[dict]:
    """The rows of ``t`` (``t.dap`` > 1) on ``chain``; ``run`` is the :class:`.inference.InferenceRun`."""
    from ..predict import predict

    out = run.work_dir / "dap" / f"P{t.dap}"
    fasta = out / "inputs" / f"{chain.name}.fasta"
    with atomic_write(fasta) as tmp:
        Path(tmp).write_text(f">{chain.name}\n{chain.sequence}\n")
    common = dict(n_res=chain.n_res, policy=t.policy_json(), config={**run.config, **chain.describe()})
    result = predict(str(fasta), out, msa_dir=chain.msa_dir if chain.msa_files else None,
                     single_sequence=not chain.msa_files, weights=run.weights, seed=run.seed,
                     device=str(run.device), overwrite=True, memory_policy=t.policy, dap=t.dap,
                     log=lambda line: None)
    r = next((x for x in result.results if x.name == chain.name), None)
    if r is None or r.status != "ok":
        return [row("inference", t.name, chain.name, status="failed", **common,
                    reason=f"predict(dap={t.dap}): {r.message if r else 'no result'}")]
    scores = json.loads((out / f"{chain.name}_scores.json").read_text())
    pred = Prediction.from_pdb(out / f"{chain.name}.pdb", scores.get("ptm"))
    timings = json.loads((out / "timings.json").read_text())
    peak = largest_peak_mib(timings.get("stages", {}).get(f"{chain.name}/model", {}))
    rows = [row("inference", t.name, chain.name, "peak_counter_bytes", None if peak is None else peak * 2**20, **common,
                reason="largest per-rank peak in predict's timings.json (model stage)"),
            row("inference", t.name, chain.name, "seconds", r.seconds, **common,
                reason="one predict() run (features, model, outputs), not interleaved"),
            row("inference", t.name, chain.name, "mean_plddt", float(pred.plddt.mean()), **common)]
    for k, v in deviation(pred, ref).items():
        rows.append(row("inference", t.name, chain.name, k, v, **common, reason="from the PDB file (1e-3 Å rounding)"))
    true, why = experimental_chain(chain)
    if true is not None:
        for k, v in accuracy(pred, true.atom37_positions, true.atom37_mask, chain.sequence).items():
            rows.append(row("inference", t.name, chain.name, k, v, **common))
    return rows
