"""Pre-flight memory check of a prediction: before any model work on a target, its peak is predicted
(:mod:`alphafold_mem.planner`, nothing allocated) for the memory the device has, and a policy that
fits is chosen, or the target fails at once with one line naming its length, the predicted need and
the budget.

Budget: the request's ``max_memory`` bytes if given; otherwise the device's free memory (CUDA:
``torch.cuda.mem_get_info``; CPU: MemAvailable of the host) plus the bytes of the parameters, which
are already resident when the check runs. The sizes are those the feature pipeline will produce:
N_seq = min(MSA depth, max clusters), N_extra = min(the rest, max extra sequences), one placeholder
template when the model uses templates and none are given.

The policy request is ``"auto"`` or an :class:`~alphafold_mem.AutoPolicy` (the fastest policy of
:func:`alphafold_mem.planner.policy_candidates` that fits, in the requested precision) or a
:class:`~alphafold_mem.MemoryPolicy` (checked as given; ``chunk_size="auto"`` takes the largest chunk
that fits): :func:`alphafold_mem.planner.plan`, the one chooser.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ..config import ModelConfig
from ..memory.policy import MemoryPolicy, PolicyRequest, as_request
from ..planner import Chains, plan
from ..planner import budget_of as planner_budget
from ..units import format_gib

#: What a target that does not fit may try (the message's last clause).
ADVICE = (
    "try --low-memory, --precision bf16-full, a shallower MSA, --dap P or a larger --max-memory "
    "(docs/troubleshooting.md, 'Out of memory')"
)
#: What a complex that does not fit may try (complexes run without --dap).
COMPLEX_ADVICE = (
    "try --low-memory, --precision bf16-full, fewer alignment rows in --msa-dir or a larger --max-memory "
    "(docs/troubleshooting.md, 'Out of memory')"
)


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


def budget_of(request: PolicyRequest, config: ModelConfig, device: torch.device) -> int:
    """Bytes a forward may use on ``device`` (see the module docstring)."""
    return planner_budget(request, config, device)


def check(
    config: ModelConfig,
    sizes: tuple[int, int, int, int],
    request: PolicyRequest,
    device: torch.device,
    dap: int = 1,
    chains: Optional[Chains] = None,
    advice: str = ADVICE,
) -> Preflight:
    """Choose (``"auto"`` / :class:`~alphafold_mem.memory.policy.AutoPolicy`, or ``chunk_size="auto"``)
    or check (a concrete policy) the memory policy of one target with the planner's chooser
    (:func:`alphafold_mem.planner.plan`; ``dap``: the peak of each of that many devices sharing it;
    ``chains``: the complex a multimer config runs on, ``sizes[0]`` its residues; ``advice``: the last
    clause of the message of a target that does not fit).

    Raises:
        ValueError: ``request`` is not a policy request; ``chains`` whose residues are not ``sizes[0]``.
    """
    request = as_request(request)
    n_res, n_seq, n_extra, _ = sizes
    if chains is not None and chains.n_res != n_res:
        raise ValueError(f"the chains hold {chains.n_res} residues, the sizes {n_res}")
    choice = plan(request, config, sizes, device, dap=dap, chains=chains if config.multimer else None)
    if choice.chosen is not None:
        return Preflight(choice.policy, int(choice.chosen.estimate.total), choice.budget)
    best = choice.smallest
    return Preflight(
        None,
        int(best.estimate.total),
        choice.budget,
        f"{n_res} residues need {format_bytes(best.estimate.total)} (predicted, "
        f"{best.candidate.label}, {request.precision}; N_seq {n_seq}, N_extra {n_extra}) but the budget is "
        f"{format_bytes(budget_of(request, config, device))}"
        + (f" less a {format_bytes(choice.margin)} device margin (docs/memory-budget.md)" if choice.margin else "")
        + f"; {advice}",
    )


def check_complex(
    config: ModelConfig,
    chains: Chains,
    msa_depth: int,
    request: PolicyRequest,
    device: torch.device,
    n_templ: Optional[int] = None,
    dap: int = 1,
) -> tuple[tuple[int, int, int, int], Preflight]:
    """The pre-flight of a complex: ``(sizes, outcome)`` with the sizes predict builds for it
    (:func:`feature_sizes` of its residues, ``msa_depth`` rows of the merged MSA, ``n_templ``
    templates) and :func:`check` on its chains. With a multimer ``config`` the trace runs the
    AF2-Multimer model on the complex's chain features (``alphafold-mem memory-plan --chains`` plans
    the same); a monomer config plans the chains as one chain of their residues. The message of a
    complex that does not fit ends with :data:`COMPLEX_ADVICE`."""
    sizes = feature_sizes(config, chains.n_res, msa_depth, n_templ)
    return sizes, check(config, sizes, request, device, dap, chains=chains, advice=COMPLEX_ADVICE)


def format_bytes(n: float) -> str:
    """``n`` bytes for people, in GiB, the one unit every command prints (:func:`alphafold_mem.units.format_gib`:
    ``"80.00 GiB"``, ``"0.0233 GiB"``)."""
    return format_gib(n)


__all__ = [
    "ADVICE",
    "COMPLEX_ADVICE",
    "DoesNotFit",
    "Preflight",
    "budget_of",
    "check",
    "check_complex",
    "feature_sizes",
    "format_bytes",
]
