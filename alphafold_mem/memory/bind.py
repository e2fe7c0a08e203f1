"""Binding a :class:`~alphafold_mem.memory.policy.MemoryPolicy` to a model, from outside, by reading
each module's declaration (:mod:`alphafold_mem.memory.axes`), never a list of classes.

What the binder sets, per declaration:

* a module with splittable steps: ``chunk_size``;
* seam ``attention``: ``attention_impl`` (``"triton"`` under ``kernels="triton"``, else the policy's
  ``attention``) and ``attention_chunks``; seam ``kernel``: ``kernel_impl`` (the policy's ``kernels``);
  seam ``inplace``: ``inplace``; seams ``precision``, ``offload``, ``templates``, ``head_logits``,
  ``outer_product``: the attribute of the same name;
* a stack: ``checkpoint_every`` from the policy's ``checkpoint_<stack>`` field, read by
  :func:`alphafold_mem.memory.checkpoint.run_blocks`; with ``checkpoint_granularity="update"`` every
  splittable module inside its blocks (one residual update each) is checkpointed instead; with
  ``"nested"``, in addition (inside the recomputation of each block segment).

A module whose class declares nothing makes the binder raise
(:class:`~alphafold_mem.memory.axes.UndeclaredModuleError`), so a new module cannot silently opt out.
Parameter names and values are never changed.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch.nn as nn

from .axes import STACKS, UndeclaredModuleError, spec_of, undeclared_modules
from .checkpoint import checkpoint_module
from .policy import MemoryPolicy

#: ``hook(model, args, kwargs)``: a forward pre-hook that sets the chunk size for ``chunk_size="auto"``.
AutoChunkHook = Callable[[nn.Module, tuple, dict], None]


def set_chunk_size(model: nn.Module, chunk_size: Optional[int]) -> None:
    """Set ``chunk_size`` on every module of ``model`` that declares splittable steps."""
    for module in model.modules():
        if spec_of(module).chunkable:
            module.chunk_size = chunk_size


def _seam_settings(policy: MemoryPolicy) -> dict[str, dict[str, Any]]:
    """Seam name -> the attributes it sets and their values under ``policy``."""
    return {
        "attention": {
            "attention_impl": "triton" if policy.kernels == "triton" else policy.attention,
            "attention_chunks": tuple(policy.attention_chunks),
        },
        "kernel": {"kernel_impl": policy.kernels},
        "inplace": {"inplace": policy.inplace},
        "precision": {"precision": policy.precision},
        "offload": {"offload": policy.offload},
        "templates": {"templates": policy.templates},
        "head_logits": {"head_logits": policy.head_logits},
        "outer_product": {"outer_product": policy.outer_product},
    }


def bind_memory_policy(
    model: nn.Module, policy: MemoryPolicy, auto_chunk_hook: Optional[AutoChunkHook] = None
) -> nn.Module:
    """Bind ``policy`` to ``model`` in place (returns the model). Re-binding replaces the previous
    policy completely.

    Args:
        model: any module built from declaring modules (the whole ``AlphaFold`` or one op).
        policy: the memory policy.
        auto_chunk_hook: required for ``chunk_size="auto"``: the forward pre-hook that picks the
            chunk size per input size (the planner's; :func:`alphafold_mem.apply_memory_policy`
            passes it).

    Raises:
        UndeclaredModuleError: a module class of ``model`` declares no ``memory_spec`` (all are named).
        ValueError: ``chunk_size="auto"`` without ``auto_chunk_hook``.
    """
    bad = undeclared_modules(model)
    if bad:
        raise UndeclaredModuleError(
            f"{len(bad)} module(s) declare no memory_spec in their class body: {'; '.join(bad)}. Add "
            "`memory_spec = declare(...)` (splittable axes, policy seams) or `memory_spec = exempt(reason)` "
            "(alphafold_mem.memory.axes)"
        )
    if policy.chunk_size == "auto" and auto_chunk_hook is None:
        raise ValueError("chunk_size='auto' needs the planner's chooser: use alphafold_mem.apply_memory_policy")
    for handle in getattr(model, "_memory_policy_handles", []):
        handle.remove()
    handles: list[Any] = []
    chunk = None if policy.chunk_size == "auto" else policy.chunk_size
    settings = _seam_settings(policy)
    for module in model.modules():
        spec = spec_of(module)
        if spec.chunkable:
            module.chunk_size = chunk
        for seam in spec.seams:  # "dropout" has no policy field: device sharding binds it
            for attribute, value in settings.get(seam, {}).items():
                setattr(module, attribute, value)
        if spec.stack is not None:
            every = getattr(policy, STACKS[spec.stack])
            by_update = every and policy.checkpoint_granularity in ("update", "nested")
            module.checkpoint_every = 0 if policy.checkpoint_granularity == "update" else every
            if by_update:
                for block in module.blocks:
                    handles += [checkpoint_module(m) for m in block.modules() if spec_of(m).chunkable]
    if policy.chunk_size == "auto":
        handles.append(model.register_forward_pre_hook(auto_chunk_hook, with_kwargs=True))
    model._memory_policy_handles = handles
    model.memory_policy = policy
    return model


__all__ = ["AutoChunkHook", "bind_memory_policy", "set_chunk_size"]
