"""The planner's predictions for the ablation: :func:`alphafold_mem.planner.estimate_breakdown` with a
time limit and a cache.

The planner traces the model under FakeTensorMode; its cost grows with the number of Python-level
chunk iterations it traces, e.g. the query chunks of the low-memory attention at 10,000 residues.
A prediction that does not finish within ``limit_s`` raises :class:`PlannerTimeout`; the caller
writes a row with that reason. The limit counts this process's CPU time (``ITIMER_PROF``,
``SIGPROF``; POSIX, main thread; elsewhere there is none), not wall time, so that the same call
gets the same answer on an idle and on a loaded, shared machine.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Optional

from ..planner import PeakEstimate, estimate_breakdown

__all__ = ["PlannerTimeout", "Planner"]


class PlannerTimeout(TimeoutError):
    """The planner did not answer within the limit."""


@contextlib.contextmanager
def _time_limit(seconds: Optional[float]) -> Iterator[None]:
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def _raise(signum, frame):
        raise PlannerTimeout(f"the planner did not answer within {seconds:.0f} CPU seconds")

    old = signal.signal(signal.SIGPROF, _raise)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


class Planner:
    """Cached, time-limited predictions: one call per (config, policy, sizes, training)."""

    def __init__(self, limit_s: Optional[float] = 300.0):
        self.limit_s = limit_s
        self.cache: dict = {}

    def estimate(
        self, config, policy, n_res: int, n_seq: int, n_extra: int, n_templ: int = 0, training: bool = False
    ) -> PeakEstimate:
        """:func:`~alphafold_mem.planner.estimate_breakdown` of these arguments.

        Raises:
            PlannerTimeout: no answer within ``limit_s`` (cached too: the same call is not retried).
        """
        key = (config, policy, n_res, n_seq, n_extra, n_templ, training)
        if key not in self.cache:
            try:
                with _time_limit(self.limit_s):
                    self.cache[key] = estimate_breakdown(config, policy, n_res, n_seq, n_extra, n_templ, training)
            except PlannerTimeout as exc:
                self.cache[key] = exc
        found = self.cache[key]
        if isinstance(found, Exception):
            raise found
        return found
