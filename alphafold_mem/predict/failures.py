"""One line for a target that failed: what went wrong and what to do, naming its file and record."""

from __future__ import annotations

import torch

from ..data import InputError
from ..io import os_error_line
from .errors import PredictError
from .preflight import DoesNotFit
from .target import Target

__all__ = ["failure_message"]


def failure_message(t: Target, exc: BaseException) -> str:
    """The error line of target ``t`` failed by ``exc`` (out of memory, a bad feature value, a write
    error, a pre-flight that does not fit...)."""
    if isinstance(exc, DoesNotFit):
        return f"{t.source}: record '{t.name}': does not fit: {exc}"
    cpu_oom = isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or cpu_oom:
        return (
            f"{t.source}: record '{t.name}': out of memory at {len(t.sequence)} residues "
            f"(MSA depth {t.msa_depth}); try --low-memory or --chunk-size, or another device"
        )
    if isinstance(exc, InputError):
        return str(exc) if exc.record else f"{exc} (record '{t.name}')"
    if isinstance(exc, PredictError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{t.source}: record '{t.name}': {os_error_line(exc, 'writing its outputs')}"
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    return f"{t.source}: record '{t.name}': {type(exc).__name__}: {text}"
