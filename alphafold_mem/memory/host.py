"""Host (CPU) memory as the machine sees it: glibc's allocator setting that returns freed memory,
and two measures beside :func:`~alphafold_mem.memory.track_peak`'s storage counter.

Why: the storage counter counts bytes of live tensor storages. What a CPU user's machine sees is
the resident set (RSS), which is larger for three reasons, from the largest:

1. glibc keeps freed memory. Blocks of 128 KiB and more are mmapped and returned on ``free``, but
   glibc's *dynamic* threshold rises to the size of every mmapped block freed (up to 32 MiB), so
   after the first large tensors die, later ones of that size come from the heap, and a freed heap
   block is only returned when it sits at the top of the heap. A training step, which frees and
   reallocates activations of many sizes, then leaves the heap at several times the live bytes.
   Two remedies (:func:`apply_malloc_setting` picks one):

   - ``trim`` (``alphafold-mem``'s default): :func:`start_malloc_trim` leaves glibc's thresholds as
     they are, so freed blocks are reused without new page faults, and a daemon thread calls
     ``malloc_trim(0)`` once a second, which hands every whole free page of every arena back to the
     system (not only the heap top). The resident set then holds the live bytes plus what was freed
     in the last second. Cost: the pages reused after a trim are faulted in again, once per second
     instead of once per allocation.
   - ``release``: :func:`apply_malloc_remedy` fixes the threshold at 64 KiB (``M_MMAP_THRESHOLD``,
     which also turns the dynamic adjustment off) and trims the heap top on every free
     (``M_TRIM_THRESHOLD`` 0): what ``MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0``
     (:data:`MMAP_ENV`) does from the environment. Cost: one mmap/munmap pair and fresh zeroed pages
     per large allocation.

   Measured (``scripts/compare_openfold.py --mode training``, our side; docs/parity.md, "OpenFold side by
   side: time and memory"): in a training step at N_res 64, ``trim`` took 0.94-0.97x plain glibc's CPU time
   and held 0.09x its RSS growth; ``release`` took 1.53x ``trim``'s CPU time for 1.09x its RSS growth.
   Opt out: ``--malloc default`` or ``ALPHAFOLD_MEM_MALLOC=default``.

   Two choices elsewhere cut what is faulted in again: PyTorch's huge-page switch, set by the
   command line before the first allocation (:mod:`alphafold_mem.hugepages`: one page fault per 2 MiB of a
   large tensor instead of one per 4 KiB), and, on CPU, reentrant activation checkpoints
   (:mod:`alphafold_mem.memory.checkpoint`: an allocation order glibc's heap keeps less of).
2. Memory that is malloc'ed but not a tensor storage seen by the counter: buffers allocated inside
   a kernel (BLAS/oneDNN packing, temporaries of composite kernels), autograd graph nodes, Python
   objects. :class:`MallocPeak` measures what malloc holds (glibc ``mallinfo2``: heap in use plus
   mmapped blocks), sampled after every ATen op.
3. Page granularity and heap fragmentation of blocks below the threshold.

The measures are Linux/glibc facilities; elsewhere the remedies do nothing and :func:`malloc_in_use`
returns None.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import os
import threading
import time
from typing import Iterator, Optional

from torch.utils._python_dispatch import TorchDispatchMode


def _hugepages():
    """:mod:`alphafold_mem.hugepages` (standard library only), also when this file was loaded by path
    outside the package (``benchmarks/standalone/rss.py``, in any Python with torch)."""
    if __package__:
        from .. import hugepages  # here, not at the top: this file is also loaded by path, outside the package

        return hugepages
    import importlib.util  # only for the by-path load
    from pathlib import Path  # only for the by-path load

    spec = importlib.util.spec_from_file_location(
        "_alphafold_mem_hugepages", Path(__file__).parents[1] / "hugepages.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ALPHAFOLD_MEM_MALLOC=default leaves glibc's allocator as it is (trim / release pick a remedy); the name
# lives in hugepages (standard library only)
OPT_OUT_ENV = _hugepages().OPT_OUT_ENV

__all__ = [
    "apply_malloc_remedy",
    "apply_malloc_setting",
    "start_malloc_trim",
    "malloc_in_use",
    "MallocPeak",
    "rss_growth",
    "resident_bytes",
    "DEFAULT_MALLOC",
    "MALLOC_SETTINGS",
    "MMAP_ENV",
    "OPT_OUT_ENV",
]

#: The settings of ``--malloc`` (module docstring, point 1), and the one ``alphafold-mem`` applies by default.
MALLOC_SETTINGS = ("trim", "release", "default")
DEFAULT_MALLOC = "trim"
#: Seconds between two ``malloc_trim(0)`` calls of :func:`start_malloc_trim`.
TRIM_PERIOD_S = 1.0
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc malloc.h
#: ``release``'s glibc thresholds in bytes: blocks >= 64 KiB mmapped (unmapped on free), the heap top
#: trimmed on every free.
RELEASE_MMAP_THRESHOLD, RELEASE_TRIM_THRESHOLD = 65536, 0
#: The same thresholds as glibc reads them from the environment at start-up: the environment of a
#: process that measures the peak resident set (the ablation's RSS worker, ``benchmarks/standalone/rss.py``
#: allocator ``mmap``), so a block freed before the measured call is not reused unseen from the heap.
MMAP_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(RELEASE_MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(RELEASE_TRIM_THRESHOLD),
}


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def _declined(*needs: str) -> Optional[str]:
    """Why no remedy applies here (the user's choice, or no glibc with ``mallopt`` and the functions
    named in ``needs``), or None."""
    if os.environ.get(OPT_OUT_ENV, "").lower() == "default":
        return f"not applied: {OPT_OUT_ENV}=default"
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return "not applied: MALLOC_*_THRESHOLD_ set in the environment"
    libc = _libc()
    if libc is None or not all(hasattr(libc, name) for name in ("gnu_get_libc_version", *needs)):
        return "not applied: not glibc"
    return None


def apply_malloc_remedy(
    mmap_threshold: int = RELEASE_MMAP_THRESHOLD, trim_threshold: int = RELEASE_TRIM_THRESHOLD
) -> str:
    """Make glibc return freed memory to the system (see the module docstring, point 1).

    Does nothing when ``ALPHAFOLD_MEM_MALLOC=default`` is set, when the user already set
    ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` (their choice stands), or when the C
    library is not glibc.

    Args:
        mmap_threshold: bytes; blocks at least this large are mmapped (and unmapped on free).
        trim_threshold: bytes of free memory at the heap top above which it is returned.

    Returns:
        What was done, one line (``"applied: ..."`` or ``"not applied: <why>"``).
    """
    why = _declined()
    if why:
        return why
    libc = _libc()
    ok = libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    ok = libc.mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1 and ok
    if not ok:
        return "not applied: mallopt refused the values"
    return f"applied: M_MMAP_THRESHOLD {mmap_threshold} B, M_TRIM_THRESHOLD {trim_threshold} B"


_TRIMMER: Optional[threading.Thread] = None


def start_malloc_trim(period_s: float = TRIM_PERIOD_S) -> str:
    """Return freed memory to the system every ``period_s`` seconds (module docstring, point 1,
    ``trim``): a daemon thread calls glibc's ``malloc_trim(0)``. Once per process; later calls report
    the running thread.

    Does nothing when ``ALPHAFOLD_MEM_MALLOC=default`` is set, when the user set
    ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``, or when the C library is not glibc.

    Args:
        period_s: seconds between two trims (> 0).

    Returns:
        What was done, one line (``"applied: ..."`` or ``"not applied: <why>"``).

    Raises:
        ValueError: ``period_s`` is not positive.
    """
    global _TRIMMER
    if not period_s > 0:
        raise ValueError(f"period_s must be positive, got {period_s}")
    why = _declined("malloc_trim")
    if why:
        return why
    if _TRIMMER is None or not _TRIMMER.is_alive():
        libc = _libc()
        libc.malloc_trim.argtypes = [ctypes.c_size_t]

        def loop() -> None:
            while True:
                time.sleep(period_s)
                libc.malloc_trim(0)  # ctypes releases the GIL during the call

        _TRIMMER = threading.Thread(target=loop, name="alphafold-mem malloc_trim", daemon=True)
        _TRIMMER.period_s = period_s
        _TRIMMER.start()
    return f"applied: malloc_trim(0) every {_TRIMMER.period_s:g} s"


def apply_malloc_setting(setting: Optional[str] = None) -> str:
    """Apply one of :data:`MALLOC_SETTINGS` (``None``: ``$ALPHAFOLD_MEM_MALLOC`` if set, else
    :data:`DEFAULT_MALLOC`): ``trim`` → :func:`start_malloc_trim`, ``release`` →
    :func:`apply_malloc_remedy`, ``default`` → nothing.

    Returns:
        What was done, one line.

    Raises:
        ValueError: an unknown setting.
    """
    setting = (setting or os.environ.get(OPT_OUT_ENV) or DEFAULT_MALLOC).lower()
    if setting not in MALLOC_SETTINGS:
        raise ValueError(f"unknown malloc setting {setting!r}; valid: {', '.join(MALLOC_SETTINGS)}")
    if setting == "default":
        return "not applied: glibc's defaults (--malloc default)"
    return start_malloc_trim() if setting == "trim" else apply_malloc_remedy()


_LIBC = _libc()
if _LIBC is not None and hasattr(_LIBC, "mallinfo2"):
    _LIBC.mallinfo2.restype = _MallInfo2


def malloc_in_use() -> Optional[int]:
    """Bytes malloc currently hands out (glibc ``mallinfo2``: ``uordblks`` in the heaps of every
    arena + ``hblkhd`` in mmapped blocks), or None without glibc >= 2.33."""
    if _LIBC is None or not hasattr(_LIBC, "mallinfo2"):
        return None
    info = _LIBC.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class MallocPeak(TorchDispatchMode):
    """Peak of :func:`malloc_in_use` above its value on entry, sampled after every ATen op (and at
    exit): ``peak`` in bytes. Independent of the storage counter: it is malloc's own accounting and
    sees every byte malloc'ed (tensors, kernel buffers, graph nodes), at op granularity (a buffer
    allocated and freed inside one op is missed; the RSS high-water mark catches those)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as StorageTracker's: no torch._dynamo import at the first op (nothing is compiled)

    def __init__(self) -> None:
        super().__init__()
        self.baseline = self.peak = 0

    def __enter__(self):
        base = malloc_in_use()
        if base is None:
            raise RuntimeError("MallocPeak needs glibc >= 2.33 (mallinfo2)")
        self.baseline, self.peak = base, 0
        return super().__enter__()

    def __exit__(self, *exc):
        self._sample()
        return super().__exit__(*exc)

    def _sample(self) -> None:
        self.peak = max(self.peak, malloc_in_use() - self.baseline)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._sample()
        return out


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def resident_bytes() -> int:
    """The process's resident set now (Linux ``VmRSS``), in bytes."""
    return _status_kb("VmRSS") * 1024


@dataclasses.dataclass
class RssGrowth:
    """Growth of the resident set's high-water mark during a block (``bytes``) and the resident set
    on entry (``start``), in bytes."""

    bytes: int = 0
    start: int = 0


@contextlib.contextmanager
def rss_growth() -> Iterator[RssGrowth]:
    """Measure how far the process's peak resident set (VmHWM) rises above its resident set on
    entry (Linux: ``/proc/self/clear_refs`` resets VmHWM to the current RSS)."""
    result = RssGrowth()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _status_kb("VmRSS")
    result.start = before * 1024
    try:
        yield result
    finally:
        result.bytes = (_status_kb("VmHWM") - before) * 1024
