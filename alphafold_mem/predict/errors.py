"""The run-level error of :func:`alphafold_mem.predict` (kept apart so that every predict module can
raise it without importing the others)."""

from __future__ import annotations

__all__ = ["PredictError"]


class PredictError(ValueError):
    """A problem with the run as a whole (options, weights, no usable input): one line."""
