"""Subcommands of the ``alphafold-mem`` CLI: each module registers its own subparser here."""

from __future__ import annotations

import argparse


def register_all(sub: argparse._SubParsersAction) -> None:
    """Add every subcommand to the parser."""
    from . import predict_cmd; predict_cmd.register(sub)  # noqa: E702 (issue 5)
    from . import train_cmd; train_cmd.register(sub)  # noqa: E702 (issue 4)
    from . import memory_cmd; memory_cmd.register(sub)  # noqa: E702 (issue 6)
