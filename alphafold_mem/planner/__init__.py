"""The memory planner: predicts peaks by running the model under FakeTensorMode
(:mod:`.estimate`), chooses policies and chunk sizes with one chooser (:mod:`.chooser`: used by
``chunk_size="auto"``, ``memory-plan`` and predict's pre-flight), and binds a policy with
``chunk_size="auto"`` (:func:`apply_memory_policy`). It sits above :mod:`alphafold_mem.model` (it
builds models); nothing below imports it.
"""

from .bind import AutoChunk, apply_memory_policy
from .chooser import (
    Candidate,
    Choice,
    InsufficientMemoryWarning,
    Row,
    choose,
    chunk_candidates,
    max_length,
    policy_candidates,
    resolve_auto_chunk,
)
from .estimate import (
    PeakEstimate,
    available_memory,
    batch_sizes,
    estimate_breakdown,
    estimate_peak,
    feature_batch,
    parameter_bytes,
    proxy_loss,
)

__all__ = [
    "AutoChunk",
    "Candidate",
    "Choice",
    "InsufficientMemoryWarning",
    "PeakEstimate",
    "Row",
    "apply_memory_policy",
    "available_memory",
    "batch_sizes",
    "choose",
    "chunk_candidates",
    "estimate_breakdown",
    "estimate_peak",
    "feature_batch",
    "max_length",
    "parameter_bytes",
    "policy_candidates",
    "proxy_loss",
    "resolve_auto_chunk",
]
