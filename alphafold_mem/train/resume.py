"""Resume reproduces the saved run: the checkpoint's model config, :class:`TrainConfig` and run
settings (data, planned steps, precision, checkpoint interval, memory policy) are what a resumed
run uses; a value given again that differs is applied as an explicit, logged override, or refused
where it would break exact resume.

Refused (:data:`FIXED_ON_RESUME`): ``seed`` and ``batch_size`` — training draws are numbered from
them (draw ``k`` of batch ``b`` is a pure function of the seed and ``b * batch_size``, see
:mod:`.data_module`), so a different value would repeat or skip samples of the saved position.
Architecture fields of the model config are refused by :func:`.checkpoint.check_config_compatible`.
Everything else (learning rate, warm-up, schedule, clipping, EMA decay, loss weights, data sizes,
max steps, ...) may change on resume, with one ``override:`` line each.

The run settings travel in the checkpoint under :data:`RUN_KEY`, written by
:class:`RunSettingsCallback`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from lightning.pytorch.callbacks import Callback

from ..config import ModelConfig
from .checkpoint import _flatten
from .config import TrainConfig

__all__ = [
    "RUN_KEY",
    "FIXED_ON_RESUME",
    "RunSettingsCallback",
    "ApplyTrainConfig",
    "SavedRun",
    "read_saved_run",
    "resume_overrides",
    "default_out_dir",
]

RUN_KEY = "alphafold_mem_run"
_NOT_SETTINGS = {"out_dir"}  # recorded, but a run directory that moved is not a changed setting

#: TrainConfig fields a resumed run may not change, with the reason.
FIXED_ON_RESUME = {
    "seed": "training draws are a function of the seed, so the saved data position would mean other samples",
    "batch_size": "draws are numbered per batch of this size, so samples would be repeated or skipped",
}


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """What a training checkpoint says about its run: model config, train config, run settings
    (``data_dir``, ``max_steps``, ``precision``, ``ckpt_every_steps``, ``memory_policy``,
    ``memory_overrides``; empty for checkpoints written before they were saved)."""

    model_config: ModelConfig
    train_config: Optional[TrainConfig]
    run: dict


def read_saved_run(path: str | os.PathLike) -> SavedRun:
    """The saved configuration of a training checkpoint.

    Raises:
        ValueError: the file holds no alphafold-mem model config.
    """
    try:  # memory-mapped: only the small entries below are read from a large checkpoint
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (RuntimeError, ValueError):  # not the zip format
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    meta = ckpt.get("alphafold_mem") or {}
    cfg = meta.get("model_config") or ckpt.get("model_config") or ckpt.get("config")
    if cfg is None:
        raise ValueError(f"{path} holds no alphafold_mem model config (not written by alphafold-mem train)")
    tc = meta.get("train_config")
    return SavedRun(
        ModelConfig.from_dict(cfg), TrainConfig.from_dict(tc) if tc is not None else None, dict(ckpt.get(RUN_KEY) or {})
    )


class RunSettingsCallback(Callback):
    """Stores the run settings (JSON-able dict) in every checkpoint under :data:`RUN_KEY`."""

    def __init__(self, settings: dict):
        self.settings = dict(settings)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[RUN_KEY] = dict(self.settings)


class ApplyTrainConfig(Callback):
    """Makes the run's :class:`TrainConfig` govern a resumed run. Lightning restores the optimiser's
    parameter groups (lr, betas, eps), the scheduler's base rates and the EMA decay from the
    checkpoint, which would silently undo an override; at train start (after the restore) they are
    set from the module's ``train_config``: lr = ``train_config.lr`` x the schedule's factor at the
    restored step (the value an uninterrupted run computes, bit for bit)."""

    def on_train_start(self, trainer, pl_module) -> None:
        tc = pl_module.train_config
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            sched.base_lrs = [tc.lr for _ in sched.base_lrs]
            for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas):
                group["lr"] = base * fn(sched.last_epoch)
        for opt in trainer.optimizers:
            for group in opt.param_groups:
                group["betas"], group["eps"] = tuple(tc.adam_betas), tc.adam_eps
        if getattr(pl_module, "ema", None) is not None:
            pl_module.ema.decay = tc.ema_decay


def _changes(saved: dict, current: dict, prefix: str = "") -> list[tuple[str, Any, Any]]:
    return [
        (f"{prefix}{k}", saved.get(k), current.get(k))
        for k in sorted(set(saved) | set(current))
        if saved.get(k) != current.get(k)
    ]


def resume_overrides(
    path: str | os.PathLike,
    model_config: ModelConfig,
    train_config: TrainConfig,
    run: Optional[dict] = None,
    log: Callable[[str], None] = print,
) -> list[str]:
    """Compare the configuration a resumed run was given with the checkpoint's; log one
    ``override:`` line per difference and return those lines.

    Raises:
        ValueError: a field of :data:`FIXED_ON_RESUME` differs (one sentence naming it, both values
            and why).
    """
    saved = read_saved_run(path)
    lines = []
    if saved.train_config is not None:
        for key, old, new in _changes(saved.train_config.to_dict(), train_config.to_dict()):
            if key in FIXED_ON_RESUME:
                raise ValueError(
                    f"--resume {path}: {key} is {old!r} in the checkpoint and {new!r} now; it cannot "
                    f"change on resume ({FIXED_ON_RESUME[key]}); start a new run to change it"
                )
            lines.append(f"override: train config {key}: {old!r} (checkpoint) -> {new!r}")
    lines += [
        f"override: model config {key}: {old!r} (checkpoint) -> {new!r}"
        for key, old, new in _changes(_flatten(saved.model_config.to_dict()), _flatten(model_config.to_dict()))
    ]
    if run is not None and saved.run:
        lines += [
            f"override: {key}: {old!r} (checkpoint) -> {new!r}"
            for key, old, new in _changes(saved.run, run)
            if key in saved.run and key not in _NOT_SETTINGS
        ]
    for line in lines:
        log(line)
    return lines


def default_out_dir(path: str | os.PathLike, saved_out: Optional[str]) -> str:
    """The run directory of a checkpoint: the folder holding its ``checkpoints/``, else the saved one."""
    p = Path(path).resolve()
    if p.parent.name == "checkpoints":
        return str(p.parent.parent)
    return saved_out or str(p.parent)
