"""The one chooser: which memory policy (and chunk size) to run, given sizes and a memory budget.

A request (``"auto"``, an :class:`~alphafold_mem.memory.policy.AutoPolicy`, or a policy with
``chunk_size="auto"``) is resolved here, before binding, where the input sizes are known
(:func:`resolve_policy`: predict's pre-flight per target, training at set-up from its crop sizes).
:func:`plan`, ``alphafold-mem memory-plan`` and :func:`resolve_policy` all call :func:`choose` on
candidate lists built in :mod:`.ladder`: the same chunk sizes (:func:`~.ladder.chunk_candidates`),
the same policy ladder (:func:`~.ladder.policy_candidates`), the same estimates
(:func:`~alphafold_mem.planner.estimate.estimate_breakdown`, cached per config, policy, sizes,
training or inference, precision and device, in this process and on disk: :mod:`.cache`).

Candidates are ordered from the fastest to the slowest (:mod:`.ladder`). :func:`choose` returns the
first that fits. Within a run of candidates that differ only in chunk size it bisects (the peak
falls with the chunk size), so a choice costs a handful of estimates, not one per candidate. When
nothing fits it says so: the :class:`Choice` carries the smallest predicted need and the budget,
and :func:`resolve_policy` warns and takes the smallest-peak candidate instead of silently using chunk 1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Callable, NamedTuple, Optional, Sequence

import torch

from ..config import ModelConfig
from ..memory.policy import AutoPolicy, MemoryPolicy, PolicyRequest, as_request
from ..units import format_gib
from .chains import Chains
from .estimate import PeakEstimate, available_memory, estimate_breakdown, parameter_bytes
from .ladder import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, Candidate, chunk_candidates, policy_candidates
from .margins import device_margin


class InsufficientMemoryWarning(UserWarning):
    """``chunk_size="auto"`` found no chunk size whose predicted peak fits the budget."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One evaluated candidate."""

    candidate: Candidate
    estimate: PeakEstimate
    fits: bool

    def as_dict(self, dap: int = 1) -> dict:
        """The ``memory-plan --json`` row: ``setting`` (the table's label), ``policy`` (every field of the
        :class:`MemoryPolicy`), ``precision``, ``chunk_size``, ``dap`` (devices sharing the protein),
        ``peak_bytes`` (per device), ``peak_lower_bound`` (``peak_bytes`` is a lower bound: the estimate
        stopped once it passed the budget, see :func:`choose`), ``host_bytes`` (the most parked in host
        memory at once by offload) and ``fits``."""
        p = self.candidate.policy
        return {
            "setting": self.candidate.label,
            "policy": dataclasses.asdict(p),
            "precision": p.precision,
            "chunk_size": p.chunk_size,
            "dap": int(dap),
            "peak_bytes": int(self.estimate.total),
            "peak_lower_bound": bool(self.estimate.lower_bound),
            "host_bytes": int(self.estimate.host),
            "fits": bool(self.fits),
        }


@dataclasses.dataclass(frozen=True)
class Choice:
    """What :func:`choose` found: every evaluated row (in ladder order), the budget (bytes) and the
    chosen row (``None``: nothing fits)."""

    rows: tuple[Row, ...]
    budget: int
    chosen: Optional[Row]
    #: bytes of the device margin taken off the given budget before ``budget`` (:func:`plan`)
    margin: int = 0

    @property
    def policy(self) -> Optional[MemoryPolicy]:
        return None if self.chosen is None else self.chosen.candidate.policy

    @property
    def smallest(self) -> Row:
        """The evaluated row with the smallest predicted peak (a peak known exactly before a lower
        bound)."""
        return min(self.rows, key=lambda r: (r.estimate.lower_bound, r.estimate.total))

    def shortfall(self) -> str:
        """One sentence for when nothing fits: the smallest predicted need and the budget."""
        best = self.smallest
        need = ("at least " if best.estimate.lower_bound else "") + format_gib(best.estimate.total)
        return f"predicted need {need} at best ({best.candidate.label}), budget {format_gib(self.budget)}"


