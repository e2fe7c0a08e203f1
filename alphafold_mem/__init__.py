"""alphafold_mem: AlphaFold2 (monomer) in PyTorch, built around measured memory savings.

Public API: :class:`AlphaFold`, :func:`model_config`, :func:`predict`, :class:`MemoryPolicy`,
:func:`apply_memory_policy`.

Layers, each importing only from those below it: ``config``, ``precision``, ``geometry`` and
``memory`` (primitives); ``model``; ``planner`` (builds models to predict their memory), ``weights``,
``data``, ``losses``; ``train`` and ``predict``; ``cli``.
"""

from .config import ModelConfig, model_config
from .memory import MemoryPolicy
from .model import AlphaFold
from .planner import apply_memory_policy
from .predict import predict
from .version import __version__

__all__ = ["AlphaFold", "MemoryPolicy", "ModelConfig", "apply_memory_policy", "model_config", "predict", "__version__"]
