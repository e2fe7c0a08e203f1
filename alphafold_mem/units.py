"""Memory sizes for people: one unit, the gibibyte (GiB, 2^30 bytes), in every line the package prints
and every page it writes; JSON holds bytes. Sizes given on the command line may use either family of
units (``80GiB``, ``80GB`` = 80 * 10^9 bytes, ``512MiB``); what is printed back is in GiB.

Imports nothing heavy (the command line's parsers use it before torch is loaded).
"""

from __future__ import annotations

import re

#: Bytes in one GiB.
GIB = 2**30

_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)(i?)[bB]?\s*")


def gib_value(n: float, digits: int = 2) -> str:
    """``n`` bytes as a number of GiB without the unit: ``digits`` decimals from 1 GiB up (``"80.00"``),
    three significant digits below (``"0.0244"``, ``"0.00488"``), so a small size keeps its value."""
    value = float(n) / GIB
    return f"{value:.{digits}f}" if value == 0 or abs(value) >= 1 else f"{value:.3g}"


def format_gib(n: float, digits: int = 2) -> str:
    """``n`` bytes with its unit, e.g. ``"80.00 GiB"``, ``"0.0233 GiB"`` (:func:`gib_value`)."""
    return f"{gib_value(n, digits)} GiB"


def parse_size(text: str) -> int:
    """A memory size in bytes: ``"80GiB"``, ``"40 GiB"``, ``"512MiB"`` (binary, 2^10 steps), ``"80GB"``,
    ``"512MB"`` (decimal, 10^3 steps), ``"1e9"`` or ``"1000"`` (bytes).

    Raises:
        ValueError: not a size, or not a positive one (the message gives examples).
    """
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(f"cannot read a memory size from {text!r} (examples: 40GiB, 512MiB, 80GB)")
    value, unit, binary = float(m.group(1)), m.group(2).upper(), m.group(3)
    power = " KMGT".index(unit) if unit else 0
    size = int(value * (1024 if binary else 1000) ** power)
    if size <= 0:
        raise ValueError(f"a memory size must be positive, got {text!r} (examples: 40GiB, 512MiB, 80GB)")
    return size


__all__ = ["GIB", "format_gib", "gib_value", "parse_size"]
