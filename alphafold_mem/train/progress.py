"""What a person watching training sees: Lightning's progress bar with the loss, lDDT-Cα of the
training crop and the step time; ``metrics.csv`` always; TensorBoard when it is installed.

``metrics.csv`` is the run's whole history: rows are flushed every step (a killed run keeps what it
logged), and a run writing into a folder that has one keeps its rows before the first step it logs
itself and replaces the rest (:class:`HistoryCSVLogger`): a resumed run appends, each step once; a
new run from step 0 starts the file afresh.

The loss and lDDT-Cα are logged by :class:`AlphaFoldLightning` (``train/loss``, ``train/lddt_ca``,
``val/lddt_ca``, with ``prog_bar=True``); :class:`StepTimer` adds ``train/step_s``, the wall time of
one optimisation step (forward, loss, backward, update, EMA) in seconds.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

__all__ = ["HistoryCSVLogger", "InterruptCheckpoint", "StepTimer", "make_loggers", "LOGGERS"]

LOGGERS = ("csv", "tensorboard")


class StepTimer(Callback):
    """Logs ``train/step_s`` (seconds per training step, shown in the progress bar)."""

    def __init__(self) -> None:
        self._t0 = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._t0 is not None:
            pl_module.log(
                "train/step_s",
                time.perf_counter() - self._t0,
                prog_bar=True,
                batch_size=len(batch.sample_ids) if hasattr(batch, "sample_ids") else 1,
            )


class InterruptCheckpoint(Callback):
    """SIGINT (Ctrl+C) or SIGTERM during training: the step under way finishes, ``last.ckpt`` is written
    beside the periodic checkpoints and training stops, with one line naming the checkpoint to give
    ``--resume``; a second SIGINT stops at once (Python's KeyboardInterrupt). The checkpoint is
    taken where the periodic ones are (the end of a step), so a resume from it is the uninterrupted
    run's continuation. Handlers are installed when training starts (main thread only) and the
    previous ones restored when it ends."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, log=None) -> None:
        self.received: Optional[str] = None
        self._previous: dict = {}
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    def _handler(self, signum, frame) -> None:
        if self.received is not None and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        self._log(f"train: {self.received} received; finishing this step and saving last.ckpt (SIGINT again: stop now)")

    def on_train_start(self, trainer, pl_module) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in self.SIGNALS}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.received is None or trainer.should_stop:
            return
        ckpt = trainer.checkpoint_callback
        folder = Path(ckpt.dirpath) if ckpt is not None and ckpt.dirpath else Path(trainer.default_root_dir)
        path = folder / "last.ckpt"
        trainer.save_checkpoint(path)
        trainer.should_stop = True
        self._log(
            f"train: stopped by {self.received} after step {trainer.global_step}; saved {path}; "
            f"continue with the same command and --resume {path}"
        )

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def on_train_end(self, trainer, pl_module) -> None:
        self._restore()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._restore()


class _HistoryWriter(ExperimentWriter):
    """Lightning's CSV writer without its deletion of an existing ``metrics.csv``: the old rows are
    kept up to the first step this run logs (later ones are the same steps, logged again)."""

    def __init__(self, log_dir: str) -> None:
        path = os.path.join(log_dir, self.NAME_METRICS_FILE)
        self._old_keys: list[str] = []
        self._old_rows: Optional[list[dict]] = None
        if os.path.isfile(path):
            with open(path, newline="") as fh:
                reader = csv.DictReader(fh)
                self._old_rows = list(reader)
                self._old_keys = list(reader.fieldnames or [])
        super().__init__(log_dir)  # deletes metrics.csv; rewritten with the kept rows at the first save
        self.metrics_keys = sorted(self._old_keys)

    def save(self) -> None:
        if self._old_rows is not None and self.metrics:
            first = min(int(m["step"]) for m in self.metrics if m.get("step") is not None)
            kept = [r for r in self._old_rows if r.get("step", "") != "" and int(float(r["step"])) < first]
            self._old_rows = None
            if kept:
                with open(self.metrics_file_path, "w", newline="") as fh:
                    writer = csv.DictWriter(fh, fieldnames=self.metrics_keys)
                    writer.writeheader()
                    writer.writerows(kept)
        super().save()


class HistoryCSVLogger(CSVLogger):
    """``CSVLogger`` whose ``metrics.csv`` keeps the history of earlier runs in its folder up to the
    first step this run logs (see the module docstring); rows are flushed every
    ``flush_logs_every_n_steps`` (default 1)."""

    def __init__(self, *args, flush_logs_every_n_steps: int = 1, **kwargs) -> None:
        super().__init__(*args, flush_logs_every_n_steps=flush_logs_every_n_steps, **kwargs)

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _HistoryWriter(log_dir=self.log_dir)
        return self._experiment


def make_loggers(out: str | Path, loggers: Sequence[str] = ("csv",)) -> list:
    """A :class:`HistoryCSVLogger` writing ``out/logs/metrics.csv`` (always) and, if ``"tensorboard"`` is in
    ``loggers``, a ``TensorBoardLogger`` writing ``out/tensorboard``.

    Raises:
        ValueError: an unknown logger name, or ``"tensorboard"`` without the ``tensorboard`` package
            (the optional extra: ``pip install 'alphafold_mem[tensorboard]'``).
    """
    from lightning.pytorch.loggers import TensorBoardLogger  # optional: TensorBoard comes with the tensorboard extra

    unknown = set(loggers) - set(LOGGERS)
    if unknown:
        raise ValueError(f"unknown logger(s) {sorted(unknown)}; choose from {LOGGERS}")
    out = Path(out)
    logs = [HistoryCSVLogger(out, name="logs", version="")]
    if "tensorboard" in loggers:
        if importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorboardX") is None:
            raise ValueError(
                "--logger tensorboard needs the 'tensorboard' package: "
                "pip install 'alphafold_mem[tensorboard]' (metrics.csv is written regardless)"
            )
        logs.append(TensorBoardLogger(out, name="tensorboard", version=""))
    return logs