def choose(
    config: ModelConfig,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int,
    budget: int,
    candidates: Sequence[Candidate],
    *,
    training: bool = False,
    device: torch.device | str = "cuda",
    evaluate_all: bool = False,
    frugal_last: bool = False,
    first_fit: bool = False,
    dap: int = 1,
    progress: Optional[Callable[[Candidate, Optional[Row]], None]] = None,
    chains: Optional[Chains] = None,
) -> Choice:
    """The first candidate (in the given, fastest-first order) whose predicted total peak
    (parameters + inputs + activations, on ``device``) is at most ``budget`` bytes.

    Consecutive candidates with the same non-empty ``group`` differ only in chunk size (largest
    first): they are bisected on the assumption that the peak falls with the chunk size.
    ``frugal_last``: the last candidate has the smallest peak, so it is estimated first and, if it
    does not fit, nothing else is (it is estimated exactly, for the shortfall). Other estimates stop
    as soon as their running total passes :func:`stop_at` ``(budget)``: a row that does not fit may
    carry a lower bound of its peak above ``budget`` (``PeakEstimate.lower_bound``). ``evaluate_all``
    estimates every candidate exactly (tables). ``first_fit`` (with ``frugal_last``): the first
    candidate, when it is in no group, is estimated before the last and, if it fits, is the choice
    with no other row estimated (the same choice from one estimate; for callers that use the choice
    only, as the pre-flight). ``dap``: the peak of each of that many devices sharing the protein
    (:mod:`alphafold_mem.planner.dap`). ``progress``: called as
    ``progress(candidate, None)`` before each estimate and ``progress(candidate, row)`` after it (a
    command line shows what it is doing); with it, the search is not served from the in-process
    cache of earlier identical searches (the estimates still are, :mod:`.cache`). ``chains``: the
    complex a multimer config runs on (:class:`~.chains.Chains`; ``n_res`` is its residue count).
    """
    dev = "cpu" if torch.device(device).type == "cpu" else "cuda"
    search = _Search(
        config,
        n_res,
        n_seq,
        n_extra_seq,
        n_templ,
        int(budget),
        tuple(candidates),
        training,
        dev,
        evaluate_all,
        frugal_last,
        first_fit,
        dap,
        chains,
    )
    return _choose(search) if progress is None else _run(search, progress)


class _Search(NamedTuple):
    """:func:`choose`'s arguments but ``progress``, as one (hashable) key of :func:`_choose`'s cache;
    ``device``: ``"cpu"`` or ``"cuda"``."""

    config: ModelConfig
    n_res: int
    n_seq: int
    n_extra_seq: int
    n_templ: int
    budget: int
    candidates: tuple[Candidate, ...]
    training: bool
    device: str
    evaluate_all: bool
    frugal_last: bool
    first_fit: bool
    dap: int
    chains: Optional[Chains]


@functools.lru_cache(maxsize=1024)
def _choose(search: _Search) -> Choice:
    return _run(search)


def stop_at(budget: int) -> int:
    """Where a trace for a fits / does-not-fit decision at ``budget`` bytes stops: the first point at
    or above it of a geometric grid, eight points a doubling (at most 9 % and a byte above
    ``budget``). A lower bound kept from it (:mod:`.cache`) then also decides the nearby budgets, as
    free memory, and with it the pre-flight's budget, varies a little from run to run."""
    if budget <= 0:
        return budget
    return max(budget, math.ceil(2 ** (math.ceil(8 * math.log2(budget)) / 8)))


