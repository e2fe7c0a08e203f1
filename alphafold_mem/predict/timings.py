"""Seconds and memory per stage of a prediction run (what ``timings.json`` records)."""

from __future__ import annotations

import resource
import sys
import time
from typing import Callable, Optional

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


__all__ = ["Stages", "keep_skipped"]
