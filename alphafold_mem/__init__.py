"""alphafold_mem: AlphaFold2 (monomer) in PyTorch, built around measured memory savings.

Public API: :class:`AlphaFold`, :func:`model_config`, :func:`predict`, :class:`MemoryPolicy`,
:class:`AutoPolicy` and :func:`bind` (the one way to bind a policy, and device sharding, to a model).

Layers, each importing only from those below it: ``config``, ``precision``, ``geometry`` and
``memory`` (primitives); ``distributed`` and ``binding``; ``model``; ``planner`` (builds models to
predict their memory), ``weights``, ``data``, ``losses``; ``train`` and ``predict``; ``cli``.
"""

from .binding import bind
from .config import ModelConfig, model_config
from .memory import AutoPolicy, MemoryPolicy
from .model import AlphaFold
from .predict import predict
from .version import __version__

__all__ = ["AlphaFold", "AutoPolicy", "MemoryPolicy", "ModelConfig", "bind", "model_config", "predict", "__version__"]