def _run(search: _Search, progress=None) -> Choice:
    """:func:`choose`'s search (``progress``: as there)."""
    candidates, budget = search.candidates, search.budget
    evaluate_all, frugal_last = search.evaluate_all, search.frugal_last
    rows: dict[int, Row] = {}

    def row(i: int) -> Row:
        if i not in rows:
            if progress is not None:
                progress(candidates[i], None)
            exact = evaluate_all or (frugal_last and i == len(candidates) - 1)
            est = estimate_breakdown(
                search.config,
                candidates[i].policy,
                search.n_res,
                search.n_seq,
                search.n_extra_seq,
                search.n_templ,
                search.training,
                device=search.device,
                dap=search.dap,
                limit=None if exact else stop_at(budget),
                chains=search.chains,
            )
            rows[i] = Row(candidates[i], est, est.total <= budget)
            if progress is not None:
                progress(candidates[i], rows[i])
        return rows[i]

    chosen = None
    i = 0
    if search.first_fit and frugal_last and not evaluate_all and not candidates[0].group and row(0).fits:
        return Choice((rows[0],), budget, rows[0])  # what the loop below would choose, with one estimate
    if frugal_last and not evaluate_all and not row(len(candidates) - 1).fits:
        i = len(candidates)  # not even the most frugal fits
    while i < len(candidates):
        group = candidates[i].group
        j = i + 1
        while group and j < len(candidates) and candidates[j].group == group:
            j += 1
        if evaluate_all:
            for k in range(i, j):
                row(k)
            fitting = [k for k in range(i, j) if rows[k].fits]
            if chosen is None and fitting:
                chosen = rows[fitting[0]]
        elif row(j - 1).fits:  # the smallest chunk of the run fits: bisect for the largest that does
            lo, hi = i, j - 1  # invariant: hi fits; everything before lo does not
            while lo < hi:
                mid = (lo + hi) // 2
                if row(mid).fits:
                    hi = mid
                else:
                    lo = mid + 1
            chosen = rows[hi]
            break
        i = j
    ordered = tuple(rows[k] for k in sorted(rows))
    return Choice(ordered, budget, chosen)


Sizes = tuple[int, int, int, int]


def cuda_capability(device: torch.device | str | None = None) -> Optional[int]:
    """Compute capability of a CUDA device as ``10 * major + minor`` (``None`` without CUDA)."""
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def budget_of(request: PolicyRequest, config: ModelConfig, device: torch.device | str | None = None) -> int:
    """The memory budget of ``request`` in bytes: its ``max_memory``, else the free memory of
    ``device`` (default CPU) plus the parameters of ``config`` (already resident when it is used)."""
    request = as_request(request)
    if request.max_memory is not None:
        return int(request.max_memory)
    return available_memory(torch.device(device) if device is not None else "cpu") + parameter_bytes(config)


def plan(
    request: PolicyRequest,
    config: ModelConfig,
    sizes: Sizes,
    device: torch.device | str | None = None,
    *,
    training: bool = False,
    dap: int = 1,
    evaluate_all: bool = False,
    chains: Optional[Chains] = None,
) -> Choice:
    """The chooser's answer to ``request`` for inputs of ``sizes`` = ``(N_res, N_seq, N_extra, N_templ)``
    within :func:`budget_of` ``(request)``:

    * ``"auto"`` / :class:`~alphafold_mem.memory.policy.AutoPolicy`: the ladder of
      :func:`policy_candidates` in the request's precision (the fastest estimated first: when it
      fits, it is the choice and the only row; else the most frugal: when it does not fit, nothing
      else is estimated);
    * a :class:`MemoryPolicy` with ``chunk_size="auto"``: that policy unchunked, then at every chunk
      of :func:`chunk_candidates` (at most its ``max_chunk_size``), bisected;
    * a concrete :class:`MemoryPolicy`: that policy, checked.

    ``dap``: the peak of each of that many devices sharing the protein; ``evaluate_all``: estimate
    every candidate (tables); ``chains``: the complex of a multimer config (:class:`~.chains.Chains`,
    ``sizes[0]`` its residues). The budget is what remains after
    :func:`~alphafold_mem.planner.margins.device_margin` (CUDA: context, library workspaces, NCCL
    buffers under DAP, the caching allocator's share; CPU: the host library caches): "fits" means
    fits after them.
    """
    request = as_request(request)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    budget = budget_of(request, config, dev)
    cuda = dev.type == "cuda"
    margin = device_margin(
        dev.type, budget, dap, cuda_capability(dev) if cuda else None, context_included=request.max_memory is None
    )
    budget = max(0, budget - margin.total)
    n_max = max(*sizes[:3], 1)
    if isinstance(request, AutoPolicy):
        candidates = policy_candidates(training, request.precision, n_max, request.max_chunk_size, device=dev)
    elif request.chunk_size == "auto":
        candidates = [
            Candidate(f"chunk {c}", request.replace(chunk_size=c), "chunks" if c else "")
            for c in chunk_candidates(n_max, request.max_chunk_size)
        ]
    else:
        candidates = [Candidate(request.name, request)]
    frugal = isinstance(request, AutoPolicy)
    choice = choose(
        config,
        *sizes,
        budget,
        candidates,
        training=training,
        device=dev,
        evaluate_all=evaluate_all,
        frugal_last=frugal,
        first_fit=frugal,
        dap=dap,
        chains=chains,
    )
    return dataclasses.replace(choice, margin=margin.total)


