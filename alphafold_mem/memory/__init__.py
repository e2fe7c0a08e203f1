"""Memory policy, chunking, checkpointing, measurement and prediction.

* :class:`MemoryPolicy` / :func:`apply_memory_policy` (:mod:`.policy`): the one runtime object that
  selects every memory technique, bound to a model from outside.
* :func:`chunked` / :func:`low_memory_attention` (:mod:`.chunking`): the one chunking helper and
  low-memory attention (Rabe & Staats 2021).
* :func:`checkpoint_blocks` (:mod:`.checkpoint`): per-block activation checkpointing from outside.
* :func:`track_peak` (:mod:`.tracking`): measured peak (CUDA allocator stats, or CPU storage counting).
* :func:`estimate_peak` (:mod:`.estimate`): predicted peak under FakeTensorMode, no allocation.
"""

from .checkpoint import checkpoint_blocks
from .chunking import chunked, low_memory_attention
from .estimate import estimate_breakdown, estimate_peak, resolve_auto_chunk
from .policy import MemoryPolicy, apply_memory_policy, preset
from .tracking import PeakMemory, track_peak

__all__ = ["MemoryPolicy", "PeakMemory", "apply_memory_policy", "checkpoint_blocks", "chunked", "estimate_breakdown",
           "estimate_peak", "low_memory_attention", "preset", "resolve_auto_chunk", "track_peak"]
