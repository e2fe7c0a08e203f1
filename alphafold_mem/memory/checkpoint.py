"""Activation checkpointing on PyTorch's public API (``torch.utils.checkpoint.checkpoint``), chosen by
the memory policy and never written into the model.

Which of PyTorch's two implementations (:func:`_checkpointed`): on CPU, outside
``torch.distributed``, and when a tensor argument requires a gradient (always, in training: the
representations come out of the embedders), the reentrant one; else the non-reentrant one. Why:
measured (``scripts/compare_openfold.py --mode training``'s worker, our side, model_1_ptm 48 + 4
blocks, N_res 64, ``training()``, plain glibc, fresh process), the non-reentrant checkpoint's step grew
the resident set by 5.7 GB with 1.46 M page faults, the reentrant one's by 3.9 GB with 1.06 M (same
storage-counter peak, 563 vs 565 MB): the same bytes, allocated and freed in an order glibc's heap
keeps less of. Not elsewhere: DDP rejects parameters marked ready by nested reentrant backward passes
("Expected to mark a variable ready only once"), a reentrant checkpoint whose inputs need no
gradient returns an output without one (its parameters would get none), and on an accelerator the
host heap does not hold the activations. Consequence on CPU: backward through a checkpointed stack
must be ``.backward()`` (what Lightning calls); ``torch.autograd.grad`` raises PyTorch's error for
reentrant checkpoints.

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
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def _checkpointed(fn: Any, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` as one activation checkpoint: reentrant on CPU outside
    ``torch.distributed`` when a tensor in ``args`` requires a gradient, else non-reentrant (module
    docstring)."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed and any(t.requires_grad for t in tensors) and all(t.device.type == "cpu" for t in tensors):
        return checkpoint(lambda *a: fn(*a, **kwargs), *args, use_reentrant=True)
    return checkpoint(fn, *args, use_reentrant=False, **kwargs)


def _chain(blocks: list[nn.Module], args: tuple, kwargs: dict) -> Any:
    """Call ``blocks`` in order: block j+1 gets block j's outputs followed by the remaining args."""
    out = blocks[0](*args, **kwargs)
    for block in blocks[1:]:
        outs = out if isinstance(out, tuple) else (out,)
        out = block(*outs, *args[len(outs) :], **kwargs)
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
        segment = blocks[start : start + every]
        if out is not None:
            outs = out if isinstance(out, tuple) else (out,)
            args = (*outs, *args[len(outs) :])
        out = _checkpointed(lambda *a, _segment=segment: _chain(_segment, a, kwargs), args, {})
    return out


class _CheckpointedForward:
    """The instance ``forward`` :func:`checkpoint_module` installs."""

    def __init__(self, module: nn.Module):
        self.forward = type(module).forward.__get__(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        return _checkpointed(self.forward, args, kwargs)


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
