"""Seconds and memory per stage of a prediction run (what ``timings.json`` records): per target
(:class:`Stages`) and for the whole run, every second in one named stage (:class:`StageClock`)."""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from typing import Callable, Iterator, Optional

import torch

from ..memory import track_peak


class Stages:
    """Seconds and memory per stage for ``timings.json``.

    ``peak_mib`` comes from :func:`alphafold_mem.memory.track_peak`: on CUDA the allocator's peak
    above what was allocated when the stage began (every stage); on CPU the peak of tensor storages
    created by torch ops inside the stage (parameters and inputs excluded), measured for the model
    forward only, where it is the activation peak (the other CPU stages are mostly numpy, which it
    cannot see). ``process_max_rss_mib`` (CPU) is the process's maximum resident set size so far
    (``getrusage``): a whole-process high-water mark, not a per-stage peak.
    """

    def __init__(self, device: torch.device, track_cpu: bool = True):
        self.device = device
        self.track_cpu = track_cpu
        self.records: dict[str, dict] = {}

    def run(self, key: str, fn: Callable, forward: bool = False):

        cuda = self.device.type == "cuda"
        track = cuda or (forward and self.track_cpu)
        start = time.perf_counter()
        peak = None
        try:
            if track:
                with track_peak(self.device) as peak:
                    return fn()
            return fn()
        finally:
            rec = {"seconds": round(time.perf_counter() - start, 4)}
            if peak is not None:
                rec["peak_mib"] = round(peak.peak_mib, 1)
            if not cuda:
                rec["process_max_rss_mib"] = round(_max_rss_mb(), 1)
            self.records[key] = rec

    def describe(self) -> dict[str, str]:
        if self.device.type == "cuda":
            return {
                "peak_mib": "torch.cuda.max_memory_allocated during the stage minus what was allocated "
                "when it began (alphafold_mem.memory.track_peak)"
            }
        out = {
            "process_max_rss_mib": "process maximum resident set size so far (getrusage): a whole-process "
            "high-water mark, not a per-stage peak"
        }
        if self.track_cpu:
            out["peak_mib"] = (
                "model stages only: peak of tensor storages created during the forward, "
                "parameters and inputs excluded (alphafold_mem.memory.track_peak)"
            )
        return out


#: The run's stages in ``timings.json``'s ``stage_seconds``, in the order a run meets them: options,
#: devices and DAP set-up (``start-up``); reading and validating the inputs and finding finished
#: targets (``inputs``); the sequence search (``search``); loading the weights (``weights``); the
#: memory pre-flight and run-time estimate (``planning``); per target, features, the forward, and the
#: output files (relaxation, ``timings.json`` and the summary included).
STAGE_NAMES = ("start-up", "inputs", "search", "weights", "planning", "features", "model", "outputs")


class StageClock:
    """Wall seconds of one run, each in exactly one named stage (:data:`STAGE_NAMES`): the clock is
    always in one stage, and :meth:`switch` charges the seconds since the last switch to the stage it
    leaves, so the stages sum to :attr:`total` (to rounding). It starts in ``start-up`` when made."""

    def __init__(self, stage: str = "start-up"):
        self.started = self._mark = time.perf_counter()
        self.current = stage
        self.seconds: dict[str, float] = {}

    def switch(self, stage: str) -> str:
        """Charge the seconds since the last switch to the current stage and enter ``stage``; returns
        the stage left."""
        now = time.perf_counter()
        self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self._mark
        self._mark, left, self.current = now, self.current, stage
        return left

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """In stage ``name`` for the block, then back in the stage it was in."""
        left = self.switch(name)
        try:
            yield
        finally:
            self.switch(left)

    def report(self) -> tuple[float, dict[str, float]]:
        """``(total seconds, {stage: seconds})`` up to now (stages in :data:`STAGE_NAMES` order, those
        never entered left out), rounded to ms."""
        self.switch(self.current)
        known = [s for s in STAGE_NAMES if s in self.seconds] + [s for s in self.seconds if s not in STAGE_NAMES]
        return round(self._mark - self.started, 3), {s: round(self.seconds[s], 3) for s in known}


def keep_skipped(timings: dict, previous: Optional[dict]) -> dict:
    """``timings`` (one run's ``timings.json`` content) with the records of its skipped targets taken
    from ``previous`` (the ``timings.json`` of an earlier run into the same outputs, or ``None``): a
    skipped target keeps the ``<id>/...`` stages and the ``seconds`` and ``recycles_run`` of the run
    that produced its outputs, so a rerun that skips targets loses none of their timings. Records of
    targets that ran, and the run-level fields, are this run's."""
    if not isinstance(previous, dict):
        return timings
    old_targets = previous.get("targets") if isinstance(previous.get("targets"), dict) else {}
    old_stages = previous.get("stages") if isinstance(previous.get("stages"), dict) else {}
    out = dict(timings, targets={k: dict(v) for k, v in timings.get("targets", {}).items()})
    if "stages" in out:
        out["stages"] = dict(out["stages"])
    for name, entry in out["targets"].items():
        if entry.get("status") != "skipped":
            continue
        old = old_targets.get(name)
        if isinstance(old, dict) and old.get("status") in ("ok", "skipped"):
            entry["seconds"], entry["recycles_run"] = old.get("seconds"), old.get("recycles_run")
        if "stages" in out:
            out["stages"].update({k: v for k, v in old_stages.items() if k.startswith(f"{name}/")})
    return out


def _max_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


__all__ = ["STAGE_NAMES", "StageClock", "Stages", "keep_skipped"]
