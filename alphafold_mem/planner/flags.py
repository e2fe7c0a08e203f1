"""The command-line options that bind a memory policy: :func:`predict_flags` (``alphafold-mem
predict``) and :func:`train_flags` (``alphafold-mem train``), as ``memory-plan`` prints them with its
recommendation and as the advice on the largest complex that fits (:mod:`.largest`) gives them."""

from __future__ import annotations

import dataclasses

from ..memory.policy import preset

__all__ = ["predict_flags", "train_flags"]


def _flag_value(value) -> str:
    return repr(value).replace(" ", "") if isinstance(value, tuple) else str(value)


def _closest_preset(policy, names, skip) -> tuple[str, dict]:
    """The preset of ``names`` (the first on a tie) from which ``policy`` differs in the fewest fields
    outside ``skip``, and those fields with ``policy``'s values."""
    best = None
    for name in names:
        base = preset(name)
        diffs = {
            f.name: getattr(policy, f.name)
            for f in dataclasses.fields(policy)
            if f.name not in skip and getattr(policy, f.name) != getattr(base, f.name)
        }
        if best is None or len(diffs) < len(best[1]):
            best = (name, diffs)
    return best


def predict_flags(policy) -> str:
    """The ``alphafold-mem predict`` options that bind ``policy`` (a concrete inference
    :class:`~alphafold_mem.MemoryPolicy`): ``--low-memory`` or ``--memory-policy reference``, whichever
    leaves fewer fields to set, ``--chunk-size``, ``--precision`` and ``--memory-set FIELD=VALUE`` for
    the rest. ``max_memory`` is not a field of the run's policy and is left out."""
    name, diffs = _closest_preset(policy, ("low_memory_inference", "reference"), {"precision", "max_memory"})
    flags = ["--low-memory"] if name == "low_memory_inference" else ["--memory-policy", "reference"]
    if name == "low_memory_inference" and isinstance(diffs.get("chunk_size"), int):
        flags += ["--chunk-size", str(diffs.pop("chunk_size"))]
    if policy.precision != preset("reference").precision:
        flags += ["--precision", policy.precision]
    for field, value in diffs.items():
        flags += ["--memory-set", f"{field}={_flag_value(value)}"]
    return " ".join(flags)


def train_flags(policy) -> str:
    """The ``alphafold-mem train`` options that bind ``policy``: ``--memory-policy`` with the preset
    (``training`` or ``reference``) that leaves fewer fields to set and ``--memory-set FIELD=VALUE``."""
    name, diffs = _closest_preset(policy, ("training", "reference"), {"max_memory"})
    return " ".join(
        ["--memory-policy", name] + [w for f, v in diffs.items() for w in ("--memory-set", f"{f}={_flag_value(v)}")]
    )
