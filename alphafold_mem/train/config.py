"""Training hyperparameters (runtime-free): optimiser, schedule, clipping, EMA, sampling.

Defaults are the published AF2 values (Jumper et al. 2021, Suppl. 1.11.3 and 1.11.7; the same
numbers as OpenFold's ``AlphaFoldLRScheduler`` and ``ExponentialMovingAverage`` defaults): Adam with
lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-6; linear warm-up from 0 over the first 1000 steps; lr x0.95
every 50,000 steps after step 50,000; gradient clipping at global norm 0.1; EMA decay 0.999; the
backbone FAPE clamped in 90 % of the samples (Suppl. 1.11.5). Runtime choices (devices, strategy,
precision, paths) are CLI arguments, not fields here.
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
    clamped_fape_probability: float = 0.9
    batch_size: int = 1
    seed: int = 0
    max_consecutive_bad_steps: int = 5
    held_out: tuple[str, ...] = ()  # PDB ids (lower case) kept out of training for validation
    val_every_steps: int = 200
    max_val_chains: int = 8

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise KeyError(f"unknown TrainConfig fields {sorted(unknown)} (valid: {sorted(names)})")
        d = dict(d)
        for k in ("adam_betas", "held_out"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


#: Hold-out set of the shipped example data (pdb ids): distinct sequences from every training chain.
DEFAULT_HELD_OUT = ("1aki", "6mrr", "1a8o", "4zey")
