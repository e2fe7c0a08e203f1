"""Counting what the training data pipeline left out, by reason, with examples.

Entries are dicts with ``reason`` (a short fixed phrase, e.g. ``"unreadable structure"``), ``item``
(what was dropped: a file, chain or folder name) and ``detail`` (the specific message). The chain
index (:mod:`.dataset`) records them in its ``skipped`` list; :func:`counted_lines` turns any list of
them into one line per reason, the form in which ``alphafold-mem train`` prints them at start-up and
in which an index with nothing usable explains itself.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["REASONS", "drop", "reason_of", "counted_lines"]

#: The fixed reasons (other code may add its own phrases).
REASONS = (
    "unreadable structure",
    "protein chain without modelled atoms",
    "duplicate chain",
    "alignment folder without a structure",
    "alignment query differs from the chain",
    "missing index fields",
    "structure file not found",
    "alignment folder not found",
    "resolution above the limit",
    "too short",
    "one residue type dominates",
    "too few resolved residues",
)


def drop(reason: str, item: str, detail: str = "", **extra) -> dict:
    """One entry (see the module docstring)."""
    return {"reason": reason, "item": str(item), "detail": detail, **extra}


def reason_of(entry: dict) -> str:
    """The entry's reason; entries of indexes written before reasons were recorded get one from
    their fields (``error`` text, ``chain``)."""
    if entry.get("reason"):
        return entry["reason"]
    error = str(entry.get("error", ""))
    if error.startswith("duplicate"):
        return "duplicate chain"
    return "unreadable structure" if "chain" not in entry else "other"


def _item(entry: dict) -> str:
    if entry.get("item"):
        return entry["item"]
    name = entry.get("structure") or entry.get("alignment_dir") or "?"
    return f"{name}:{entry['chain']}" if entry.get("chain") else str(name)


def counted_lines(entries: Iterable[dict], examples: int = 3, prefix: str = "") -> list[str]:
    """``"<prefix><reason>: <count> (<item>: <detail>, ...)"`` per reason, in order of first
    appearance, with at most ``examples`` examples each."""
    groups: dict[str, list[dict]] = {}
    for entry in entries:
        groups.setdefault(reason_of(entry), []).append(entry)
    lines = []
    for reason, group in groups.items():
        shown = []
        for entry in group[:examples]:
            detail = entry.get("detail") or entry.get("error") or ""
            detail = " ".join(str(detail).split())
            shown.append(f"{_item(entry)}" + (f": {detail[:120]}" if detail else ""))
        more = f", and {len(group) - examples} more" if len(group) > examples else ""
        lines.append(f"{prefix}{reason}: {len(group)} ({'; '.join(shown)}{more})")
    return lines
