"""Alignment text written by the search: A3M rows relative to the query and the Stockholm form of the
same rows.

* :func:`stockholm_to_a3m_rows` turns an alignment whose first row is the query (jackhmmer's ``-A``
  output) into A3M rows as AF2 ``parsers.convert_stockholm_to_a3m`` does: the query's residue
  columns are match columns (upper case, ``-`` for a deletion), residues in other columns are
  insertions (lower case), padding is dropped.
* :func:`write_a3m` writes rows (query first); :func:`write_stockholm` writes the same rows as a
  Stockholm 1.0 alignment (insertions expanded into ``.``-padded insert columns, ``#=GS <id> DE``
  descriptions, ``#=GC RF`` marking the query columns), which :func:`alphafold_mem.data.parse_msa`
  reads back to the same MSA and deletion matrix.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..io import atomic_write

__all__ = ["stockholm_to_a3m_rows", "write_a3m", "write_stockholm"]


def stockholm_to_a3m_rows(rows: Sequence[str]) -> list[str]:
    """A3M rows from equal-length aligned rows whose first is the query (``-``/``.`` are gaps)."""
    if not rows:
        return []
    match = [c not in "-." for c in rows[0]]
    out = []
    for row in rows:
        chars = []
        for c, is_match in zip(row, match):
            if is_match:
                chars.append("-" if c in "-." else c.upper())
            elif c not in "-.":
                chars.append(c.lower())
        out.append("".join(chars))
    return out


def _safe(text: str) -> str:
    return " ".join(str(text).split())


def write_a3m(path, names: Sequence[str], rows: Sequence[str]) -> None:
    """Write A3M records ``>name`` / row (atomically)."""
    with atomic_write(path) as tmp, open(tmp, "w") as fh:
        for name, row in zip(names, rows):
            fh.write(f">{_safe(name)}\n{row}\n")


_INSERT = re.compile(r"[a-z]+")


def write_stockholm(path, names: Sequence[str], rows: Sequence[str], title: str = "") -> None:
    """Write A3M ``rows`` (query first) as a Stockholm 1.0 alignment (atomically).

    Row ids are the first word of each name (made unique with ``_<k>``); the rest of the name
    becomes the ``#=GS DE`` line.
    """
    if not rows:
        raise ValueError("no rows to write")
    split = [_split_a3m(r) for r in rows]  # per row: inserts before each match column (+ after the last)
    n_match = len(split[0][1])
    widths = [max(len(s[0][j]) for s in split) for j in range(n_match + 1)]
    ids, seen = [], {}
    for name in names:
        base = re.sub(r"\s", "_", _safe(name).split(" ", 1)[0] or "seq")
        k = seen.get(base, 0)
        seen[base] = k + 1
        ids.append(base if k == 0 else f"{base}_{k + 1}")
    width = max(len(i) for i in [*ids, "#=GC RF"]) + 2  # a short query-only id still leaves a space
    with atomic_write(path) as tmp, open(tmp, "w") as fh:
        fh.write("# STOCKHOLM 1.0\n")
        if title:
            fh.write(f"#=GF ID {_safe(title)}\n")
        fh.write("\n")
        for rid, name in zip(ids, names):
            desc = _safe(name).split(" ", 1)[1] if " " in _safe(name) else ""
            if desc:
                fh.write(f"#=GS {rid.ljust(width)} DE {desc}\n")
        fh.write("\n")
        for rid, (inserts, matches) in zip(ids, split):
            parts = []
            for j in range(n_match + 1):
                parts.append(inserts[j].ljust(widths[j], "."))
                if j < n_match:
                    parts.append(matches[j])
            fh.write(f"{rid.ljust(width)}{''.join(parts)}\n")
        rf = "".join("." * widths[j] + ("x" if j < n_match else "") for j in range(n_match + 1))
        fh.write(f"{'#=GC RF'.ljust(width)}{rf}\n//\n")


def _split_a3m(row: str) -> tuple[list[str], str]:
    inserts, matches, current = [], [], []
    for c in row:
        if c.islower():
            current.append(c)
        else:
            inserts.append("".join(current))
            current = []
            matches.append(c)
    inserts.append("".join(current))
    return inserts, "".join(matches)
