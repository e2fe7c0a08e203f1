"""alphafold_mem: AlphaFold2 (monomer) in PyTorch, built around measured memory savings.

Public API: :class:`AlphaFold`, :func:`model_config`, :func:`predict`, :class:`MemoryPolicy`,
:class:`AutoPolicy` and :func:`bind` (the one way to bind a policy, and device sharding, to a model).

Layers, each importing only from those below it: ``config``, ``precision``, ``geometry`` and
``memory`` (primitives); ``distributed`` and ``binding``; ``model``; ``planner`` (builds models to
predict their memory), ``weights``, ``data``, ``losses``; ``train`` and ``predict``; ``cli``.

The public names are loaded when first used (PEP 562), so that ``import alphafold_mem`` -- and the
command line's ``--help``, ``--version`` and option checks -- load no torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

from .version import __version__

if TYPE_CHECKING:  # the names below, for type checkers and documentation tools
    from .binding import bind
    from .config import ModelConfig, model_config
    from .memory import AutoPolicy, MemoryPolicy
    from .model import AlphaFold
    from .predict import predict

#: public name -> the module that defines it
_PUBLIC = {
    "AlphaFold": ".model",
    "AutoPolicy": ".memory",
    "MemoryPolicy": ".memory",
    "ModelConfig": ".config",
    "bind": ".binding",
    "model_config": ".config",
    "predict": ".predict",
}


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'alphafold_mem' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


class _Package(types.ModuleType):
    """``alphafold_mem.predict`` stays the function :func:`predict` once the subpackage of the same name
    is imported (the import system sets a subpackage as an attribute of its parent)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "predict" and isinstance(value, types.ModuleType):
            value = value.predict
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["AlphaFold", "AutoPolicy", "MemoryPolicy", "ModelConfig", "bind", "model_config", "predict", "__version__"]
