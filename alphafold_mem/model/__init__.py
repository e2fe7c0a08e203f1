"""The AlphaFold2 network, one paper concept per module."""

from .alphafold import AlphaFold

__all__ = ["AlphaFold"]
