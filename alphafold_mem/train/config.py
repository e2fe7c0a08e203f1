"""Training hyperparameters (runtime-free): optimiser, schedule, clipping, EMA, sampling.

Defaults are the published AF2 values (Jumper et al. 2021, Suppl. 1.11.3 and 1.11.7; the same
numbers as OpenFold's ``AlphaFoldLRScheduler`` and ``ExponentialMovingAverage`` defaults): Adam with
lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-6; linear warm-up from 0 over the first 1000 steps; lr x0.95
every 50,000 steps after step 50,000; gradient clipping at global norm 0.1; EMA decay 0.999. The
probability of clamping the backbone FAPE (0.9, Suppl. 1.11.5) is a loss hyperparameter and lives in
the model config (``loss.fape_clamp_probability``). Runtime choices (devices, strategy, precision,
paths) are CLI arguments, not fields here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser, schedule and sampling settings of one training run."""

    lr: float = 1e-3
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-6
    warmup_steps: int = 1000
    decay_after_steps: int = 50_000
    decay_every_steps: int = 50_000
    decay_factor: float = 0.95
    grad_clip_norm: float = 0.1
    ema_decay: float = 0.999
    batch_size: int = 1
    seed: int = 0
    max_consecutive_bad_steps: int = 5
    held_out: tuple[str, ...] = ()  # PDB ids (lower case) kept out of training for validation
    val_every_steps: int = 200
    max_val_chains: int = 8
    #: AF2 Suppl. 1.10: each step runs a number of recycling iterations drawn uniformly from
    #: 1..num_recycles + 1 (False: always all of them); validation always runs all of them.
    uniform_recycling: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Inverse of :meth:`to_dict` (also for checkpoints written before a field was removed).

        Raises:
            KeyError: an unknown field.
            ValueError: a removed field holding a value other than what now stands in its place.
        """
        d = dict(d)
        for name, (default, replacement) in REMOVED_FIELDS.items():
            if name in d and d.pop(name) != default:
                raise ValueError(f"TrainConfig.{name} was removed; its value now lives in {replacement}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise KeyError(f"unknown TrainConfig fields {sorted(unknown)} (valid: {sorted(names)})")
        for k in ("adam_betas", "held_out"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


#: Fields that no longer exist: name -> (the value that behaves as today, where the setting now lives).
REMOVED_FIELDS = {
    "clamped_fape_probability": (0.9, "the model config: --set loss.fape_clamp_probability=P"),
}


def check_removed(names) -> None:
    """Raise a clear error for a removed field given on the command line (``--train-set``).

    Raises:
        ValueError: one of ``names`` is a removed field (the message says where it lives now).
    """
    for name in names:
        if name in REMOVED_FIELDS:
            raise ValueError(f"--train-set {name}: TrainConfig.{name} was removed; use {REMOVED_FIELDS[name][1]}")


#: Hold-out set of the shipped example data (pdb ids): distinct sequences from every training chain.
DEFAULT_HELD_OUT = ("1aki", "6mrr", "1a8o", "4zey")
