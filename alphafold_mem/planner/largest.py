"""The largest complex that fits (:func:`largest_complex`): what ``memory-plan --chains / --fasta`` and
predict's pre-flight of a complex say when no policy fits the budget (issue 43, item 6).

Two answers a biologist can act on, each the planner's, not a rule of thumb:

* **cropped** (:func:`scaled_chains`): the same chains, each cropped to the same fraction of its length,
  ``max(1, floor(L_i * N / N_total))`` residues for a total of at most ``N``; the largest ``N`` that
  fits is found by bisection between the number of chains and the complex's residues, each step
  guided by the peaks at the ends (:func:`_search`: a few estimates instead of ``log2 N``). Identical
  chains stay equal; the complex one step bigger (``N + 1``) does not fit (:attr:`LargestComplex.bigger`).
* **fewer chains**: the first ``k`` chains whole, in input order (drop the chains after them); the
  largest ``k`` that fits, by bisection (``k + 1`` does not).

Both are searched under the most frugal policy of the inference ladder in the run's precision (the
last of :func:`~.ladder.policy_candidates`: ``low_memory_inference`` at the smallest chunk, with offload
on an accelerator), with the same MSA rows, extra rows and templates as the complex and the same usable
budget (after the device margin); its flags (:func:`~.flags.predict_flags`) run what was found. Every
probe is one estimate through :func:`~.chooser.choose`, so the estimate cache (:mod:`.cache`) serves
repeated questions, and a probe past the budget stops early.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional, Sequence

import torch

from ..config import ModelConfig
from ..memory.policy import MemoryPolicy
from ..units import format_gib
from .chains import Chains
from .chooser import choose
from .flags import predict_flags
from .ladder import Candidate, policy_candidates

__all__ = ["LargestComplex", "frugal_policy", "largest_complex", "scaled_chains"]


def scaled_chains(chains: Chains, n: int) -> Chains:
    """``chains`` cropped proportionally to at most ``n`` residues in all: chain ``i`` keeps
    ``max(1, floor(L_i * n / N_total))`` residues (its entity kept; equal chains stay equal)."""
    total = chains.n_res
    return Chains(tuple(max(1, length * n // total) for length in chains.lengths), chains.entity_ids)


def _prefix(chains: Chains, k: int) -> Chains:
    return Chains(chains.lengths[:k], chains.entity_ids[:k])


@dataclasses.dataclass(frozen=True)
class LargestComplex:
    """What :func:`largest_complex` found for the complex ``chains`` within ``budget`` usable bytes
    under ``policy``.

    Attributes:
        whole_fits: the complex itself fits under ``policy`` (the run asked for a faster one).
        cropped: the largest proportionally cropped complex that fits (``None``: not even one residue
            per chain); ``cropped_peak`` its predicted peak in bytes.
        bigger: the cropped complex one step bigger (``N + 1`` residues in the bisection), which does
            not fit (``None`` with ``cropped``).
        first_chains: how many leading whole chains fit (0: not even the first); ``first_peak`` their
            predicted peak (0 when none fits).
        cropped_host, first_host: the host memory (bytes) their offload needs (0: none; CUDA only).
    """

    chains: Chains
    policy: MemoryPolicy
    budget: int
    whole_fits: bool
    cropped: Optional[Chains]
    cropped_peak: int
    bigger: Optional[Chains]
    first_chains: int
    first_peak: int
    cropped_host: int = 0
    first_host: int = 0

    @property
    def flags(self) -> str:
        """The ``predict`` options of :attr:`policy`."""
        return predict_flags(self.policy)

    def describe(self, ids: Optional[Sequence[str]] = None, flags: Optional[str] = None) -> str:
        """One sentence, sizes in GiB: ``'the largest that fits (...): every chain cropped to 68 %,
        272+272+204 = 748 residues (peak 1.82 GiB of 1.83 GiB usable; 749 residues do not fit), or the
        first 2 chains whole (A+B: 400+400 = 800 residues, peak 1.80 GiB); flags: --low-memory ...'``
        (``ids``: the chain ids, default A, B, ...; ``flags``: the command that ends it, default
        :attr:`flags`)."""
        flags = self.flags if flags is None else flags
        names = list(ids) if ids else [_letter(i) for i in range(len(self.chains.lengths))]
        under = f"{self.policy.precision}, {format_gib(self.budget)} usable"
        if self.whole_fits:
            return f"the whole complex fits under the most frugal policy ({under}); flags: {flags}"
        if self.cropped is None:
            return f"nothing of this complex fits ({under}), not even its chains cropped to a residue: a larger device"
        pct = 100 * self.cropped.n_res // self.chains.n_res
        text = (
            f"the largest that fits ({under}): every chain cropped to {pct} %, {_sum(self.cropped)} residues "
            f"(peak {format_gib(self.cropped_peak)}{_host(self.cropped_host)}; {self.bigger.n_res} residues do not fit)"
        )
        if self.first_chains:
            k = self.first_chains
            first, which = _prefix(self.chains, k), f"{k} chains" if k > 1 else "chain"
            text += (
                f", or the first {which} whole ({'+'.join(names[:k])}: {_sum(first)} residues, "
                f"peak {format_gib(self.first_peak)}{_host(self.first_host)}; drop {'+'.join(names[k:])})"
            )
        return text + f"; flags: {flags}"

    def as_dict(self) -> dict:
        """The ``--json`` entry: lengths, residues and peaks (bytes) of both answers and the flags."""
        return {
            "policy": dataclasses.asdict(self.policy),
            "flags": self.flags,
            "usable_budget_bytes": int(self.budget),
            "whole_fits": self.whole_fits,
            "cropped": None if self.cropped is None else list(self.cropped.lengths),
            "cropped_n_res": 0 if self.cropped is None else self.cropped.n_res,
            "cropped_fraction": 0.0 if self.cropped is None else self.cropped.n_res / self.chains.n_res,
            "cropped_peak_bytes": int(self.cropped_peak),
            "cropped_host_bytes": int(self.cropped_host),
            "bigger": None if self.bigger is None else list(self.bigger.lengths),
            "first_chains": self.first_chains,
            "first_chains_n_res": _prefix(self.chains, self.first_chains).n_res if self.first_chains else 0,
            "first_chains_peak_bytes": int(self.first_peak),
            "first_chains_host_bytes": int(self.first_host),
        }


def _host(host: int) -> str:
    return f", host {format_gib(host)} for offload" if host else ""


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else str(i + 1)


def _sum(chains: Chains) -> str:
    parts = chains.lengths
    return f"{parts[0]}" if len(parts) == 1 else f"{'+'.join(map(str, parts))} = {chains.n_res}"


def frugal_policy(precision: str, device: torch.device | str, max_chunk_size: Optional[int] = None) -> MemoryPolicy:
    """The most frugal inference policy of the ladder in ``precision`` on ``device``."""
    return policy_candidates(False, precision, 1 << 20, max_chunk_size, device=device)[-1].policy


def largest_complex(
    config: ModelConfig,
    chains: Chains,
    msa_sizes: tuple[int, int, int],
    budget: int,
    precision: str,
    device: torch.device | str = "cuda",
    dap: int = 1,
    max_chunk_size: Optional[int] = None,
) -> LargestComplex:
    """The largest complex like ``chains`` that fits ``budget`` usable bytes (module docstring):
    ``msa_sizes`` = ``(N_seq, N_extra, N_templ)`` of every probe; ``dap``: the peak per device of a
    DAP group of that size (a probe of no more residues than ``dap`` does not fit)."""
    policy = frugal_policy(precision, device, max_chunk_size)
    candidate = [Candidate("most frugal", policy)]
    peaks: dict[Chains, tuple[bool, int]] = {}  # fits, and the peak (a lower bound past the budget)
    hosts: dict[Chains, int] = {}  # host bytes of offload

    def probe(ch: Chains, exact: bool = False) -> tuple[bool, int]:
        if ch not in peaks or exact:
            peaks[ch] = (False, 0)
            if dap <= 1 or ch.n_res > dap:
                found = choose(
                    config,
                    ch.n_res,
                    *msa_sizes,
                    budget,
                    candidate,
                    device=device,
                    dap=dap,
                    chains=ch if config.multimer else None,
                    evaluate_all=exact,
                )
                peaks[ch] = (found.chosen is not None, int(found.rows[-1].estimate.total))
                hosts[ch] = int(found.rows[-1].estimate.host)
        return peaks[ch]

    count = len(chains.lengths)
    whole_fits, whole_peak = probe(chains, exact=True)  # exact: the search's model (the caller's plan cached it)
    if whole_fits:
        host = hosts.get(chains, 0)
        return LargestComplex(chains, policy, budget, True, chains, whole_peak, None, count, whole_peak, host, host)
    cropped = bigger = None
    scaled = functools.partial(scaled_chains, chains)
    start = count  # one residue per chain, or under DAP the first complex of more residues than devices
    while scaled(start).n_res <= dap and start < chains.n_res:
        start += 1
    n = _search(lambda m: probe(scaled(m)), start, chains.n_res, budget, whole_peak, scaled)
    if n:
        cropped, bigger = scaled_chains(chains, n), scaled_chains(chains, n + 1)  # n + 1 does not fit
    k = _search(lambda m: probe(_prefix(chains, m)), 1, count, budget)
    return LargestComplex(
        chains,
        policy,
        budget,
        False,
        cropped,
        peaks[cropped][1] if cropped is not None else 0,
        bigger,
        k,
        peaks[_prefix(chains, k)][1] if k else 0,
        hosts.get(cropped, 0) if cropped is not None else 0,
        hosts.get(_prefix(chains, k), 0) if k else 0,
    )


def _search(probe, lo: int, hi: int, budget: int, hi_peak: int = 0, shape=lambda n: n) -> int:
    """The largest ``n`` in ``[lo, hi)`` whose ``probe(n)`` = ``(fits, peak)`` fits (0 if not even
    ``lo``; ``hi`` does not fit). Bisection; with ``hi_peak`` (the exact peak at ``hi``) each step is
    guided by the exact peaks (:func:`_guess`; a probe past the budget stops early: its peak is only a
    lower bound, not used), and a step that moved the same end as the two before it halves the
    bracket instead (``shape(n)``: the complex probed at ``n``; a step to the complex of an end is no
    move)."""
    fits, p_lo = probe(lo)
    if not fits:
        return 0
    exact, top, moved = [(lo, p_lo)], (hi, hi_peak), ""
    while hi - lo > 1:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2
        if hi_peak > p_lo and not moved.endswith("lll") and not moved.endswith("hhh"):
            mid = min(max(_guess(exact[-2:] + [top], budget), lo + 1), hi - 1)
        fits, peak = probe(mid)
        if shape(mid) not in (shape(lo), shape(hi)):  # a complex not probed before: a move
            moved += "l" if fits else "h"
        if fits:
            lo, p_lo = mid, peak
            exact.append((mid, peak))
        else:
            hi = mid
    return lo


def _guess(points: list[tuple[int, int]], budget: int) -> int:
    """The ``n`` where the peak reaches ``budget`` on the curve through ``points`` (``(n, peak)``,
    increasing ``n``, the last past the budget): the chord of two (below the answer, the peak being
    convex in ``n``), the parabola ``a + b n + c n^2`` through three (activations grow as ``N_res``
    and ``N_res^2``)."""
    (n0, p0), (n1, p1) = points[-2], points[-1]
    guess = n0 + (budget - p0) * (n1 - n0) / (p1 - p0)
    if len(points) == 3:
        x, y = [float(n) for n, _ in points], [float(p) for _, p in points]
        d = (x[0] - x[1]) * (x[0] - x[2]) * (x[1] - x[2])
        if d:
            c = (x[2] * (y[1] - y[0]) + x[1] * (y[0] - y[2]) + x[0] * (y[2] - y[1])) / d
            b = (x[2] ** 2 * (y[0] - y[1]) + x[1] ** 2 * (y[2] - y[0]) + x[0] ** 2 * (y[1] - y[2])) / d
            a = y[0] - b * x[0] - c * x[0] ** 2
            if c > 0:
                root = (-b + math.sqrt(max(b * b - 4 * c * (a - budget), 0.0))) / (2 * c)
                if x[1] <= root <= x[2]:
                    guess = root
    return int(guess)
