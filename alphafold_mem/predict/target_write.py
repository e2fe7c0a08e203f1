"""The write stage of one target: its scores record and method line (:func:`scores_of`), then its
files, all or none (:func:`write`; :func:`alphafold_mem.predict.outputs.write_target_outputs`), and
the Amber relaxation when asked."""

from __future__ import annotations

import os

from .outputs import write_target_outputs
from .policy_names import policy_name
from .provenance import shareable_scores
from .run_context import LoadedModel, RunContext, TargetRun

__all__ = ["method_line", "scores_of", "write"]


def method_line(ctx: RunContext, run: TargetRun, lm: LoadedModel) -> str:
    """How the prediction was made, for the ModelCIF and PDB headers: weights, MSA, recycles, seed,
    precision and memory policy."""
    t, cfg, policy = run.target, lm.config, run.policy
    msa_note = (
        f"MSA {', '.join(os.path.basename(f) for f in t.msa_files)} ({t.msa_depth} rows)"
        if t.msa_files
        else "single-sequence"
    )
    return (
        f"weights {os.path.basename(ctx.weights_path)} ({lm.weights.format}, preset {cfg.preset}); {msa_note}; "
        f"{cfg.num_recycles} recycle(s); seed {ctx.seed}; {policy.precision}; memory policy {policy_name(policy)}"
        + (f" (chunk size {policy.chunk_size})" if policy.chunk_size is not None else "")
    )


def scores_of(ctx: RunContext, run: TargetRun, lm: LoadedModel, arrays: dict) -> dict:
    """The target's scores JSON (``<name>_scores.json``): the input, the confidence (pLDDT per residue
    and mean, pTM and PAE maxima with a PAE head), and every setting that made the result."""
    t, r, cfg, policy = run.target, run.result, lm.config, run.policy
    plddt = arrays["plddt"]
    scores = {
        "id": t.name,
        **t.description_fields(),  # capped: alphafold_mem.predict.target.description_fields
        "source": t.source,
        "sequence": t.sequence,
        "length": len(t.sequence),
        "mean_plddt": round(r.mean_plddt, 2),
        "plddt": [round(float(x), 2) for x in plddt],
        "msa_depth": t.msa_depth,
        "msa_files": list(t.msa_files),
        "msa_mode": "msa" if t.msa_files else "single_sequence",
        "weights": ctx.weights_path,
        "weights_format": lm.weights.format,
        "preset": cfg.preset,
        "architecture": getattr(lm.weights, "architecture", None),
        "num_recycles": cfg.num_recycles,
        "seed": ctx.seed,
        "precision": policy.precision,
        "memory_policy": policy_name(policy),
        "chunk_size": policy.chunk_size,  # concrete: the pre-flight resolved chunk_size="auto"
        "recycles_run": r.recycles_run,
        "recycle_early_stop_tolerance": cfg.recycle_early_stop_tolerance,
    }
    pipeline = ctx.pipeline
    if pipeline is not None:
        scores["templates"] = pipeline.template_record(run.templates, pipeline.hits_file(t), cfg.template.enabled)
    scores = shareable_scores(scores, t, r.outputs)
    if "predicted_aligned_error" in arrays:
        scores["ptm"] = round(r.ptm, 4)
        scores["max_pae"] = round(float(arrays["predicted_aligned_error"].max()), 2)
        scores["max_predicted_aligned_error"] = round(arrays["max_predicted_aligned_error"], 2)
    return scores


def write(ctx: RunContext, run: TargetRun, lm: LoadedModel, arrays: dict) -> None:
    """Write the target's files (rank 0 only under DAP), then relax it when the pipeline asks; marks
    the result ``ok``.

    Raises:
        alphafold_mem.io.WriteError, PredictError: as :func:`~.outputs.write_target_outputs`.
    """
    r = run.result
    with ctx.clock.stage("outputs"):
        scores = scores_of(ctx, run, lm, arrays)
        if ctx.par.writer:
            method = method_line(ctx, run, lm)
            ctx.stages.run(
                f"{run.name}/outputs", lambda: write_target_outputs(r.outputs, run.target, arrays, scores, method)
            )
            pipeline = ctx.pipeline
            if pipeline is not None and pipeline.relax:  # after the outputs: the unrelaxed model is never replaced
                relaxed_name = os.path.basename(r.outputs["pdb"])[: -len(".pdb")]  # the target's, or an ensemble's
                ctx.stages.run(f"{run.name}/relax", lambda: pipeline.relax_target(r.outputs, relaxed_name))
    r.status = "ok"
