"""``--malloc {release,default}`` of ``train`` and ``predict``: glibc's allocator setting for the run
(:mod:`alphafold_mem.memory.host`)."""

from __future__ import annotations

import argparse
import logging

from ..memory.host import apply_malloc_remedy

__all__ = ["MALLOC_HELP", "add_malloc_option", "apply_malloc_option"]

MALLOC_HELP = ("host memory: 'release' (default) makes glibc return freed blocks of 64 KiB and more at once, so the "
               "resident set follows the live tensors instead of keeping the heap at its high-water mark, at a cost "
               "in time (fresh pages are faulted in again; README, 'Training memory a machine sees'); 'default' "
               "leaves glibc as it is (as does ALPHAFOLD_MEM_MALLOC=default)")


def add_malloc_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--malloc {release,default}`` (default ``release``) to a subcommand."""
    parser.add_argument("--malloc", choices=("release", "default"), default="release", help=MALLOC_HELP)


def apply_malloc_option(args: argparse.Namespace) -> None:
    """Apply :func:`~alphafold_mem.memory.host.apply_malloc_remedy` when ``args.malloc == "release"``."""
    if getattr(args, "malloc", None) == "release":
        logging.getLogger("alphafold_mem").info("glibc allocator: %s", apply_malloc_remedy())
