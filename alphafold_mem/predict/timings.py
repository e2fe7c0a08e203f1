"""Seconds and memory per stage of a prediction run (what ``timings.json`` records)."""

from __future__ import annotations

import resource
import sys
import time
from typing import Callable

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


def _max_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


__all__ = ["Stages"]
