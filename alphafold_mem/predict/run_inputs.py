"""The first stages of a prediction run: collect the targets (every input validated before any model
work, :func:`collect`), search their sequences when asked (:func:`search`), and skip those whose
outputs are finished (:func:`skip_finished`)."""

from __future__ import annotations

import os
from typing import Collection, Optional

from .previous import previous_mean_plddt
from .provenance import partition_finished
from .results import TargetResult
from .run_context import RunContext, TargetRun
from .targets import collect_targets, measure_searched

__all__ = ["collect", "search", "skip_finished"]


def _rejected(x, status: str = "invalid") -> TargetResult:
    return TargetResult(name=x.name, length=x.length, status=status, message=x.message, order=x.order)


def collect(
    ctx: RunContext,
    inputs,
    msa,
    msa_dir,
    *,
    single_sequence: bool,
    min_msa_depth: int,
    names: Optional[Collection[str]],
) -> tuple[list[TargetRun], list[TargetResult]]:
    """The valid targets of ``inputs`` (only those named ``names`` when given: one rank's share, read
    silently) and a result per rejected input. Nothing is written.

    Raises:
        PredictError: no usable input at all, or MSA options that do not fit the input.
    """
    quiet = names is not None
    searching = ctx.pipeline is not None and ctx.pipeline.searching  # then depth and Neff after the search
    targets, rejected = collect_targets(
        inputs,
        msa,
        msa_dir,
        (lambda line: None) if quiet else ctx.log,
        single_sequence=single_sequence,
        min_msa_depth=0 if searching else min_msa_depth,
    )
    if quiet:
        wanted = set(names)
        targets, rejected = [t for t in targets if t.name in wanted], []
    if single_sequence:
        for t in targets:
            if t.from_alignment:
                ctx.log(f"note: {t.name}: --single-sequence given; ignoring the alignment input {t.source}")
            t.msa_files, t.msa_depth = (), 1
    return [TargetRun.of(t) for t in targets], [_rejected(x) for x in rejected]


def search(
    ctx: RunContext, runs: list[TargetRun], *, single_sequence: bool, min_msa_depth: int
) -> tuple[list[TargetRun], list[TargetResult]]:
    """The search stage (cached in ``out_dir``: MSAs and template hits) when the run has a pipeline;
    then the no-MSA note. Returns the targets still valid and a result per target it failed."""
    failed: list[TargetResult] = []
    pipeline = ctx.pipeline
    if pipeline is not None:
        pipeline.log = ctx.log
        targets = [r.target for r in runs]
        for t, message in pipeline.search(targets, ctx.out_dir, overwrite=ctx.overwrite):
            ctx.log(f"error: {message}")
            targets.remove(t)
            failed.append(
                TargetResult(name=t.name, length=len(t.sequence), status="failed", message=message, order=t.order)
            )
        if pipeline.searching:
            targets, shallow = measure_searched(targets, min_msa_depth, ctx.log)
            failed += [_rejected(x) for x in shallow]
        runs = [TargetRun.of(t) for t in targets]  # depth measured again
    no_msa = [r.name for r in runs if not r.target.msa_files]
    if no_msa and not single_sequence:
        shown = ", ".join(no_msa[:5]) + (f" and {len(no_msa) - 5} more" if len(no_msa) > 5 else "")
        ctx.log(
            f"note: no MSA given for {shown}: running in single-sequence mode (expect low confidence; "
            "pass --msa or --msa-dir, or --single-sequence to silence this)"
        )
    return runs, failed


def skip_finished(
    ctx: RunContext, runs: list[TargetRun]
) -> tuple[list[TargetRun], list[TargetRun], list[TargetResult]]:
    """``(to run, skipped, failed)``: a target whose outputs are finished and were produced from the
    same sequence, MSA, weights and result-changing options is skipped (its result says so, with the
    mean pLDDT of its outputs); one whose outputs differ fails naming what changed, unless
    ``overwrite`` (:func:`~.provenance.partition_finished`); the outputs are looked for in the layout
    (``<out>/<id>/<prediction>_scores.json``, :mod:`.layout`). Under DAP rank 0 decides for every rank."""
    by_name = {r.name: r for r in runs}
    for name in by_name:
        flat = os.path.join(ctx.out_dir, f"{name}_scores.json")
        if os.path.exists(flat) and not os.path.exists(ctx.base_name(name) + "_scores.json"):
            ctx.log(
                f"note: {name}: {flat} is the flat layout of an earlier version, not read; this run writes "
                f"{os.path.join(ctx.out_dir, name, 'ranked_0.pdb')} and the rest of the target in its folder"
            )
    todo, skipped, conflicts = partition_finished(
        [r.target for r in runs],
        ctx.out_dir,
        ctx.weights_path,
        ctx.options,
        overwrite=ctx.overwrite,
        record_paths=ctx.record_paths,
        log=ctx.log,
        pipeline=ctx.pipeline,
        output_name=ctx.output_name,
    )
    todo, skipped = ctx.par.agree_targets(todo + skipped, todo, skipped)
    for t in skipped:
        ctx.log(
            f"skip: {t.name}: finished outputs of the same inputs and options in {ctx.out_dir} (--overwrite reruns)"
        )
        r = by_name[t.name].result
        r.status, r.message = "skipped", "finished outputs exist"
        r.mean_plddt = previous_mean_plddt(ctx.base_name(t.name) + "_scores.json")
    return (
        [by_name[t.name] for t in todo],
        [by_name[t.name] for t in skipped],
        [_rejected(x, "failed") for x in conflicts],
    )
