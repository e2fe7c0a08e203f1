"""The last stage of a prediction run: the :class:`~.results.PredictionRun`, ``timings.json`` (seconds
and memory per target stage, and every second of the run in one named stage: ``stage_seconds``,
:class:`~.timings.StageClock`) and the summary table."""

from __future__ import annotations

import os

from ..io import os_error_line
from .layout import where_line
from .outputs import write_json
from .policy_names import policy_name
from .previous import read_json
from .results import PredictionRun, TargetResult
from .run_context import RunContext
from .timings import keep_skipped

__all__ = ["finish"]


def finish(ctx: RunContext, results: list[TargetResult], skipped: bool) -> PredictionRun:
    """The run's results in input order, ``timings.json`` written (rank 0; ``skipped``: some targets
    were skipped, whose records come from the previous file) and the summary logged."""
    run = PredictionRun(sorted(results, key=lambda r: r.order), ctx.out_dir, weights=ctx.weights_path)
    with ctx.clock.stage("outputs"):
        run.timings_path = os.path.join(ctx.out_dir, "timings.json")
        records = ctx.par.timings(ctx.stages.records)
        total, by_stage = ctx.clock.report()
        timings = {
            "device": str(ctx.device),
            "precision": ctx.policy.precision,
            "memory_policy": policy_name(ctx.policy),
            "weights": ctx.weights_path if ctx.record_paths else os.path.basename(ctx.weights_path),
            "memory_measure": ctx.stages.describe(),
            "total_seconds": total,
            "stage_seconds": by_stage,
            "stages": ctx.stages.records,
            "targets": {
                r.name: {"status": r.status, "seconds": r.seconds, "length": r.length, "recycles_run": r.recycles_run}
                for r in run.results
            },
            **records,
        }
        if ctx.par.writer:
            if skipped and ctx.rank_by is not None:  # an ensemble's runs share the file: the ensemble keeps theirs
                timings = keep_skipped(timings, read_json(run.timings_path))
            try:
                write_json(run.timings_path, timings)
            except OSError as exc:  # the summary still follows
                ctx.log(f"error: {os_error_line(exc, 'writing timings.json')}")
                run.timings_path = None
    ctx.log("")
    ctx.log(run.summary_table())
    if ctx.rank_by is not None and any(r.status in ("ok", "skipped") for r in run.results):
        ctx.log(where_line(ctx.out_dir))  # an ensemble says it once, after its ranking
    if run.failed:
        ctx.log(f"{len(run.failed)} of {len(run.results)} target(s) rejected or failed; see the error lines above")
    return run
