"""What a person watching training sees: Lightning's progress bar with the loss, lDDT-Cα of the
training crop and the step time; ``metrics.csv`` always; TensorBoard when it is installed.

The loss and lDDT-Cα are logged by :class:`AlphaFoldLightning` (``train/loss``, ``train/lddt_ca``,
``val/lddt_ca``, with ``prog_bar=True``); :class:`StepTimer` adds ``train/step_s``, the wall time of
one optimisation step (forward, loss, backward, update, EMA) in seconds.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Sequence

from lightning.pytorch.callbacks import Callback

__all__ = ["StepTimer", "make_loggers", "LOGGERS"]

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


def make_loggers(out: str | Path, loggers: Sequence[str] = ("csv",)) -> list:
    """A ``CSVLogger`` writing ``out/logs/metrics.csv`` (always) and, if ``"tensorboard"`` is in
    ``loggers``, a ``TensorBoardLogger`` writing ``out/tensorboard``.

    Raises:
        ValueError: an unknown logger name, or ``"tensorboard"`` without the ``tensorboard`` package
            (the optional extra: ``pip install 'alphafold_mem[tensorboard]'``).
    """
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    unknown = set(loggers) - set(LOGGERS)
    if unknown:
        raise ValueError(f"unknown logger(s) {sorted(unknown)}; choose from {LOGGERS}")
    out = Path(out)
    logs = [CSVLogger(out, name="logs", version="")]
    if "tensorboard" in loggers:
        if importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorboardX") is None:
            raise ValueError(
                "--logger tensorboard needs the 'tensorboard' package: "
                "pip install 'alphafold_mem[tensorboard]' (metrics.csv is written regardless)"
            )
        logs.append(TensorBoardLogger(out, name="tensorboard", version=""))
    return logs
