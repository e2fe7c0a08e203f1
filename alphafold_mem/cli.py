"""The ``alphafold-mem`` command line. Subcommands are registered in ``_SUBCOMMANDS``."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alphafold-mem",
        description="AlphaFold2 (monomer) training and prediction with measured memory savings.")
    parser.add_argument("--version", action="version", version=f"alphafold-mem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from .commands import register_all
    register_all(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