def resolve_policy(
    request: PolicyRequest,
    config: ModelConfig,
    sizes: Sizes,
    device: torch.device | str | None = None,
    *,
    training: bool = False,
    dap: int = 1,
) -> MemoryPolicy:
    """The concrete policy (a concrete chunk size) to bind for inputs of ``sizes`` = ``(N_res, N_seq,
    N_extra, N_templ)`` on ``device``: the one resolver of ``"auto"`` (a concrete policy is returned as
    it is, not estimated). What fits is :func:`plan`'s choice; when nothing fits, an
    :class:`InsufficientMemoryWarning` names the need and the budget, and the evaluated candidate with
    the smallest predicted peak is returned (not blindly the smallest chunk).
    """
    request = as_request(request)
    if isinstance(request, MemoryPolicy) and request.chunk_size != "auto":
        return request
    choice = plan(request, config, sizes, device, training=training, dap=dap)
    if choice.chosen is not None:
        return choice.policy
    if isinstance(request, MemoryPolicy):  # every chunk size, for the smallest peak among them
        choice = plan(request, config, sizes, device, training=training, dap=dap, evaluate_all=True)
    n_res, n_seq, n_extra, _ = sizes
    warnings.warn(
        f"{request.name} policy: nothing fits N_res {n_res}, N_seq {n_seq}, N_extra {n_extra} "
        f"({'training' if training else 'inference'}, {request.precision}): {choice.shortfall()}; "
        f"using the smallest-peak one ({choice.smallest.candidate.label})",
        InsufficientMemoryWarning,
        stacklevel=2,
    )
    return choice.smallest.candidate.policy


def max_length(
    config: ModelConfig,
    budget: int,
    precision: str,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int,
    device: torch.device | str = "cuda",
    policy: Optional[MemoryPolicy] = None,
    upper: int = 100_000,
) -> tuple[int, Optional[Row]]:
    """The largest N_res whose inference fits ``budget`` bytes under ``policy`` (default: the most
    frugal candidate of :func:`policy_candidates` on ``device``, the last, under the ladder's label),
    by bisection on N_res in [16, ``upper``]. Returns ``(N_res, row at that N_res)``; ``(0, None)`` if
    not even 16 fits."""

    def row(n: int) -> Row:
        cand = Candidate(policy.name, policy) if policy else policy_candidates(False, precision, n, device=device)[-1]
        p = cand.policy.replace(precision=precision)
        est = estimate_breakdown(config, p, n, n_seq, n_extra_seq, n_templ, device=device, limit=budget)
        return Row(dataclasses.replace(cand, policy=p), est, est.total <= budget)

    lo, hi = 16, upper
    if not row(lo).fits:
        return 0, None
    while lo < hi:  # invariant: lo fits
        mid = (lo + hi + 1) // 2
        if row(mid).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo, row(lo)


__all__ = [
    "Candidate",
    "Choice",
    "InsufficientMemoryWarning",
    "MAX_CHUNK_SIZE",
    "MIN_CHUNK_SIZE",
    "Row",
    "choose",
    "chunk_candidates",
    "cuda_capability",
    "max_length",
    "budget_of",
    "plan",
    "policy_candidates",
    "resolve_policy",
]
