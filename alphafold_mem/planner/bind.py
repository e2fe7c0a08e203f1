"""The public :func:`apply_memory_policy`: :func:`alphafold_mem.memory.bind.bind_memory_policy` plus,
for ``chunk_size="auto"``, a forward pre-hook that sizes chunks from the planner's prediction."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..memory.bind import bind_memory_policy, set_chunk_size
from ..memory.policy import MemoryPolicy
from ..model.alphafold import AlphaFold
from . import chooser, estimate


class AutoChunk:
    """Forward pre-hook of ``chunk_size="auto"``: picks the chunk size for each input with
    :func:`~alphafold_mem.planner.chooser.resolve_auto_chunk` and binds it. Cached per (sizes, training
    or inference, precision): a training step never reuses a choice made for a no-grad forward."""

    def __init__(self, policy: MemoryPolicy):
        self.policy = policy
        self.cache: dict[tuple, Optional[int]] = {}

    def __call__(self, model: nn.Module, args: tuple, kwargs: dict) -> None:
        batch = args[0] if args else kwargs["batch"]
        recycle_dim = args[1] if len(args) > 1 else kwargs.get("recycle_dim")
        sizes = estimate.batch_sizes(batch, recycle_dim)
        training = torch.is_grad_enabled()
        key = (sizes, training, self.policy.precision)
        if key not in self.cache:
            device = batch["aatype"].device
            self.cache[key] = chooser.resolve_auto_chunk(
                model.config, self.policy, *sizes, training=training, device=device
            )
        set_chunk_size(model, self.cache[key])


def apply_memory_policy(model: nn.Module, policy: MemoryPolicy) -> nn.Module:
    """Bind ``policy`` to ``model`` from outside (in place; returns the model); re-applying another
    policy replaces the previous one completely. Parameter names and values are unchanged.

    Every module's declaration (:mod:`alphafold_mem.memory.axes`) says what it takes: chunk sizes for
    declared splittable steps, the attention/LayerNorm implementation, in-place updates, precision,
    offload, and activation checkpointing of the Evoformer, extra-MSA and template stacks. With
    ``chunk_size="auto"`` a forward pre-hook picks, for each input size, the largest chunk whose
    predicted peak fits ``policy.max_memory`` (default: the device's free memory).

    Raises:
        UndeclaredModuleError: a module of ``model`` declares nothing.
        ValueError: ``chunk_size="auto"`` on a model that is not the whole ``AlphaFold`` (chunks are
            sized from its inputs).
    """
    hook = None
    if policy.chunk_size == "auto":
        if not isinstance(model, AlphaFold):
            raise ValueError("chunk_size='auto' needs the whole AlphaFold model (it sizes chunks from its inputs)")
        hook = AutoChunk(policy)
    return bind_memory_policy(model, policy, auto_chunk_hook=hook)


__all__ = ["AutoChunk", "apply_memory_policy"]
