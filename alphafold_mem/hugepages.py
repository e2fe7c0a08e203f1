"""Large CPU tensors on transparent huge pages: PyTorch's own switch, ``THP_MEM_ALLOC_ENABLE=1``, set
before torch makes its first allocation (c10 reads it once per process, so it cannot be turned on
later). With it, c10's CPU allocator advises the kernel to back every allocation of 2 MiB and more
with 2 MiB pages (``madvise(MADV_HUGEPAGE)``): a tensor freshly handed out by the system costs one
page fault per 2 MiB instead of one per 4 KiB.

Why: a CPU training step frees and reallocates activations of many sizes, and every byte the
allocator takes back from the system is faulted in again (:mod:`alphafold_mem.memory.host`); the
page faults and resident-set growth with and without the switch are what ``scripts/compare_openfold.py
--mode training`` prints (docs/parity.md, "OpenFold side by side: time and memory").

Nothing here runs on import: importing :mod:`alphafold_mem` leaves the environment as it is. The
command line (:func:`alphafold_mem.cli.main`) and the workers that measure host memory call
:func:`request_huge_pages` first thing, before the process's first CPU allocation (importing torch
and :mod:`alphafold_mem` allocates none; c10 reads the switch at the first). It does nothing when
the user set ``THP_MEM_ALLOC_ENABLE`` (their value stands) or when ``ALPHAFOLD_MEM_MALLOC=default``
asks for plain allocators; children started afterwards inherit the switch.
:func:`huge_pages_status` says what holds in the running process. This module imports nothing but
the standard library (:mod:`alphafold_mem.memory.host` also loads it by file path).
"""

from __future__ import annotations

import os

__all__ = ["OPT_OUT_ENV", "THP_ENV", "environment_as_found", "huge_pages_status", "request_huge_pages"]

#: PyTorch's switch (c10/core/impl/alloc_cpu.cpp): "1" advises huge pages for CPU allocations >= 2 MiB.
THP_ENV = "THP_MEM_ALLOC_ENABLE"
#: ``ALPHAFOLD_MEM_MALLOC=default`` asks for plain allocators: no huge pages here, no glibc remedy in
#: :mod:`alphafold_mem.memory.host` (which takes the name from here).
OPT_OUT_ENV = "ALPHAFOLD_MEM_MALLOC"
_SYSFS = "/sys/kernel/mm/transparent_hugepage/enabled"
_requested: str = "not requested"


def request_huge_pages() -> str:
    """Set ``THP_MEM_ALLOC_ENABLE=1`` for this process and its children unless the user decided
    otherwise (module docstring). Call it before the process's first CPU tensor: c10 reads the
    switch once, at its first allocation; later, the switch reaches only children
    (:func:`huge_pages_status` then says ``off``). Returns what was done, one line."""
    global _requested
    if THP_ENV in os.environ:
        if not _requested.startswith("requested"):
            _requested = f"left as set: {THP_ENV}={os.environ[THP_ENV]}"
    elif os.environ.get(OPT_OUT_ENV, "").lower() == "default":
        _requested = f"not requested: {OPT_OUT_ENV}=default"
    else:
        os.environ[THP_ENV] = "1"
        _requested = f"requested: {THP_ENV}=1"
    return _requested


def environment_as_found(env: dict) -> dict:
    """``env`` without the switch :func:`request_huge_pages` added to this process's environment
    (the user's own value stays): for a child that must run as the user's environment left it, e.g.
    the other side of a comparison."""
    if _requested.startswith("requested"):
        return {k: v for k, v in env.items() if k != THP_ENV}
    return dict(env)


def _kernel_mode() -> str:
    """The kernel's transparent-huge-page mode (``always``, ``madvise``, ``never``) or ``unknown``."""
    try:
        text = open(_SYSFS).read()
    except OSError:
        return "unknown"
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else "unknown"


def _advised(address: int) -> bool:
    """Whether the mapping holding ``address`` carries ``MADV_HUGEPAGE`` (VmFlags ``hg`` in smaps)."""
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return "hg" in line.split()[1:]
    return False


def huge_pages_status() -> str:
    """Whether torch's large CPU tensors get huge pages in this process, one line: a 4 MiB tensor is
    allocated and its mapping's flags are read from ``/proc/self/smaps`` (Linux; elsewhere
    ``"unknown"``)."""
    import torch  # standard library only at import: this module must load before torch

    mode = _kernel_mode()
    if mode == "never":
        return f"off: the kernel's transparent huge pages are 'never' ({_requested})"
    x = torch.empty(4 << 20, dtype=torch.uint8)
    try:
        advised = _advised(x.data_ptr())
    except OSError:
        return f"unknown: no /proc/self/smaps ({_requested})"
    late = (
        "; requested after this process's first CPU allocation, where c10 had read the switch already"
        if not advised and _requested.startswith("requested")
        else ""
    )
    return (
        f"{'on' if advised else 'off'}: large CPU tensors {'' if advised else 'not '}advised MADV_HUGEPAGE "
        f"(kernel mode {mode}; {_requested}{late})"
    )
