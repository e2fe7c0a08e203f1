"""Dynamic axial parallelism (DAP): one protein's MSA and pair representations sharded across
devices, for inference and training, on torch.distributed (gloo on CPU, NCCL on GPU).

* :mod:`.mesh`: the ``("dp", "dap")`` device mesh (:func:`init_mesh`);
* :mod:`.comm`: the collectives as autograd functions whose backward is the adjoint, with timeouts
  and byte counts;
* :mod:`.shard` and :mod:`.runner`: layouts, and how a declared step runs on shards;
* :mod:`.dap`: the runner and hooks :func:`alphafold_mem.bind` binds with a mesh, and :func:`gather_outputs`;
* :mod:`.launch`: local multi-process runs (:func:`run_local`) and torchrun.
"""

from .comm import COUNTER, Group
from .dap import gather_outputs
from .launch import RankFailed, in_torchrun, init_from_env, run_local
from .mesh import dap_group, dp_coordinates, init_mesh, mesh_shape
from .shard import Sharding

__all__ = [
    "COUNTER",
    "Group",
    "RankFailed",
    "Sharding",
    "dap_group",
    "dp_coordinates",
    "gather_outputs",
    "in_torchrun",
    "init_from_env",
    "init_mesh",
    "mesh_shape",
    "run_local",
]
