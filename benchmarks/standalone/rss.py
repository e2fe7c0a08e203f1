"""The one peak-RSS measure of a call and the glibc allocator settings it runs under, loadable by file
path from any Python with torch (OpenFold's environment, :mod:`.openfold_worker`; the benchmark
scripts), so it never imports :mod:`alphafold_mem` as a package.

The measure itself is :func:`alphafold_mem.memory.host.rss_growth` (``/proc/self/clear_refs`` resets
the kernel's high-water mark ``VmHWM`` to the current resident set; after the call, ``VmHWM`` minus
the resident set before is the growth), loaded here by file path (:func:`host_module`: host.py needs
only the standard library and torch). It counts every page the process touched (tensors, allocator
caching, BLAS workspaces, Python objects), unlike the storage counter of
:func:`alphafold_mem.memory.track_peak`. Run it in a fresh process (nothing cached from earlier
calls); with ``MALLOC_MMAP_THRESHOLD_`` set low (:data:`MMAP_ENV`, allocator ``mmap``) glibc returns a
freed large block at once instead of keeping it in the heap, where a later call would reuse it unseen.
"""

from __future__ import annotations

import importlib.util
import resource
import sys
import time
from pathlib import Path
from typing import Callable

__all__ = ["ALLOCATORS", "MMAP_ENV", "host_module", "measure", "measure_rss"]


_HOST = Path(__file__).resolve().parents[2] / "alphafold_mem" / "memory" / "host.py"
_HOST_NAME = "_alphafold_mem_host"


def host_module():
    """``alphafold_mem/memory/host.py`` loaded by file path (once per process)."""
    if _HOST_NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_HOST_NAME, _HOST)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_HOST_NAME] = module  # its dataclass looks its module up there
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[_HOST_NAME]
            raise
    return sys.modules[_HOST_NAME]


#: Environment for a measuring process: glibc serves blocks >= 64 KiB by mmap and unmaps them on free
#: (``alphafold_mem.memory.host.MMAP_ENV``, read from host.py loaded by file path).
MMAP_ENV = dict(host_module().MMAP_ENV)
#: glibc settings of a measuring process's environment: ``default`` leaves the environment as it is
#: (glibc's dynamic mmap threshold keeps freed large blocks in the heap; a process of ours then applies
#: its own default, :func:`alphafold_mem.memory.host.apply_malloc_setting`, as ``train``/``predict``
#: do: ``--malloc trim``); ``release`` is ``default`` with ours applying ``--malloc release`` (the
#: fixed 64 KiB threshold, set from inside the process); ``glibc`` is ``default`` with ours opting out
#: (``ALPHAFOLD_MEM_MALLOC=default``: plain glibc on both sides); ``mmap`` returns blocks above 64 KiB
#: to the system at once, on both sides.
ALLOCATORS = {
    "default": {},
    "release": {"ALPHAFOLD_MEM_MALLOC": "release"},
    "glibc": {"ALPHAFOLD_MEM_MALLOC": "default"},
    "mmap": MMAP_ENV,
}


def measure(fn: Callable[[], object]) -> dict:
    """``{"seconds", "cpu_s", "sys_s", "minor_faults", "rss_bytes"}`` of ``fn()``: wall seconds, CPU
    seconds (user + system of this process: steadier than wall time when other jobs share the cores),
    the system part of them, the minor page faults (pages first touched after the allocator took
    them from the system: what returning memory early costs) and the growth of the resident set's
    peak in bytes (:func:`alphafold_mem.memory.host.rss_growth`)."""
    with host_module().rss_growth() as rss:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "sys_s": r1.ru_stime - r0.ru_stime,
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
        "rss_bytes": rss.bytes,
    }


def measure_rss(fn: Callable[[], object]) -> tuple[float, int]:
    """``(seconds, peak RSS growth in bytes)`` of ``fn()`` (:func:`measure`)."""
    result = measure(fn)
    return result["seconds"], result["rss_bytes"]
