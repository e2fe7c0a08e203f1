"""Build the Lightning Trainer and run training (what ``alphafold-mem train`` calls)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from ..config import ModelConfig
from ..memory.policy import MemoryPolicy
from .checkpoint import AtomicCheckpointIO, check_config_compatible, read_checkpoint_config
from .config import TrainConfig
from .data_module import AF2DataModule
from .lightning_module import AlphaFoldLightning

__all__ = ["build_trainer", "train", "PRECISIONS"]

PRECISIONS = ("32", "bf16-mixed")


def _strategy(name: str):
    if name == "ddp":  # heads with zero loss weight (PAE, exp. resolved) get no gradient
        from lightning.pytorch.strategies import DDPStrategy
        return DDPStrategy(find_unused_parameters=True)
    return name


def build_trainer(out_dir: str | os.PathLike, max_steps: int, precision: str = "32", devices="auto",
                  strategy: str = "auto", accelerator: str = "auto", val_every_steps: Optional[int] = 200,
                  ckpt_every_steps: int = 200, loggers: Sequence[str] = ("csv",),
                  callbacks: Sequence[Callback] = (), progress_bar: bool = True) -> L.Trainer:
    """A Lightning Trainer for :class:`AlphaFoldLightning`.

    Args:
        out_dir: checkpoints go to ``out_dir/checkpoints`` (``last.ckpt`` plus ``step=N.ckpt`` every
            ``ckpt_every_steps``, written atomically); logs to ``out_dir/logs`` (CSV) and
            ``out_dir/tensorboard`` when ``"tensorboard"`` is in ``loggers``.
        precision: ``"32"`` or ``"bf16-mixed"`` (losses and geometry stay fp32 either way).
        devices, strategy, accelerator: passed to Lightning (``"ddp"`` finds unused parameters).
        val_every_steps: validation interval in optimiser steps (None: never).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    out = Path(out_dir)
    logs = []
    if "csv" in loggers:
        logs.append(CSVLogger(out, name="logs", version=""))
    if "tensorboard" in loggers:
        try:
            from lightning.pytorch.loggers import TensorBoardLogger
            logs.append(TensorBoardLogger(out, name="tensorboard", version=""))
        except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError("--logger tensorboard needs the 'tensorboard' package (pip install tensorboard)") from exc
    ckpt = ModelCheckpoint(dirpath=out / "checkpoints", filename="step={step}", auto_insert_metric_name=False,
                           every_n_train_steps=ckpt_every_steps, save_top_k=-1, save_last=True)
    return L.Trainer(
        default_root_dir=out, max_steps=max_steps, precision="32-true" if precision == "32" else precision,
        devices=devices, strategy=_strategy(strategy), accelerator=accelerator,
        logger=logs or False, callbacks=[ckpt, *callbacks], plugins=[AtomicCheckpointIO()],
        val_check_interval=min(val_every_steps, max_steps) if val_every_steps else None,
        check_val_every_n_epoch=None if val_every_steps else 1,
        limit_val_batches=None if val_every_steps else 0,
        num_sanity_val_steps=0, log_every_n_steps=1, use_distributed_sampler=False,
        enable_progress_bar=progress_bar, enable_model_summary=False)


def train(model_config: ModelConfig, train_config: TrainConfig, data_dir: str | os.PathLike,
          out_dir: str | os.PathLike, max_steps: int, precision: str = "32", devices="auto",
          strategy: str = "auto", accelerator: str = "auto", resume: Optional[str] = None,
          ckpt_every_steps: int = 200, num_workers: int = 0, loggers: Sequence[str] = ("csv",),
          callbacks: Sequence[Callback] = (), progress_bar: bool = True,
          memory_policy: Optional[MemoryPolicy] = None, dap: int = 1) -> AlphaFoldLightning:
    """Train (or resume) and return the trained module. ``memory_policy`` is bound to the model
    (see :class:`AlphaFoldLightning`); ``None``: the reference computation. ``dap``: devices sharing
    each sample (dynamic axial parallelism; ``devices`` must be a multiple, and the strategy DDP).

    Raises:
        ValueError: ``resume`` was saved for a different architecture (one sentence naming the
            differing fields).
    """
    if resume is not None:
        saved, _ = read_checkpoint_config(resume)
        check_config_compatible(saved, model_config)
    L.seed_everything(train_config.seed, workers=True, verbose=False)
    if dap > 1:
        from ..distributed import mesh_shape

        mesh_shape(devices if isinstance(devices, int) else dap, dap)  # raises a clear error
        strategy = "ddp" if strategy == "auto" else strategy
    module = AlphaFoldLightning(model_config, train_config, memory_policy, dap=dap)
    dm = AF2DataModule(data_dir, model_config, train_config, cache_dir=Path(out_dir) / "chain_index",
                       max_steps=max_steps, num_workers=num_workers)
    trainer = build_trainer(out_dir, max_steps, precision, devices, strategy, accelerator,
                            train_config.val_every_steps, ckpt_every_steps, loggers, callbacks, progress_bar)
    trainer.fit(module, datamodule=dm, ckpt_path=resume)
    if trainer.global_step > 0:  # ModelCheckpoint saves only every N steps: make last.ckpt the final state
        trainer.save_checkpoint(Path(out_dir) / "checkpoints" / "last.ckpt")
    return module
