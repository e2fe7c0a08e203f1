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


def host_module():
    """``alphafold_mem/memory/host.py`` loaded by file path: an OpenFold worker runs in a Python that
    need not have our package's dependencies, and host.py needs only the standard library and torch."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "alphafold_mem" / "memory" / "host.py"
    spec = importlib.util.spec_from_file_location("_alphafold_mem_host", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def rss_growth(fn) -> tuple[float, float]:
    """``(seconds, bytes)``: wall time of ``fn()`` and the growth of the resident set's peak during it
    (:func:`alphafold_mem.memory.host.rss_growth`)."""
    with host_module().rss_growth() as rss:
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
    return seconds, float(rss.bytes)
