"""Build the Lightning Trainer and run training (what ``alphafold-mem train`` calls)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from ..config import ModelConfig
from ..distributed import mesh_shape
from ..memory.policy import PolicyRequest
from .checkpoint import AtomicCheckpointIO, check_config_compatible, read_checkpoint_config
from .config import TrainConfig
from .data_module import AF2DataModule, DataOptions
from .init_weights import init_from_weights
from .lightning_messages import quiet_lightning
from .lightning_module import AlphaFoldLightning
from .multimer_data import MultimerDataModule
from .multimer_module import MultimerLightning, multimer_training_config
from .progress import StepTimer, make_loggers
from .resume import ApplyTrainConfig, RunSettingsCallback, remove_stale_temporaries, resume_overrides
from .strategies import make_strategy

__all__ = ["build_trainer", "train", "PRECISIONS"]

PRECISIONS = ("32", "bf16-mixed")


def _strategy(name):
    return make_strategy(name)  # DDP for heads without gradient; FSDP / DeepSpeed refused


def build_trainer(
    out_dir: str | os.PathLike,
    max_steps: int,
    precision: str = "32",
    devices="auto",
    strategy: str = "auto",
    accelerator: str = "auto",
    val_every_steps: Optional[int] = 200,
    ckpt_every_steps: int = 200,
    loggers: Sequence[str] = ("csv",),
    callbacks: Sequence[Callback] = (),
    progress_bar: bool = True,
    num_nodes: int = 1,
) -> L.Trainer:
    """A Lightning Trainer for :class:`AlphaFoldLightning`.

    Args:
        out_dir: checkpoints go to ``out_dir/checkpoints`` (``last.ckpt`` plus ``step=N.ckpt`` every
            ``ckpt_every_steps``, written atomically); logs to ``out_dir/logs/metrics.csv`` (always)
            and ``out_dir/tensorboard`` when ``"tensorboard"`` is in ``loggers``
            (:func:`alphafold_mem.train.progress.make_loggers`). The progress bar shows the loss,
            lDDT-Cα and step time (:class:`alphafold_mem.train.progress.StepTimer`).
        precision: ``"32"`` or ``"bf16-mixed"`` (losses and geometry stay fp32 either way).
        devices, strategy, accelerator, num_nodes: passed to Lightning (``"ddp"`` finds unused
            parameters; FSDP / DeepSpeed are refused, :mod:`alphafold_mem.train.strategies`);
            ``devices`` is per node.
        val_every_steps: validation interval in optimiser steps (None: never).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    out = Path(out_dir)
    logs = make_loggers(out, loggers)  # metrics.csv always, TensorBoard on request
    ckpt = ModelCheckpoint(
        dirpath=out / "checkpoints",
        filename="step={step}",
        auto_insert_metric_name=False,
        every_n_train_steps=ckpt_every_steps,
        save_top_k=-1,
        save_last=True,
    )
    return L.Trainer(
        default_root_dir=out,
        max_steps=max_steps,
        precision="32-true" if precision == "32" else precision,
        devices=devices,
        num_nodes=num_nodes,
        strategy=_strategy(strategy),
        accelerator=accelerator,
        logger=logs,
        callbacks=[ckpt, StepTimer(), *callbacks],
        plugins=[AtomicCheckpointIO()],
        val_check_interval=min(val_every_steps, max_steps) if val_every_steps else None,
        check_val_every_n_epoch=None if val_every_steps else 1,
        limit_val_batches=None if val_every_steps else 0,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        use_distributed_sampler=False,
        enable_progress_bar=progress_bar,
        enable_model_summary=False,
    )


