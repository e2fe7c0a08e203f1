"""Shared by the benchmark scripts: the independent memory measure of a CPU process (peak resident
set growth, read from /proc) and the glibc allocator settings both sides run under.

``rss_growth(fn)`` resets the process's high-water mark to its current resident set
(``/proc/self/clear_refs``), runs ``fn`` and returns ``(seconds, VmHWM - VmRSS before)``: the memory
the run made resident, whatever allocated it (tensors, the allocator's cached blocks, BLAS
workspaces), a different mechanism from the storage counter of :func:`alphafold_mem.memory.track_peak`.
"""

from __future__ import annotations

import time

#: glibc settings: ``default`` leaves its dynamic mmap threshold (freed large blocks may stay in the
#: heap); ``mmap`` returns blocks above 64 KiB to the system at once.
ALLOCATORS = {"default": {}, "mmap": {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}}


def status_kb(field: str) -> int:
    """A field of /proc/self/status in kB (e.g. ``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_growth(fn) -> tuple[float, float]:
    """``(seconds, bytes)``: wall time of ``fn()`` and the growth of the resident set's peak during it."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    before = status_kb("VmRSS")
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    return seconds, (status_kb("VmHWM") - before) * 1024.0
