"""Packages whose public names load on first use (PEP 562 module ``__getattr__``): importing such a
package, or a light module inside it, loads none of its heavy submodules (torch, numpy, the model),
so that the command line can build its parser in a fraction of a second."""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each public name in ``names`` (name -> the relative
    module that defines it, e.g. ``".detect"``) is imported from that module when first read, then kept
    in the package's namespace.

    Raises (from ``__getattr__``):
        AttributeError: a name the package does not export.
    """

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(names[name], package)
        value = getattr(module, name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(names))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
