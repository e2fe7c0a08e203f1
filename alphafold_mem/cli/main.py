"""The ``alphafold-mem`` entry point: one parser, one subparser per subcommand module
(:mod:`.predict`, :mod:`.search`, :mod:`.relax`, :mod:`.train`, :mod:`.index`, :mod:`.alignment_db`,
:mod:`.memory_plan`, :mod:`.ablate`); each
module's ``register`` adds its options and sets ``func``, which receives the parsed arguments and
returns the exit status.

First of all, before any CPU tensor exists, :func:`main` sets torch's huge-page switch for this
process and its children (:func:`alphafold_mem.hugepages.request_huge_pages`; importing the package
changes no environment). ``train`` and ``predict`` then set glibc's allocator to return freed memory
(``--malloc trim``, their default, or ``release``: :func:`alphafold_mem.memory.host.apply_malloc_setting`;
``--malloc default`` or ``ALPHAFOLD_MEM_MALLOC=default`` leave glibc as it is).

Building the parser loads no torch (every subcommand module imports its heavy modules when it runs),
so ``--help``, ``--version`` and a rejected option answer in a fraction of a second; options are
checked as they are read (:mod:`.options`), a bad one ending in one ``error:`` line, exit status 2."""

from __future__ import annotations

import argparse
import os
import sys

from ..hugepages import request_huge_pages
from ..version import __version__
from . import ablate, alignment_db, index, memory_plan, predict, relax, search, train, weights
from .malloc import apply_malloc_option
from .options import Parser

SUBCOMMANDS = (predict, search, relax, train, index, alignment_db, memory_plan, ablate, weights)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="alphafold-mem", description="AlphaFold2 (monomer) training and prediction with measured memory savings."
    )
    parser.add_argument("--version", action="version", version=f"alphafold-mem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    request_huge_pages()  # before torch's first CPU allocation: c10 reads the switch once
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line as given (ablate records it)
    if args.command is None:
        parser.print_help()
        return 0
    check = getattr(args, "check", None)  # the subcommand's checks that need nothing heavy loaded
    if check is not None and (status := check(args)):
        return status
    apply_malloc_option(args)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader closed the pipe (`... --json | head`): stop quietly, as
        # a tool killed by SIGPIPE does, and keep the interpreter's exit flush from raising again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # 128 + SIGPIPE, the status a shell reports for such a tool
    return status


if __name__ == "__main__":
    sys.exit(main())
