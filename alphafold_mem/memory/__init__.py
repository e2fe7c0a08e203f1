"""Memory primitives the model uses; nothing here imports the model (the planner, which builds
models to predict their peak, sits above in :mod:`alphafold_mem.planner`).

* :mod:`.axes`: each module's declaration -- splittable axes, whole operands, policy seams -- and
  :func:`run_split`, how a module runs a declared step;
* :class:`MemoryPolicy` (:mod:`.policy`): the one runtime object that selects every memory
  technique, bound from outside by reading declarations (:func:`alphafold_mem.bind`);
* :func:`chunked` (:mod:`.chunking`);
* :func:`run_blocks` / :func:`checkpoint_module` (:mod:`.checkpoint`): activation checkpointing;
* :func:`track_peak` (:mod:`.tracking`): measured peak (CUDA allocator, or CPU storage counting).
"""

from .axes import (
    WHOLE,
    MemorySpec,
    Replicate,
    Shard,
    Slice,
    Split,
    UndeclaredModuleError,
    declare,
    declared_splits,
    exempt,
    run_split,
    spec_of,
    undeclared_modules,
)
from .checkpoint import checkpoint_module, run_blocks
from .chunking import chunked
from .policy import AutoPolicy, MemoryPolicy, PolicyRequest, preset
from .tracking import PeakMemory, track_peak

__all__ = [
    "AutoPolicy",
    "MemoryPolicy",
    "MemorySpec",
    "PeakMemory",
    "PolicyRequest",
    "Replicate",
    "Shard",
    "Slice",
    "Split",
    "UndeclaredModuleError",
    "WHOLE",
    "checkpoint_module",
    "chunked",
    "declare",
    "declared_splits",
    "exempt",
    "preset",
    "run_blocks",
    "run_split",
    "spec_of",
    "track_peak",
    "undeclared_modules",
]
