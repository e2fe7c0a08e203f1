"""JSON outputs: the per-target scores file and the PAE file in the AlphaFold DB layout."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...io import atomic_write

__all__ = ["pae_json", "write_json"]


def pae_json(pae: np.ndarray, max_pae: float) -> list[dict[str, Any]]:
    """The AlphaFold DB (v4) PAE layout: ``[{"predicted_aligned_error": [[...]] (Å, row = aligned
    residue, column = scored residue, 2 decimals), "max_predicted_aligned_error": float}]``."""
    pae = np.round(np.asarray(pae, dtype=np.float64), 2)
    return [{"predicted_aligned_error": pae.tolist(), "max_predicted_aligned_error": round(float(max_pae), 2)}]


def _default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path, data: Any, indent: int | None = 1, flat: bool = False) -> None:
    """Write ``data`` as JSON (atomically); numpy scalars and arrays are converted.

    ``flat=True`` (a dict): one top-level key per line, each value on that line (keeps long
    per-residue lists readable).
    """
    if flat and isinstance(data, dict):
        body = ",\n".join(f" {json.dumps(str(k))}: {json.dumps(v, default=_default)}" for k, v in data.items())
        text = "{\n" + body + "\n}"
    else:
        text = json.dumps(data, indent=indent, default=_default)
    with atomic_write(path) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text + "\n")
