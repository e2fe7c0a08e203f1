"""alphafold_mem: AlphaFold2 (monomer) in PyTorch, built around measured memory savings.

Public API: :class:`AlphaFold`, :func:`model_config`.
"""

from .config import ModelConfig, model_config
from .model import AlphaFold

__version__ = "0.1.0"

__all__ = ["AlphaFold", "ModelConfig", "model_config", "__version__"]
