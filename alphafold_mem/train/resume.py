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
import re
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from lightning.pytorch.callbacks import Callback

from ..config import ModelConfig
from .checkpoint import _flatten, load_training_checkpoint
from .config import TrainConfig

__all__ = [
    "RUN_KEY",
    "NUMERICS_KEY",
    "FIXED_ON_RESUME",
    "numeric_settings",
    "restore_numeric_settings",
    "remove_stale_temporaries",
    "resolve_resume",
    "RunSettingsCallback",
    "ApplyTrainConfig",
    "SavedRun",
    "read_saved_run",
    "resume_overrides",
    "default_out_dir",
]

RUN_KEY = "alphafold_mem_run"
#: Checkpoint entry of the torch settings that change numbers (:func:`numeric_settings`).
NUMERICS_KEY = "alphafold_mem_numerics"
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
    numerics: dict = dataclasses.field(default_factory=dict)


def read_saved_run(path: str | os.PathLike) -> SavedRun:
    """The saved configuration of a training checkpoint.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file holds no alphafold-mem model config, or is damaged or truncated.
    """
    ckpt = load_training_checkpoint(path)
    meta = ckpt.get("alphafold_mem") or {}
    cfg = meta.get("model_config") or ckpt.get("model_config") or ckpt.get("config")
    if cfg is None:
        raise ValueError(f"{path} holds no alphafold_mem model config (not written by alphafold-mem train)")
    tc = meta.get("train_config")
    return SavedRun(
        ModelConfig.from_dict(cfg),
        TrainConfig.from_dict(tc) if tc is not None else None,
        dict(ckpt.get(RUN_KEY) or {}),
        dict(ckpt.get(NUMERICS_KEY) or {}),
    )


def numeric_settings() -> dict:
    """The process-wide torch settings that change a run's numbers: CPU threads (reductions split
    differently), deterministic algorithms, float32 matmul precision, cuDNN and TF32 flags."""
    return {
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
    }


def restore_numeric_settings(saved: dict, log: Callable[[str], None], keep: tuple[str, ...] = ()) -> list[str]:
    """Set the :func:`numeric_settings` of a checkpoint (``saved``) that differ now, except those in
    ``keep`` (given again explicitly); one ``resume:`` line each, returned."""
    now, lines = numeric_settings(), []
    for key, value in saved.items():
        if key in keep or key not in now or now[key] == value:
            continue
        if key == "threads":
            torch.set_num_threads(int(value))
        elif key in ("deterministic_algorithms", "deterministic_warn_only"):
            on = saved.get("deterministic_algorithms", now["deterministic_algorithms"])
            torch.use_deterministic_algorithms(on, warn_only=saved.get("deterministic_warn_only", False))
        elif key == "float32_matmul_precision":
            torch.set_float32_matmul_precision(value)
        elif key == "cudnn_deterministic":
            torch.backends.cudnn.deterministic = value
        elif key == "cudnn_benchmark":
            torch.backends.cudnn.benchmark = value
        elif key == "cuda_matmul_allow_tf32":
            torch.backends.cuda.matmul.allow_tf32 = value
        elif key == "cudnn_allow_tf32":
            torch.backends.cudnn.allow_tf32 = value
        lines.append(f"resume: {key} {value!r} restored from the checkpoint (was {now[key]!r})")
    for line in lines:
        log(line)
    return lines


def _complete(path: Path) -> bool:
    """The file is a whole torch zip checkpoint (its central directory, written last, is there)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.endswith("data.pkl") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


_STEP = re.compile(r"^step=(\d+)\.ckpt$")


def _newest_complete(folder: Path) -> Optional[Path]:
    steps = sorted(
        ((int(m.group(1)), p) for p in folder.glob("step=*.ckpt") if (m := _STEP.match(p.name))), reverse=True
    )
    return next((p for _, p in steps if _complete(p)), None)


def resolve_resume(path: str | os.PathLike, log: Callable[[str], None]) -> str:
    """The checkpoint to resume from: ``path`` when it is complete; for a ``last.ckpt`` that is
    missing or damaged (a run killed while writing it), the newest complete ``step=N.ckpt`` beside it,
    with a ``resume:`` line saying so.

    Raises:
        FileNotFoundError / ValueError: ``path`` is missing or damaged and there is no complete
            checkpoint to fall back to (one line naming it and, for a damaged ``step=N.ckpt``, the newest
            complete one).
    """
    p = Path(path)
    if p.is_file() and _complete(p):
        return str(path)
    state = "missing" if not p.exists() else "damaged or truncated"
    folder = p.parent
    fallback = _newest_complete(folder) if folder.is_dir() else None
    if p.name == "last.ckpt" and fallback is not None:
        log(f"resume: {path} is {state}; resuming from {fallback}, the newest complete checkpoint")
        return str(fallback)
    if not p.exists():
        raise FileNotFoundError(
            f"{path}: checkpoint not found" + (f"; the newest complete one is {fallback}" if fallback else "")
        )
    if p.is_file() and p.stat().st_size and not zipfile.is_zipfile(p):
        try:  # the legacy (non-zip) torch format: no quick completeness check, read it whole
            load_training_checkpoint(p, mmap=False)
            return str(path)
        except ValueError:
            pass
    raise ValueError(
        f"{path}: damaged or truncated checkpoint"
        + (f"; the newest complete one is {fallback}" if fallback else "; no complete checkpoint beside it")
    )


#: Temporary files of :func:`alphafold_mem.io.atomic_write` for checkpoints (``.<name>.<random>.tmp``).
_OWN_TEMPORARY = re.compile(r"^\.(last|step=\d+)(-v\d+)?\.ckpt\.[A-Za-z0-9_]+\.tmp$")


def remove_stale_temporaries(folder: str | os.PathLike, log: Callable[[str], None]) -> list[str]:
    """Delete the temporary checkpoint files an interrupted write left in ``folder`` (only this
    program's naming pattern, ``.last.ckpt.<random>.tmp`` / ``.step=N.ckpt.<random>.tmp``); one line
    saying how many. Two runs writing the same checkpoint folder at once are not supported."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in sorted(folder.iterdir()):
        if _OWN_TEMPORARY.match(p.name) and p.is_file():
            try:
                p.unlink()
                removed.append(p.name)
            except OSError:
                pass
    if removed:
        log(
            f"removed {len(removed)} temporary file(s) of an interrupted checkpoint write in {folder}: "
            + ", ".join(removed)
        )
    return removed


class RunSettingsCallback(Callback):
    """Stores the run settings (JSON-able dict) in every checkpoint under :data:`RUN_KEY`, and the
    :func:`numeric_settings` under :data:`NUMERICS_KEY`."""

    def __init__(self, settings: dict):
        self.settings = dict(settings)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[RUN_KEY] = dict(self.settings)
        checkpoint[NUMERICS_KEY] = numeric_settings()


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
    ``override:`` line per difference and return those lines. The checkpoint's numeric settings
    (:func:`restore_numeric_settings`) are restored, threads too unless ``run`` records them.

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
    # threads travel in the run settings when the caller records them (an explicit --threads wins)
    restore_numeric_settings(saved.numerics, log, keep=("threads",) if run is not None and "threads" in run else ())
    return lines


def default_out_dir(path: str | os.PathLike, saved_out: Optional[str]) -> str:
    """The run directory of a checkpoint: the folder holding its ``checkpoints/``, else the saved one."""
    p = Path(path).resolve()
    if p.parent.name == "checkpoints":
        return str(p.parent.parent)
    return saved_out or str(p.parent)
