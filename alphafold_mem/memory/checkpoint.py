"""Activation checkpointing applied to a block stack from outside (no wrapper modules, no renamed
parameters), with a granularity of ``every`` blocks per checkpoint.

How: for each segment ``blocks[i : i + every]`` a forward pre-hook on its first block opens a
non-reentrant checkpoint region (PyTorch's ``_checkpoint_without_reentrant_generator``, the
generator behind ``torch.utils.checkpoint.checkpoint(use_reentrant=False)`` and the composable
``torch.distributed._composable.checkpoint``) and a forward hook on its last block closes it. Inside
the region autograd keeps only the segment's inputs; during backward the segment is recomputed from
them (same RNG state, same autocast state) by calling its blocks in order. The blocks of a stack
must therefore be chained positionally: block j+1 is called with block j's outputs followed by the
remaining (unchanged) arguments, as every stack in :mod:`alphafold_mem.model` does. Nothing happens
when no gradient is recorded (inference).

Anchor: pytorch/torchtitan ``torchtitan/distributed/activation_checkpoint.py`` applies per-block
checkpointing to the model from outside; this does the same without changing parameter names.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch
import torch.nn as nn
from torch.utils.checkpoint import _checkpoint_without_reentrant_generator
from torch.utils.hooks import RemovableHandle


class _Segment:
    """Hook state of one checkpointed segment of consecutive blocks."""

    def __init__(self, blocks: Sequence[nn.Module]):
        self.blocks = list(blocks)
        self.recomputing = False
        self.generator = None

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Recompute the segment from its inputs (called by autograd during backward)."""
        out = self.blocks[0](*args, **kwargs)
        for block in self.blocks[1:]:
            outs = out if isinstance(out, tuple) else (out,)
            out = block(*outs, *args[len(outs):], **kwargs)
        return out

    @contextlib.contextmanager
    def _recompute_context(self) -> Iterator[None]:
        self.recomputing = True
        try:
            yield
        finally:
            self.recomputing = False

    def pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if self.recomputing or not torch.is_grad_enabled():
            return
        if self.generator is not None:  # a forward that raised inside the segment left it open
            self.generator.close()
        self.generator = _checkpoint_without_reentrant_generator(
            self.run, True, lambda: (contextlib.nullcontext(), self._recompute_context()), "default", False, True,
            *args, **kwargs)
        next(self.generator)

    def post_hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        gen, self.generator = self.generator, None
        if gen is None:
            return
        try:
            next(gen)
        except StopIteration:
            return
        raise RuntimeError("activation checkpoint region did not close")


def checkpoint_blocks(blocks: Sequence[nn.Module], every: int) -> list[RemovableHandle]:
    """Checkpoint ``blocks`` in segments of ``every`` consecutive blocks (the last may be shorter).

    Args:
        blocks: the stack's blocks, in the order the stack calls them.
        every: blocks per checkpoint (>= 1).

    Returns:
        The hook handles; ``handle.remove()`` on all of them undoes the checkpointing.
    """
    if every < 1:
        raise ValueError(f"blocks per checkpoint must be >= 1, got {every}")
    handles = []
    blocks = list(blocks)
    for start in range(0, len(blocks), every):
        seg = _Segment(blocks[start:start + every])
        handles.append(seg.blocks[0].register_forward_pre_hook(seg.pre_hook, with_kwargs=True))
        handles.append(seg.blocks[-1].register_forward_hook(seg.post_hook, always_call=True))
    return handles


__all__ = ["checkpoint_blocks"]
