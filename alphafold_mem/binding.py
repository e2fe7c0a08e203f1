"""The one binder: :func:`bind` applies a :class:`~alphafold_mem.memory.policy.MemoryPolicy` to a model
and then, given a mesh, device sharding (dynamic axial parallelism, :mod:`alphafold_mem.distributed`),
from outside, by reading each module's declaration (:mod:`alphafold_mem.memory.axes`), never a list of
classes. Predict, training, the planner and the ablations call it and nothing else, so the order of
the two and every override between them live here.

What the binder sets, per declaration:

* a module with splittable steps: ``chunk_size`` (the policy's: ``None`` or rows per chunk);
* seam ``attention``: ``attention_impl`` (``"triton"`` under ``kernels="triton"``, else the policy's
  ``attention``) and ``attention_chunks``; seam ``kernel``: ``kernel_impl`` (the policy's ``kernels``);
  seam ``inplace``: ``inplace``; seams ``precision``, ``offload``, ``templates``, ``head_logits``,
  ``outer_product``: the attribute of the same name;
* a stack: ``checkpoint_every`` from the policy's ``checkpoint_<stack>`` field, read by
  :func:`alphafold_mem.memory.checkpoint.run_blocks`; with ``checkpoint_granularity="update"`` every
  splittable module inside its blocks (one residual update each) is checkpointed instead; with
  ``"nested"``, in addition (inside the recomputation of each block segment);
* with a mesh of more than one device: ``dap`` (the :class:`~alphafold_mem.distributed.runner.DapRunner`)
  on every module with splittable steps or the ``dropout`` seam, and the root's forward hooks
  (residue count and generator sync before, gathering after; :mod:`alphafold_mem.distributed.dap`).

What stays valid under device sharding, seam by seam:

* ``inplace``: the blocks' in-place residual updates stay (each device adds its update into its own
  share, :meth:`~alphafold_mem.distributed.runner.DapRunner.run_into`); the in-place embedding of the
  module that declares representation outputs (``AlphaFold``) is off: it builds the pair
  representation whole, in one buffer, from features every device holds whole, and a share-sized
  result cannot be added into it;
* ``kernel``: pointwise fused kernels (LayerNorm) run on the shares as they are and stay; a module
  that also declares splittable steps (the triangle multiplication) runs its PyTorch code: its fused
  kernel computes the whole update from the operands it is given, bypassing the declared steps
  through which sharding reaches the other devices' rows;
* ``attention``: the attention core (also the Triton kernel) runs inside declared steps, on slices,
  and stays; every other seam is unchanged.

Binding replaces the previous binding completely (policy and sharding), so the settings of a model
depend on the last call's arguments only, never on the order of earlier calls. Parameter names and
values are never changed.
"""

from __future__ import annotations

from typing import Any, Union

import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh

from .distributed.comm import Group
from .distributed.dap import dap_runner, shard_hooks
from .memory.axes import STACKS, MemorySpec, UndeclaredModuleError, spec_of, undeclared_modules
from .memory.checkpoint import checkpoint_module
from .memory.policy import MemoryPolicy

Mesh = Union[DeviceMesh, Group, None]


def _sharded_off(spec: MemorySpec) -> dict[str, Any]:
    """The attributes a module with declaration ``spec`` must have under device sharding, whatever the
    policy says (see the module docstring)."""
    off: dict[str, Any] = {}
    if "inplace" in spec.seams and spec.outputs:
        off["inplace"] = False  # the root's in-place embedding builds whole representations
    if "kernel" in spec.seams and spec.splits:
        off["kernel_impl"] = "reference"  # a fused kernel would bypass the declared steps
    return off


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


def bind(model: nn.Module, policy: MemoryPolicy, mesh: Mesh = None, *, gather_outputs: bool = False) -> nn.Module:
    """Bind ``policy`` and, when ``mesh`` spans more than one device, device sharding to ``model`` (in
    place; returns the model). Re-binding replaces the previous binding completely: without ``mesh``
    the model is the single-device model again, bit for bit.

    Args:
        model: any module built from declaring modules (the whole ``AlphaFold`` or one op). Under
            device sharding a module other than ``AlphaFold`` needs
            ``model.dap_sharding.set_residues(n)`` before a forward and its representations already
            distributed.
        policy: the memory policy, with a concrete chunk size (``None`` or an int).
        mesh: a ``("dp", "dap")`` :class:`DeviceMesh` (:func:`alphafold_mem.distributed.init_mesh`),
            a :class:`~alphafold_mem.distributed.comm.Group`, or ``None`` (one device).
        gather_outputs: under device sharding, gather the representation-shaped outputs the model
            declares (``pair``, ``msa``, the distogram and PAE logits, ...) so every device holds
            them whole (for a loss, or to compare with one device). Default: they stay distributed.

    Raises:
        UndeclaredModuleError: a module class of ``model`` declares no ``memory_spec`` (all are named).
        ValueError: ``policy.chunk_size == "auto"`` (chunks are sized by the planner before binding).
    """
    bad = undeclared_modules(model)
    if bad:
        raise UndeclaredModuleError(
            f"{len(bad)} module(s) declare no memory_spec in their class body: {'; '.join(bad)}. Add "
            "`memory_spec = declare(...)` (splittable axes, policy seams) or `memory_spec = exempt(reason)` "
            "(alphafold_mem.memory.axes)"
        )
    if policy.chunk_size == "auto":
        raise ValueError(
            "bind needs a concrete chunk size; resolve chunk_size='auto' for the input sizes first: "
            "alphafold_mem.planner.resolve_policy(policy, config, sizes, device)"
        )
    for handle in getattr(model, "_binding_handles", []):
        handle.remove()
    handles: list[Any] = []
    runner = dap_runner(mesh)
    settings = _seam_settings(policy)
    for module in model.modules():
        spec = spec_of(module)
        if spec.chunkable:
            module.chunk_size = policy.chunk_size
        for seam in spec.seams:  # "dropout" has no policy field: device sharding binds it
            for attribute, value in settings.get(seam, {}).items():
                setattr(module, attribute, value)
        if spec.splits or "dropout" in spec.seams:
            module.dap = runner
        if runner is not None:
            for attribute, value in _sharded_off(spec).items():
                setattr(module, attribute, value)
        if spec.stack is not None:
            every = getattr(policy, STACKS[spec.stack])
            by_update = every and policy.checkpoint_granularity in ("update", "nested")
            module.checkpoint_every = 0 if policy.checkpoint_granularity == "update" else every
            if by_update:
                for block in module.blocks:
                    handles += [checkpoint_module(m) for m in block.modules() if spec_of(m).chunkable]
    model.dap_sharding = runner.sharding if runner is not None else None
    if runner is not None:
        handles += shard_hooks(model, runner.sharding, gather_outputs)
    model._binding_handles = handles
    model.memory_policy = policy
    return model


__all__ = ["Mesh", "bind"]
