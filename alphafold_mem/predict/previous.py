"""What an earlier run into the same output directory left: its JSON files read back (``timings.json``
of skipped targets, the mean pLDDT of a finished target's scores)."""

from __future__ import annotations

import json
from typing import Optional

__all__ = ["previous_mean_plddt", "read_json"]


def read_json(path) -> object:
    """The JSON content of ``path``, or ``None`` when it is missing, unreadable or ``None``."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError, TypeError):
        return None


def previous_mean_plddt(path: str) -> Optional[float]:
    """The ``mean_plddt`` of the scores JSON ``path``, or ``None`` when it has none."""
    data = read_json(path)
    try:
        value = data.get("mean_plddt")
        return float(value) if value is not None else None
    except (ValueError, AttributeError, TypeError):
        return None
