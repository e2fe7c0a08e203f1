"""alphafold_mem: AlphaFold2 (monomer) in PyTorch, built around measured memory savings.

Public API: :class:`AlphaFold`, :func:`model_config`, :func:`predict`, :class:`MemoryPolicy`,
:func:`apply_memory_policy`.
"""

from .config import ModelConfig, model_config
from .memory import MemoryPolicy, apply_memory_policy
from .model import AlphaFold
from .inference import predict

__version__ = "0.1.0"

__all__ = ["AlphaFold", "MemoryPolicy", "ModelConfig", "apply_memory_policy", "model_config", "predict",
           "__version__"]
