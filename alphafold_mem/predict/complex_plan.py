"""The memory pre-flight of a complex (:func:`plan_complex`): before the forwards of one complex under
one model, its peak is predicted for the run's memory request and device
(:func:`~.preflight.check_complex`, the chooser ``alphafold-mem memory-plan --fasta`` uses) at the
sizes its batch will have (:func:`~.complex_features.complex_batch`): the merged MSA's rows split into
``min(rows, max_msa_clusters)`` cluster centres and at most ``max_extra_msa`` extra rows, and
``max_templates`` template slots (filled or padding) under a multimer config (one placeholder under monomer weights).

Lines logged: ``<id>: memory policy chosen: <policy>, <chunking>`` when the planner chose, then
``plan: <id>: <N> residues (<k> chains), N_seq <s>, N_extra <e>, N_templ <t>, predicted peak <GiB>
of <GiB> budget``; a complex that fits under no allowed policy gets no line here: the caller logs
:func:`does_not_fit` (one ``error:`` line naming the file, the complex, the need, the budget and what
to try), then :func:`advise_largest` one ``note:`` line with the largest complex like it that would fit
(every chain cropped to one fraction, or the first chains whole) and the flags that run it
(:func:`alphafold_mem.planner.largest.largest_complex`, what ``memory-plan --fasta`` prints).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from ..config import ModelConfig
from ..memory.policy import PolicyRequest, as_request
from ..planner import Chains
from ..planner.largest import largest_complex
from .complex_target import ComplexTarget
from .policy_names import chunking, policy_name
from .preflight import Preflight, check_complex, format_bytes

__all__ = ["ComplexPlan", "advise_largest", "complex_templates", "does_not_fit", "plan_complex"]


@dataclasses.dataclass(frozen=True)
class ComplexPlan:
    """The pre-flight of one complex under one model config: ``sizes`` = ``(N_res, N_seq, N_extra,
    N_templ)`` planned for, and the :class:`~.preflight.Preflight` (policy, need and budget in bytes)."""

    sizes: tuple[int, int, int, int]
    fit: Preflight


def complex_templates(config: ModelConfig) -> Optional[int]:
    """Template slots of a complex's batch under ``config``: ``max_templates`` for a multimer config
    with templates, 0 without templates, ``None`` (one placeholder) for monomer weights."""
    if not config.template.enabled:
        return 0
    return config.template.max_templates if config.multimer else None


def plan_complex(
    t: ComplexTarget,
    msa_rows: int,
    config: ModelConfig,
    request: PolicyRequest,
    device: torch.device,
    log: Callable[[str], None],
    model: Optional[str] = None,
    dap: int = 1,
) -> ComplexPlan:
    """Plan complex ``t`` (``msa_rows``: rows of its merged MSA) under ``config`` within the budget of
    ``request`` on ``device``, and log its lines (module docstring; ``model``: a name the plan line
    ends with, ``; model <name>``, for a run whose models differ in size; ``dap``: the peak per device
    of a DAP group of that size).

    Raises:
        ValueError, RuntimeError: the estimate itself failed (the caller fails this complex).
    """
    chains = Chains.of_complex(t.cx)
    sizes, fit = check_complex(config, chains, msa_rows, request, device, complex_templates(config), dap=dap)
    if fit.fits:
        if fit.policy != request:  # the planner chose (auto, or chunk_size="auto"): say what
            log(f"{t.name}: memory policy chosen: {policy_name(fit.policy)}, {chunking(fit.policy)}")
        n_res, n_seq, n_extra, n_templ = sizes
        log(
            f"plan: {t.name}: {n_res} residues ({len(t.cx.chains)} chains), N_seq {n_seq}, N_extra {n_extra}, "
            f"N_templ {n_templ}, predicted peak {format_bytes(fit.need)} of {format_bytes(fit.budget)} budget"
            f" ({fit.policy.precision})" + (f"; model {model}" if model else "")
        )
    return ComplexPlan(sizes, fit)


def does_not_fit(t: ComplexTarget, fit: Preflight) -> str:
    """The error line (without ``error:``) of complex ``t`` whose pre-flight ``fit`` does not fit."""
    return f"{t.source}: complex '{t.name}': does not fit: {fit.message}"


def advise_largest(
    t: ComplexTarget,
    plan: ComplexPlan,
    config: ModelConfig,
    request: PolicyRequest,
    device: torch.device,
    log: Callable[[str], None],
    dap: int = 1,
) -> None:
    """Log one ``note:`` line for complex ``t`` whose ``plan`` does not fit: the largest complex like it
    that fits the same usable budget with the same MSA sizes, in the request's precision, and the
    ``predict`` flags that run it (module docstring). An estimate that fails here logs nothing: the
    complex has failed already, this is advice."""
    request = as_request(request)
    try:
        found = largest_complex(
            config,
            Chains.of_complex(t.cx),
            plan.sizes[1:],
            plan.fit.budget,
            request.precision,
            device,
            dap=dap,
            max_chunk_size=request.max_chunk_size,
        )
    except (ValueError, RuntimeError):
        return
    log(f"note: {t.source}: complex '{t.name}': {found.describe([c.chain_id for c in t.cx.chains])}")
