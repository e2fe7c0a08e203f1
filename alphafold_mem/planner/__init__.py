"""The memory planner: predicts peaks by running the model under FakeTensorMode
(:mod:`.estimate`) and chooses policies and chunk sizes with one chooser (:mod:`.chooser`: used by
``memory-plan``, predict's pre-flight and training's set-up). A request for the planner's choice
(``"auto"``, :class:`~alphafold_mem.memory.policy.AutoPolicy`, ``chunk_size="auto"``) is resolved
for the input sizes by :func:`resolve_policy` before binding (:func:`alphafold_mem.bind`). It sits
above :mod:`alphafold_mem.model` (it builds models); nothing below imports it.
"""

from .chooser import (
    Candidate,
    Choice,
    InsufficientMemoryWarning,
    Row,
    budget_of,
    choose,
    chunk_candidates,
    max_length,
    plan,
    policy_candidates,
    resolve_policy,
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
    training_sizes,
)

__all__ = [
    "Candidate",
    "Choice",
    "InsufficientMemoryWarning",
    "PeakEstimate",
    "Row",
    "available_memory",
    "batch_sizes",
    "budget_of",
    "choose",
    "chunk_candidates",
    "estimate_breakdown",
    "estimate_peak",
    "feature_batch",
    "max_length",
    "parameter_bytes",
    "plan",
    "policy_candidates",
    "proxy_loss",
    "resolve_policy",
    "training_sizes",
]
