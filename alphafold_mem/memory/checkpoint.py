"""Activation checkpointing on PyTorch's public API (``torch.utils.checkpoint.checkpoint`` with
``use_reentrant=False``), chosen by the memory policy and never written into the model.

Two granularities:

* blocks: a stack (a module whose ``memory_spec`` names a ``stack``) runs its ``blocks`` through
  :func:`run_blocks`, which reads the stack's ``checkpoint_every`` (set by the policy binder: 0 = off,
  n = segments of n blocks) and runs each segment as one checkpoint. Autograd keeps only the
  segment's inputs; during backward the segment is recomputed from them with the same RNG and
  autocast state, so the values are bit-identical to running without checkpoints.
* updates: :func:`checkpoint_module` makes one module's forward a checkpoint from outside, by giving
  the instance a ``forward`` that calls the class's forward under ``checkpoint``; removing the
  returned handle restores the class's forward. Parameter names are unchanged.

Nothing is checkpointed when no gradient is recorded (inference).

Anchor: pytorch/torchtitan ``torchtitan/distributed/activation_checkpoint.py`` applies per-block
checkpointing from outside the model.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


def _chain(blocks: list[nn.Module], args: tuple, kwargs: dict) -> Any:
    """Call ``blocks`` in order: block j+1 gets block j's outputs followed by the remaining args."""
    out = blocks[0](*args, **kwargs)
    for block in blocks[1:]:
        outs = out if isinstance(out, tuple) else (out,)
        out = block(*outs, *args[len(outs):], **kwargs)
    return out


def run_blocks(stack: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """Run ``stack.blocks`` in order, each block on the previous block's outputs followed by the
    remaining (unchanged) ``args``; with ``stack.checkpoint_every = n > 0`` and gradients recorded,
    each segment of n consecutive blocks is one activation checkpoint.

    Returns:
        The last block's output (the inputs, unchanged, for an empty stack).
    """
    blocks = list(stack.blocks)
    if not blocks:
        return args[0] if len(args) == 1 else args
    every = getattr(stack, "checkpoint_every", 0)
    if not every or not torch.is_grad_enabled():
        return _chain(blocks, args, kwargs)
    out = None
    for start in range(0, len(blocks), every):
        segment = blocks[start:start + every]
        if out is not None:
            outs = out if isinstance(out, tuple) else (out,)
            args = (*outs, *args[len(outs):])
        out = checkpoint(_chain, segment, args, kwargs, use_reentrant=False)
    return out


class _CheckpointedForward:
    """The instance ``forward`` :func:`checkpoint_module` installs."""

    def __init__(self, module: nn.Module):
        self.forward = type(module).forward.__get__(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)


class CheckpointHandle:
    """Undoes :func:`checkpoint_module` (same interface as a hook's ``RemovableHandle``)."""

    def __init__(self, module: nn.Module):
        self.module = module

    def remove(self) -> None:
        if isinstance(self.module.__dict__.get("forward"), _CheckpointedForward):
            del self.module.__dict__["forward"]


def checkpoint_module(module: nn.Module) -> CheckpointHandle:
    """Make every call of ``module`` (while gradients are recorded) one activation checkpoint.

    Raises:
        ValueError: ``module`` already has an instance-level ``forward`` of another origin.
    """
    current = module.__dict__.get("forward")
    if current is not None and not isinstance(current, _CheckpointedForward):
        raise ValueError(f"{type(module).__qualname__} already has an instance forward; not checkpointing it")
    module.__dict__["forward"] = _CheckpointedForward(module)
    return CheckpointHandle(module)


__all__ = ["CheckpointHandle", "checkpoint_module", "run_blocks"]
