"""Record names safe for file names: :func:`sanitize_name` reduces a FASTA/A3M header to its first
token in ``[A-Za-z0-9._-]`` (at most 64 characters) and :func:`unique_name` numbers repeats
(``name``, ``name_2``, ``name_3``...), within one file and across a prediction run.
"""

from __future__ import annotations

import re

__all__ = ["sanitize_name", "unique_name", "NAME_MAX"]

NAME_MAX = 64


def unique_name(name: str, seen: dict[str, int], max_len: int | None = None) -> str:
    """``name`` if ``seen`` does not hold it yet, else ``<name>_<k>`` with the next free k >= 2 (the
    stem cut to ``max_len - 4`` characters when ``max_len`` is given). Records the result in ``seen``
    (name -> last number used)."""
    if name in seen:
        stem = name if max_len is None else name[: max_len - 4]
        seen[name] += 1
        new = f"{stem}_{seen[name]}"
        while new in seen:
            seen[name] += 1
            new = f"{stem}_{seen[name]}"
        name = new
    seen.setdefault(name, 1)
    return name


def sanitize_name(title: str, fallback: str) -> str:
    """First whitespace token of a header, reduced to ``[A-Za-z0-9._-]`` (others -> ``_``), at most
    64 characters; ``fallback`` when nothing is left."""
    token = title.split(maxsplit=1)[0] if title.strip() else ""
    token = re.sub(r"[^A-Za-z0-9._-]", "_", token)[:NAME_MAX].strip("._")
    return token or fallback
