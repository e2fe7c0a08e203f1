"""The weights stage of a prediction run: the model loaded once, on its device, with the run's
recycling settings, and the line that says what runs (:func:`load_model`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from ..weights import DEFAULT_WEIGHTS, WeightsError, load_weights
from . import preflight
from .errors import PredictError
from .policy_names import policy_name
from .run_context import LoadedModel, RunContext

__all__ = ["load_model"]


def load_model(
    ctx: RunContext,
    *,
    given: bool,
    preset: Optional[str],
    num_recycles: Optional[int],
    recycle_early_stop_tolerance: float,
    n_todo: int,
) -> LoadedModel:
    """Load ``ctx.weights_path`` (any format :mod:`alphafold_mem.weights` detects; ``given``: the
    user named the file), set the recycles and the early-stop tolerance, move the model to the device
    in eval mode and log one line: weights, device, precision, memory policy, budget, recycles.

    Raises:
        PredictError: the default demo weights are missing, or the weights are unusable (one line).
    """
    if not given and not os.path.exists(ctx.weights_path):
        raise PredictError(
            f"no --weights given and the default demo weights ({DEFAULT_WEIGHTS}) are "
            "missing; pass --weights FILE (an alphafold-mem checkpoint, AF2 .npz or OpenFold .pt)"
        )
    try:
        loaded = ctx.stages.run("load_weights", lambda: load_weights(ctx.weights_path, preset=preset))
    except WeightsError as exc:
        raise PredictError(str(exc)) from None
    model = loaded.model
    if num_recycles is not None:
        model.config = dataclasses.replace(model.config, num_recycles=num_recycles)
    model.config = dataclasses.replace(model.config, recycle_early_stop_tolerance=recycle_early_stop_tolerance)
    model = model.to(ctx.device).eval()
    cfg = model.config
    budget = preflight.budget_of(ctx.request, cfg, ctx.device)
    ctx.log(
        f"weights: {ctx.weights_path} ({loaded.format}, preset {cfg.preset}"
        f"{', ' + loaded.details if loaded.details else ''}); device {ctx.device}, {ctx.policy.precision}, "
        f"memory policy {'auto (chosen per target)' if ctx.chosen else policy_name(ctx.policy)}, "
        f"budget {preflight.format_bytes(budget)}, "
        f"{cfg.num_recycles} recycle(s), {n_todo} target(s) to run"
        + (f"; one protein shared by {ctx.par.dap} processes (DAP)" if ctx.par.dap > 1 else "")
    )
    return LoadedModel(model, loaded)