def train(
    model_config: ModelConfig,
    train_config: TrainConfig,
    data_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    max_steps: int,
    precision: str = "32",
    devices="auto",
    strategy: str = "auto",
    accelerator: str = "auto",
    resume: Optional[str] = None,
    ckpt_every_steps: int = 200,
    num_workers: Optional[int] = 0,
    loggers: Sequence[str] = ("csv",),
    callbacks: Sequence[Callback] = (),
    progress_bar: bool = True,
    memory_policy: Optional[PolicyRequest] = None,
    run_settings: Optional[dict] = None,
    init_weights: Optional[str] = None,
    num_nodes: int = 1,
    log: Optional[Callable[[str], None]] = None,
    dap: int = 1,
    data_options: Optional[DataOptions] = None,
) -> AlphaFoldLightning:
    """Train (or resume) and return the trained module. ``memory_policy``, the one memory argument, is
    bound to the model (see :class:`AlphaFoldLightning`: ``"auto"`` and ``chunk_size="auto"`` are
    resolved for the training sizes at set-up); ``None``: the reference computation. ``run_settings`` (data
    directory, steps, precision, ...; :mod:`.resume`) are stored in every checkpoint. On resume every
    setting that differs from the checkpoint's is logged as an ``override:`` line (``log``, default
    stderr). At start-up the dropped training data are reported (:mod:`.data_report`).
    ``init_weights``: start from the weights of this file (AF2 .npz, OpenFold .pt, our checkpoints),
    EMA included (:func:`alphafold_mem.train.init_weights.init_from_weights`). ``dap``: devices
    sharing each sample (dynamic axial parallelism; ``devices`` must be a multiple, and the strategy DDP).
    ``data_options``: sampling, filters, templates, validation data (:class:`.data_module.DataOptions`);
    ``num_workers=None``: :func:`.data_module.default_num_workers`.

    Raises:
        ValueError: ``resume`` or ``init_weights`` was saved for a different architecture (one
            sentence naming the differing fields), ``resume`` with another seed or batch size
            (:data:`.resume.FIXED_ON_RESUME`), or both ``resume`` and ``init_weights`` were given.
    """
    if resume is not None and init_weights is not None:
        raise ValueError("--init-weights starts a new run from given weights and --resume continues a run: give one")
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    model_config = multimer_training_config(model_config)  # a multimer preset gets AF2-Multimer's loss weights
    remove_stale_temporaries(Path(out_dir) / "checkpoints", log)  # helper E: leftovers of a killed write
    if resume is not None:
        saved, _ = read_checkpoint_config(resume)
        check_config_compatible(saved, model_config)
        resume_overrides(resume, model_config, train_config, run_settings, log)
        callbacks = [*callbacks, ApplyTrainConfig()]  # overrides take effect after Lightning's restore
    if run_settings is not None:
        callbacks = [*callbacks, RunSettingsCallback(run_settings)]
    L.seed_everything(train_config.seed, workers=True, verbose=False)
    if dap > 1:
        mesh_shape(devices if isinstance(devices, int) else dap, dap)  # raises a clear error
        strategy = "ddp" if strategy == "auto" else strategy
    if model_config.multimer:  # complexes: permutation alignment, multimer losses (:mod:`.multimer_module`)
        module = MultimerLightning(model_config, train_config, memory_policy, dap=dap)
        cluster_file = data_options.cluster_file if data_options is not None else None
        dm = MultimerDataModule(
            data_dir, model_config, train_config, max_steps, num_workers or 0, log, cluster_file=cluster_file
        )
    else:
        module = AlphaFoldLightning(model_config, train_config, memory_policy, dap=dap)
        dm = AF2DataModule(
            data_dir,
            model_config,
            train_config,
            cache_dir=Path(out_dir) / "chain_index",
            max_steps=max_steps,
            num_workers=num_workers,
            report_dir=out_dir,
            log=log,
            options=data_options,
        )
    if init_weights is not None:
        log(f"initial weights: {init_from_weights(module, init_weights)}")
    with quiet_lightning():  # Lightning's deprecations and logger advertisement, by their text
        trainer = build_trainer(
            out_dir,
            max_steps,
            precision,
            devices,
            strategy,
            accelerator,
            train_config.val_every_steps,
            ckpt_every_steps,
            loggers,
            callbacks,
            progress_bar,
            num_nodes,
        )
        trainer.fit(module, datamodule=dm, ckpt_path=resume)
        if trainer.global_step > 0:  # ModelCheckpoint saves only every N steps: make last.ckpt the final state
            trainer.save_checkpoint(Path(out_dir) / "checkpoints" / "last.ckpt")
    return module
