"""alphafold_mem: AlphaFold2 (monomer) in PyTorch, built around measured memory savings.

Public API: :class:`AlphaFold`, :func:`model_config`, :func:`predict`, :class:`MemoryPolicy`,
:func:`apply_memory_policy`.

Layers, each importing only from those below it: ``config``, ``precision``, ``geometry`` and
``memory`` (primitives); ``model``; ``planner`` (builds models to predict their memory), ``weights``,
``data``, ``losses``; ``train`` and ``predict``; ``cli``.
"""

from .hugepages import request_huge_pages

request_huge_pages()  # before torch is imported: torch reads its switch once (alphafold_mem.hugepages)

from .config import ModelConfig, model_config  # noqa: E402
from .memory import MemoryPolicy  # noqa: E402
from .model import AlphaFold  # noqa: E402
from .planner import apply_memory_policy  # noqa: E402
from .predict import predict  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = ["AlphaFold", "MemoryPolicy", "ModelConfig", "apply_memory_policy", "model_config", "predict", "__version__"]
