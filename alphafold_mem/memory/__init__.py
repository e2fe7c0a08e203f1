"""Memory primitives the model uses; nothing here imports the model (the planner, which builds
models to predict their peak, sits above in :mod:`alphafold_mem.planner`).

* :mod:`.axes`: each module's declaration -- splittable axes, whole operands, policy seams -- and
  :func:`run_split`, how a module runs a declared step;
* :class:`MemoryPolicy` (:mod:`.policy`) and :func:`bind_memory_policy` (:mod:`.bind`): the one
  runtime object that selects every memory technique, bound from outside by reading declarations;
* :func:`chunked` (:mod:`.chunking`) and :func:`low_memory_attention` (:mod:`.attention`);
* :func:`run_blocks` / :func:`checkpoint_module` (:mod:`.checkpoint`): activation checkpointing;
* :func:`track_peak` (:mod:`.tracking`): measured peak (CUDA allocator, or CPU storage counting).
"""

from .attention import low_memory_attention
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
from .bind import bind_memory_policy, set_chunk_size
from .checkpoint import checkpoint_module, run_blocks
from .chunking import chunked
from .policy import MemoryPolicy, preset
from .tracking import PeakMemory, track_peak

__all__ = [
    "MemoryPolicy",
    "MemorySpec",
    "PeakMemory",
    "Replicate",
    "Shard",
    "Slice",
    "Split",
    "UndeclaredModuleError",
    "WHOLE",
    "bind_memory_policy",
    "checkpoint_module",
    "chunked",
    "declare",
    "declared_splits",
    "exempt",
    "low_memory_attention",
    "preset",
    "run_blocks",
    "run_split",
    "set_chunk_size",
    "spec_of",
    "track_peak",
    "undeclared_modules",
]
