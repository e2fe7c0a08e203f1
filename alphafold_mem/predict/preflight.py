"""Pre-flight memory check of a prediction: before any model work on a target, its peak is predicted
(:mod:`alphafold_mem.planner`, nothing allocated) for the memory the device has, and a policy that
fits is chosen, or the target fails at once with one line naming its length, the predicted need and
the budget.

Budget: ``max_memory`` bytes if given; otherwise the device's free memory (CUDA:
``torch.cuda.mem_get_info``; CPU: MemAvailable of the host) plus the bytes of the parameters, which
are already resident when the check runs. The sizes are those the feature pipeline will produce:
N_seq = min(MSA depth, max clusters), N_extra = min(the rest, max extra sequences), one placeholder
template when the model uses templates and none are given.

The policy request is ``"auto"`` (the fastest policy of :func:`alphafold_mem.planner.policy_candidates`
that fits, in the requested precision) or a :class:`~alphafold_mem.MemoryPolicy` (checked as given;
``chunk_size="auto"`` takes the largest chunk that fits).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import torch

from ..config import ModelConfig
from ..memory.policy import MemoryPolicy

PolicyRequest = Union[str, MemoryPolicy]


class DoesNotFit(Exception):
    """A target's predicted peak exceeds the budget under every allowed policy (the message says
    its length, the need and the budget)."""


@dataclasses.dataclass(frozen=True)
class Preflight:
    """The outcome for one target: ``policy`` to run (``None``: it does not fit; ``message`` says
    why), the predicted peak ``need`` and the ``budget`` (bytes)."""

    policy: Optional[MemoryPolicy]
    need: int
    budget: int
    message: str = ""

    @property
    def fits(self) -> bool:
        return self.policy is not None


def policy_request(memory_policy, precision: str, chunk_size, low_memory: bool) -> PolicyRequest:
    """The policy request of :func:`alphafold_mem.predict` from its options: ``"auto"`` (the
    pre-flight chooses) or a MemoryPolicy.

    Raises:
        PredictError: contradictory or invalid options.
    """
    from ..memory import preset
    from .targets import PredictError

    explicit = chunk_size is not None or low_memory
    if memory_policy is not None and memory_policy != "auto":
        if explicit:
            raise PredictError("give either memory_policy or chunk_size/low_memory, not both")
        if isinstance(memory_policy, str):
            try:
                return preset(memory_policy, precision=precision)
            except ValueError as exc:
                raise PredictError(f"--memory-policy: {exc}") from None
        if not isinstance(memory_policy, MemoryPolicy):
            raise PredictError(
                f"memory_policy must be 'auto', a preset name or a MemoryPolicy, got {type(memory_policy).__name__}"
            )
        if precision != "fp32" and memory_policy.precision != precision:
            raise PredictError("give the precision either in memory_policy or as precision, not both")
        return memory_policy
    if not explicit:
        return "auto"
    if isinstance(chunk_size, str) and chunk_size != "auto":
        try:
            chunk_size = int(chunk_size)
        except ValueError:
            raise PredictError(f"--chunk-size {chunk_size!r}: expected a positive integer or 'auto'") from None
    try:
        if low_memory:
            extra = {} if chunk_size is None else {"chunk_size": chunk_size}
            return MemoryPolicy.low_memory_inference(precision=precision, **extra)
        return MemoryPolicy.reference(precision=precision, chunk_size=chunk_size)
    except ValueError as exc:
        raise PredictError(f"memory options: {exc}") from None


def feature_sizes(
    config: ModelConfig, length: int, msa_depth: int, n_templ: Optional[int] = None
) -> tuple[int, int, int, int]:
    """``(N_res, N_seq, N_extra, N_templ)`` of the features predict builds for a target (see the
    module docstring)."""
    d = config.data
    max_clusters = d.max_msa_clusters
    if config.template.enabled and d.reduce_msa_clusters_by_max_templates:
        max_clusters = max(1, max_clusters - config.template.max_templates)
    n_seq = max(1, min(max_clusters, msa_depth))
    n_extra = min(max(msa_depth - n_seq, 0), d.max_extra_msa)
    if n_templ is None:
        n_templ = 1 if config.template.enabled else 0
    return length, n_seq, n_extra, n_templ


def device_budget(device: torch.device, config: ModelConfig, max_memory: Optional[int] = None) -> int:
    """Bytes a forward may use on ``device`` (see the module docstring)."""
    from ..planner import available_memory, parameter_bytes

    if max_memory is not None:
        return int(max_memory)
    return available_memory(device) + parameter_bytes(config)


def check(
    config: ModelConfig,
    sizes: tuple[int, int, int, int],
    request: PolicyRequest,
    precision: str,
    device: torch.device,
    budget: int,
    dap: int = 1,
) -> Preflight:
    """Choose (``"auto"``) or check (a policy) the memory policy of one target (``dap``: the peak of
    each of that many devices sharing it).

    Raises:
        ValueError: an unknown request string.
    """
    from ..planner import Candidate, choose, policy_candidates, resolve_auto_chunk

    n_res, n_seq, n_extra, n_templ = sizes
    if isinstance(request, str):
        if request != "auto":
            raise ValueError(f"memory policy request must be 'auto' or a MemoryPolicy, got {request!r}")
        candidates = policy_candidates(False, precision, max(sizes[:3]), device=device)
    else:
        if request.chunk_size == "auto":
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a shortfall is reported below, as for any policy
                chunk = resolve_auto_chunk(
                    config, request, n_res, n_seq, n_extra, n_templ, device=device, budget=budget
                )
            request = request.replace(chunk_size=chunk)
        candidates = [Candidate(request.name, request)]
    choice = choose(
        config,
        n_res,
        n_seq,
        n_extra,
        n_templ,
        budget,
        candidates,
        device=device,
        frugal_last=isinstance(request, str),
        dap=dap,
    )
    if choice.chosen is not None:
        return Preflight(choice.policy, int(choice.chosen.estimate.total), budget)
    best = choice.smallest
    return Preflight(
        None,
        int(best.estimate.total),
        budget,
        f"{n_res} residues need {best.estimate.total / 1e9:.2f} GB (predicted, "
        f"{best.candidate.label}, {precision}; N_seq {n_seq}, N_extra {n_extra}) but the budget is "
        f"{budget / 1e9:.2f} GB",
    )


__all__ = ["DoesNotFit", "Preflight", "PolicyRequest", "check", "device_budget", "feature_sizes", "policy_request"]
