"""The device mesh of a run: ``("dp", "dap")`` -- data-parallel replicas, each a group of devices
that share one protein by dynamic axial parallelism (DAP).

World size = dp x dap. Ranks are laid out dap-fastest: global rank = dp_rank * dap + dap_rank, so
the devices of one DAP group are neighbours (one node where possible).
"""

from __future__ import annotations

import datetime
import os
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .comm import Group

#: The mesh dims, outer to inner.
MESH_DIMS = ("dp", "dap")
#: Default timeout of every collective (seconds): ALPHAFOLD_MEM_DAP_TIMEOUT, else 300.
DEFAULT_TIMEOUT_S = 300.0


def default_timeout() -> datetime.timedelta:
    """The collective timeout: ``$ALPHAFOLD_MEM_DAP_TIMEOUT`` seconds, else 300 s."""
    return datetime.timedelta(seconds=float(os.environ.get("ALPHAFOLD_MEM_DAP_TIMEOUT", DEFAULT_TIMEOUT_S)))


def mesh_shape(world_size: int, dap: int) -> tuple[int, int]:
    """``(dp, dap)`` for ``world_size`` processes and DAP size ``dap``.

    Raises:
        ValueError: ``dap < 1`` or ``dap`` does not divide the world size (dp x dap must equal it).
    """
    if dap < 1:
        raise ValueError(f"--dap must be >= 1, got {dap}")
    if world_size % dap:
        raise ValueError(
            f"DAP size {dap} does not divide the {world_size} processes: dp x dap must equal the "
            f"world size (e.g. --devices {dap * max(1, world_size // dap)} for --dap {dap})"
        )
    return world_size // dap, dap


def init_mesh(dap: int, device_type: Optional[str] = None) -> DeviceMesh:
    """The ``("dp", "dap")`` :class:`~torch.distributed.device_mesh.DeviceMesh` of the initialised
    default process group (``device_type``: ``"cuda"`` when CUDA is available, else ``"cpu"``).

    Raises:
        RuntimeError: torch.distributed is not initialised.
        ValueError: see :func:`mesh_shape`.
    """
    if not dist.is_initialized():
        raise RuntimeError(
            "init_mesh: torch.distributed is not initialised (launch with alphafold-mem ... --dap P or torchrun)"
        )
    shape = mesh_shape(dist.get_world_size(), dap)
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    return init_device_mesh(device_type, shape, mesh_dim_names=MESH_DIMS)


def dap_group(mesh: DeviceMesh, timeout: Optional[datetime.timedelta] = None) -> Group:
    """The DAP group of this process in ``mesh`` (its ``"dap"`` dim), with the collective timeout."""
    pg = mesh.get_group("dap")
    return Group(
        pg=pg,
        rank=mesh.get_local_rank("dap"),
        size=mesh.size(MESH_DIMS.index("dap")),
        global_ranks=tuple(dist.get_process_group_ranks(pg)),
        timeout=timeout or default_timeout(),
    )


def dp_coordinates(mesh: Optional[DeviceMesh]) -> tuple[int, int]:
    """``(dp rank, dp size)``: which data-parallel replica this process belongs to (``(0, 1)`` without
    a mesh). Training samples are drawn by dp rank, so the devices of one DAP group see one crop."""
    if mesh is None:
        return 0, 1
    return mesh.get_local_rank("dp"), mesh.size(MESH_DIMS.index("dp"))


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MESH_DIMS",
    "dap_group",
    "default_timeout",
    "dp_coordinates",
    "init_mesh",
    "mesh_shape",
]
