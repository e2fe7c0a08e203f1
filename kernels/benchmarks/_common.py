"""Timing and peak-memory measurement shared by the kernel benchmarks."""

from __future__ import annotations

import os
import time
from typing import Callable, Optional

import torch


def setup_device(smoke: bool) -> torch.device:
    """CUDA when visible; otherwise CPU, with Triton's interpreter switched on for ``--smoke``.

    Must run before anything imports triton (the interpreter is chosen at import time).
    """
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return torch.device("cuda")
    if not smoke:
        raise SystemExit("no CUDA device: run with --smoke (tiny shapes, Triton interpreter on CPU)")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return f"CPU, Triton interpreter (torch {torch.__version__}); times are meaningless"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, warmup: int, reps: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def peak_mib(fn: Callable[[], object], device: torch.device) -> Optional[float]:
    """Peak memory allocated by ``fn`` above what was allocated before it (MiB); None on CPU."""
    if device.type != "cuda":
        fn()
        return None
    _sync(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def fmt(x: Optional[float], width: int = 10) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.2f}"
