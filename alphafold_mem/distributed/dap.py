"""Dynamic axial parallelism (DAP), bound from outside the model together with the memory policy
(:func:`alphafold_mem.bind` with a mesh): a :class:`~alphafold_mem.distributed.runner.DapRunner`
(:func:`dap_runner`) on every module that declares splittable steps or the ``dropout`` seam
(``memory_spec``, :mod:`alphafold_mem.memory.axes`) and the root's hooks (:func:`shard_hooks`);
forwards keep taking data only, and a model bound without a mesh is the single-device model, bit
for bit.

What happens in one forward of ``AlphaFold`` under DAP (P devices, one protein):

* the embedders embed only this device's share, from features every device holds whole: the MSA
  representations their residue columns, the pair representation its rows (the "scatter after the
  embedders" costs no communication);
* every Evoformer, extra-MSA and template step runs on the shares (see
  :mod:`alphafold_mem.distributed.runner` for the all-to-alls and piecewise gathers; in inference
  the triangle multiplications compute their projections block by block,
  :mod:`alphafold_mem.distributed.product`);
* per-residue results (the single representation, IPA's update, the pTM frame scores) are gathered
  so every device holds them whole; the structure module and the heads read the pair
  representation by rows, so it is never gathered;
* representation-shaped outputs (``pair``, ``msa``, the distogram / PAE logits, ...: what the model
  declares in ``memory_spec.outputs``) stay distributed unless bound with ``gather_outputs=True`` (or
  :func:`gather_outputs` is called), and every device can compute the same loss from gathered
  outputs: the gradients of the shares then sum to P times the single-device gradient, so averaging
  parameter gradients over all processes (DDP) gives the single-device gradient.

Randomness: the dropout masks are drawn at the global shape with the torch generator and sliced;
each forward first gives every device of the group device rank 0's generator state.

Source: FastFold's DAP (Cheng et al. 2022) for the layouts (MSA by rows for row attention, by
columns otherwise; pair by rows, all-to-all to columns for the ending-node ops).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch.nn as nn
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh

from ..memory.axes import spec_of
from .comm import Group
from .mesh import dap_group
from .runner import DapRunner
from .shard import Sharding


def _residues(batch: dict[str, Tensor], recycle_dim: Optional[int]) -> int:
    shape = list(batch["aatype"].shape)
    if recycle_dim is not None:
        del shape[recycle_dim]
    return shape[-1]


class _Hooks:
    """The root model's forward hooks: residue count and generator sync before, gathering after."""

    def __init__(self, sharding: Sharding, outputs: dict[str, int], gather: bool):
        self.sharding, self.outputs, self.gather = sharding, outputs, gather

    def before(self, model: nn.Module, args: tuple, kwargs: dict) -> None:
        batch = args[0] if args else kwargs["batch"]
        recycle_dim = args[1] if len(args) > 1 else kwargs.get("recycle_dim")
        self.sharding.set_residues(_residues(batch, recycle_dim))
        self.sharding.sync_random_state()

    def after(self, model: nn.Module, args: tuple, kwargs: dict, out: Any) -> Any:
        if not self.gather:
            return out
        return {
            k: self.sharding.gather_representation(v, self.outputs[k]) if k in self.outputs else v
            for k, v in out.items()
        }


def dap_runner(mesh: Union[DeviceMesh, Group, None]) -> Optional[DapRunner]:
    """The runner that shards computation over the ``"dap"`` dim of ``mesh`` (a ``("dp", "dap")``
    :class:`DeviceMesh` or a :class:`~alphafold_mem.distributed.comm.Group`); ``None`` for no mesh or
    a group of one device."""
    group = dap_group(mesh) if isinstance(mesh, DeviceMesh) else mesh
    return None if group is None or group.size == 1 else DapRunner(Sharding(group))


def shard_hooks(model: nn.Module, sharding: Sharding, gather: bool) -> list[Any]:
    """Register the root model's forward hooks (residue count and generator sync before; with
    ``gather``, the declared representation outputs gathered after) and return their handles; none
    for a model that declares no representation outputs."""
    outputs = dict(spec_of(model).outputs)
    if not outputs:
        return []
    hooks = _Hooks(sharding, outputs, gather)
    return [
        model.register_forward_pre_hook(hooks.before, with_kwargs=True),
        model.register_forward_hook(hooks.after, with_kwargs=True),
    ]


def gather_outputs(model: nn.Module, out: dict[str, Tensor]) -> dict[str, Tensor]:
    """``out`` with every representation-shaped output ``model`` declares gathered whole (no-op
    without device sharding)."""
    sharding: Optional[Sharding] = getattr(model, "dap_sharding", None)
    if sharding is None:
        return out
    declared = spec_of(model).outputs
    return {k: sharding.gather_representation(v, declared[k]) if k in declared else v for k, v in out.items()}


__all__ = ["dap_runner", "gather_outputs", "shard_hooks"]
