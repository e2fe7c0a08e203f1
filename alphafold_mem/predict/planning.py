"""The planning stage of a prediction run (before any model work on a target): for every target the
memory pre-flight (:mod:`.preflight`: the policy that fits the budget, or a failure naming need and
budget) and the predicted run time on this device (:mod:`.run_time`), printed side by side, with a
warning for a target predicted to run longer than :data:`LONG_RUN_SECONDS`.

Under DAP rank 0 plans for every rank (one answer: :meth:`~.parallel.Parallel.agree`) and the
run-time estimate uses a stored rate only (a calibration forward would have to run on every rank).
"""

from __future__ import annotations

from typing import Optional

from . import preflight, run_time
from .failures import failure_message
from .policy_names import chunking, policy_name
from .run_context import LoadedModel, RunContext, TargetRun

__all__ = ["LONG_RUN_SECONDS", "estimate_seconds", "plan_targets", "rate_key", "record_rate", "stored_rate"]

#: A target predicted to run longer than this (seconds) gets a warning before it starts.
LONG_RUN_SECONDS = 3600.0


def plan_targets(ctx: RunContext, lm: LoadedModel, todo: list[TargetRun]) -> None:
    """Set ``fit`` of every target to run (its :class:`~.preflight.Preflight`, or the exception the
    estimate raised: the target fails with it when its turn comes) and log its plan line:
    ``plan: <id>: <N> residues, predicted peak <GiB> of <GiB> budget; predicted run time <t> on this
    device (<TFLOP> at <GFLOP/s>, <where the rate comes from>)``, a ``warning:`` line above an hour, and
    an ``error:`` line for a target that does not fit."""
    with ctx.clock.stage("planning"):
        fits = ctx.par.agree(_fits(ctx, lm, todo) if todo and ctx.par.writer else None)
        for run in todo:
            run.fit = fits[run.name]


def _fits(ctx: RunContext, lm: LoadedModel, todo: list[TargetRun]) -> dict:
    cfg, fits = lm.config, {}
    rate: Optional[dict] = None
    for run in todo:
        t = run.target
        fit = ctx.par.check_residues(len(t.sequence))
        sizes = preflight.feature_sizes(cfg, len(t.sequence), t.msa_depth)
        if fit is None:
            try:
                fit = preflight.check(cfg, sizes, ctx.request, ctx.device, ctx.par.dap)
            except Exception as exc:  # noqa: BLE001 - fails this target only, when its turn comes
                fits[t.name] = exc
                continue
        fits[t.name] = fit
        if fit.fits and fit.policy != ctx.request:  # the planner chose (auto): say what, before the forward
            ctx.log(f"{t.name}: memory policy chosen: {policy_name(fit.policy)}, {chunking(fit.policy)}")
        if not fit.fits:
            ctx.log(f"error: {failure_message(t, preflight.DoesNotFit(fit.message))}")
            continue
        rate = rate or _rate(ctx, lm)
        ctx.log(_plan_line(ctx, run, cfg, sizes, fit, rate))
        seconds = estimate_seconds(cfg, sizes, rate, ctx.par.dap)
        if seconds is not None and seconds > LONG_RUN_SECONDS:
            ctx.log(
                f"warning: {t.name}: predicted to run for {run_time.format_seconds(seconds)} on this device "
                f"(over an hour); progress lines with an ETA follow at least once a minute (a GPU, fewer "
                "recycles or a shorter sequence shorten it)"
            )
    return fits


def estimate_seconds(cfg, sizes, rate: Optional[dict], dap: int = 1) -> Optional[float]:
    """Predicted seconds of the forward at ``sizes`` from a stored ``rate`` entry (``None``: none)."""
    if rate is None:
        return None
    return run_time.forward_flops(cfg, sizes) / (rate["flop_per_s"] * max(1, dap))


def _plan_line(ctx: RunContext, run: TargetRun, cfg, sizes, fit, rate: Optional[dict]) -> str:
    need, budget = preflight.format_bytes(fit.need), preflight.format_bytes(fit.budget)
    line = f"plan: {run.name}: {sizes[0]} residues, predicted peak {need} of {budget} budget; "
    seconds = estimate_seconds(cfg, sizes, rate, ctx.par.dap)
    if seconds is None:
        return line + "no run-time estimate (no measured rate for this device yet)"
    flops = run_time.forward_flops(cfg, sizes)
    return line + (
        f"predicted run time {run_time.format_seconds(seconds)} on this device ({flops / 1e12:.3g} TFLOP at "
        f"{rate['flop_per_s'] / 1e9:.3g} GFLOP/s, measured by {rate['source']})"
    )


def _rate(ctx: RunContext, lm: LoadedModel) -> Optional[dict]:
    """The stored rate of this device, preset and precision; calibrated and stored when there is none
    (not under DAP: ``None`` then)."""
    store = run_time.RateStore()
    key = rate_key(ctx, lm)
    found = store.get(key)
    if found is not None or ctx.par.active:
        return found
    try:
        flops, seconds = run_time.calibrate(lm.model, ctx.device, track=_tracked(ctx))
    except Exception as exc:  # noqa: BLE001 - an estimate only: the run goes on without it
        ctx.log(f"note: no run-time estimate: the calibration forward failed ({type(exc).__name__}: {exc})")
        return None
    return store.record(key, flops, seconds, "calibration")


def _tracked(ctx: RunContext) -> bool:
    return ctx.device.type == "cpu" and ctx.stages.track_cpu


def rate_key(ctx: RunContext, lm: LoadedModel) -> str:
    """The :class:`~.run_time.RateStore` key of this run's device, preset, precision and CPU peak measuring."""
    return run_time.RateStore.key(ctx.device, lm.config.preset, ctx.policy.precision, _tracked(ctx))


def stored_rate(ctx: RunContext, lm: LoadedModel) -> Optional[dict]:
    """The rate stored for this run (``None``: none)."""
    return run_time.RateStore().get(rate_key(ctx, lm))


def record_rate(ctx: RunContext, lm: LoadedModel, run: TargetRun, seconds: float) -> None:
    """Store the rate the target's forward ran at (:class:`~.run_time.RateStore` keeps the largest)."""
    if ctx.par.active or not seconds:
        return
    t = run.target
    sizes = preflight.feature_sizes(lm.config, len(t.sequence), t.msa_depth)
    iterations = (run.result.recycles_run or 0) + 1
    run_time.RateStore().record(
        rate_key(ctx, lm), run_time.forward_flops(lm.config, sizes, iterations), seconds, f"a {sizes[0]}-residue target"
    )
