"""The ``alphafold-mem`` command line: :mod:`.main` builds the parser; one module per subcommand."""

from .main import main

__all__ = ["main"]
