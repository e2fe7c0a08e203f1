"""Subcommands of the ``alphafold-mem`` CLI (each registers itself in :func:`register_all`)."""

from __future__ import annotations

import argparse


def register_all(sub: argparse._SubParsersAction) -> None:
    """Add every available subcommand to the parser."""
    from . import forward_cmd
    forward_cmd.register(sub)
