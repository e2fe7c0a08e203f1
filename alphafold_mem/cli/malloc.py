"""``--malloc {trim,release,default}`` of ``train`` and ``predict``: glibc's allocator setting for the
run (:mod:`alphafold_mem.memory.host`)."""

from __future__ import annotations

import argparse
import logging

from ..hugepages import huge_pages_status
from .options import MALLOC_SETTINGS

__all__ = ["MALLOC_HELP", "add_malloc_option", "apply_malloc_option"]

MALLOC_HELP = (
    "host memory: 'trim' (default) hands glibc's free pages back to the system once a second "
    "(malloc_trim), so the resident set follows the live tensors instead of the heap's high-water "
    "mark, at about the speed of plain glibc; 'release' makes glibc return every freed block of "
    "64 KiB and more at once (about as low a resident set, ~1.5x the CPU time of a CPU training step: fresh "
    "pages are faulted in again); 'default' leaves glibc as it is. ALPHAFOLD_MEM_MALLOC=<setting> "
    "sets the default. Independently, large CPU tensors are put on transparent huge pages (fewer page "
    "faults) unless THP_MEM_ALLOC_ENABLE or ALPHAFOLD_MEM_MALLOC=default is set in the environment "
    "(docs/memory.md, 'Long sequences and host memory')"
)


def add_malloc_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--malloc {trim,release,default}`` (default: ``$ALPHAFOLD_MEM_MALLOC``, else ``trim``)."""
    parser.add_argument("--malloc", choices=MALLOC_SETTINGS, default=None, help=MALLOC_HELP)


def apply_malloc_option(args: argparse.Namespace) -> None:
    """Apply :func:`~alphafold_mem.memory.host.apply_malloc_setting` for a command that has
    ``--malloc`` (``args.malloc`` None: the environment's or the default setting)."""
    if hasattr(args, "malloc"):
        from ..memory.host import apply_malloc_setting  # heavy: loads torch; only commands that run a model

        log = logging.getLogger("alphafold_mem")
        log.info("glibc allocator: %s", apply_malloc_setting(args.malloc))
        log.info("huge pages: %s", huge_pages_status())
