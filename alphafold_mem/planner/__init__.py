"""The memory planner: predicts peaks by running the model under FakeTensorMode
(:mod:`.estimate`), chooses chunk sizes, and binds a policy with ``chunk_size="auto"``
(:func:`apply_memory_policy`). It sits above :mod:`alphafold_mem.model` (it builds models);
nothing below imports it.
"""

from .bind import apply_memory_policy
from .estimate import (PeakEstimate, available_memory, batch_sizes, chunk_candidates, estimate_breakdown,
                       estimate_peak, feature_batch, parameter_bytes, proxy_loss, resolve_auto_chunk)

__all__ = ["PeakEstimate", "apply_memory_policy", "available_memory", "batch_sizes", "chunk_candidates",
           "estimate_breakdown", "estimate_peak", "feature_batch", "parameter_bytes", "proxy_loss",
           "resolve_auto_chunk"]
