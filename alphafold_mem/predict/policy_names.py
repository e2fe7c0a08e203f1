"""Memory policies named for people in a prediction run's lines and outputs."""

from __future__ import annotations

import dataclasses

from ..memory.policy import MemoryPolicy

__all__ = ["chunking", "policy_name"]


def policy_name(policy: MemoryPolicy) -> str:
    """The policy's name for people, without its precision (shown beside it): a preset's name, or
    ``low_memory_inference`` with the fields it changes when that is shorter than the fields that
    differ from the reference."""
    plain = policy.replace(precision=MemoryPolicy().precision)
    low = MemoryPolicy.low_memory_inference()
    diffs = [
        f"{f.name}={getattr(plain, f.name)}"
        for f in dataclasses.fields(plain)
        if getattr(plain, f.name) != getattr(low, f.name)
    ]
    return (
        f"low_memory_inference with {','.join(diffs)}"
        if diffs and len(diffs) < plain.name.count("=") + 1
        else plain.name
    )


def chunking(policy: MemoryPolicy) -> str:
    """The chunking a concrete policy runs with, for people: ``"chunk size 16"`` or ``"no chunking"``."""
    return "no chunking" if policy.chunk_size is None else f"chunk size {policy.chunk_size}"
