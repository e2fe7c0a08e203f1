"""Subcommands of the ``alphafold-mem`` CLI: each module registers its own subparser here."""

from __future__ import annotations

import argparse


def register_all(sub: argparse._SubParsersAction) -> None:
    """Add every subcommand to the parser."""
