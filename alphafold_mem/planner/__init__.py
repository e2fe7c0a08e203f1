"""The memory planner: predicts peaks by running the model under FakeTensorMode (:mod:`.estimate`;
estimates kept in this process and on disk, :mod:`.cache`) and chooses policies and chunk sizes among
the candidates of :mod:`.ladder` with one chooser (:mod:`.chooser`: used by ``memory-plan``, predict's
pre-flight and training's set-up). A request for the planner's choice (``"auto"``,
:class:`~alphafold_mem.memory.policy.AutoPolicy`, ``chunk_size="auto"``) is resolved for the input
sizes by :func:`resolve_policy` before binding (:func:`alphafold_mem.bind`). It sits above
:mod:`alphafold_mem.model` (it builds models); nothing below imports it.
"""

from .chains import Chains, multimer_sizes
from .chooser import (
    Choice,
    InsufficientMemoryWarning,
    Row,
    budget_of,
    choose,
    max_length,
    plan,
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
from .ladder import Candidate, chunk_candidates, policy_candidates

__all__ = [
    "Candidate",
    "Chains",
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
    "multimer_sizes",
    "parameter_bytes",
    "plan",
    "policy_candidates",
    "proxy_loss",
    "resolve_policy",
    "training_sizes",
]
