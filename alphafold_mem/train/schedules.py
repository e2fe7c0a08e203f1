"""Learning-rate schedule of AF2 training (Jumper et al. 2021, Suppl. 1.11.3)."""

from __future__ import annotations

import torch


def af2_lr_factor(
    step: int, warmup_steps: int, decay_after_steps: int, decay_every_steps: int, decay_factor: float
) -> float:
    """Multiplier of the base learning rate at optimiser step ``step`` (0-based).

    Linear warm-up ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps, then 1,
    then ``decay_factor ** k`` where ``k`` counts the completed ``decay_every_steps`` periods after
    ``decay_after_steps`` (AF2: warm-up 1000, x0.95 after 50k steps).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if step < decay_after_steps:
        return 1.0
    return decay_factor ** (1 + (step - decay_after_steps) // max(1, decay_every_steps))


def af2_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    decay_after_steps: int,
    decay_every_steps: int,
    decay_factor: float,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` with :func:`af2_lr_factor` (step it once per optimiser step)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: af2_lr_factor(s, warmup_steps, decay_after_steps, decay_every_steps, decay_factor)
    )
