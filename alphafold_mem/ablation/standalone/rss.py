"""Peak resident-set growth of a call (Linux), with the standard library only, so that a worker run
by another Python (OpenFold's environment, :mod:`.openfold_worker`) can use it by file path.

``/proc/self/clear_refs`` with ``5`` resets the kernel's high-water mark ``VmHWM`` to the current
resident set; after the call, ``VmHWM`` minus the resident set before is the growth. It counts every
page the process touched (tensors, allocator caching, Python objects), unlike the storage counter
of :func:`alphafold_mem.memory.track_peak`. Run it in a fresh process (nothing cached from earlier
calls) with ``MALLOC_MMAP_THRESHOLD_`` set low (:data:`MMAP_ENV`), so that glibc returns a freed
large block at once instead of keeping it in the heap, where a later call would reuse it unseen.
"""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["MMAP_ENV", "measure_rss", "status_kb"]

#: Environment for a measuring process: glibc serves blocks >= 64 KiB by mmap and unmaps them on free.
MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def status_kb(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``).

    Raises:
        RuntimeError: the field is missing (not Linux).
    """
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status (peak RSS needs Linux)")


def measure_rss(fn: Callable[[], object]) -> tuple[float, int]:
    """``(seconds, peak RSS growth in bytes)`` of ``fn()``."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    before = status_kb("VmRSS")
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    return seconds, (status_kb("VmHWM") - before) * 1024
