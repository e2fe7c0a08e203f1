"""Fine-tuning from given weights (``alphafold-mem train --init-weights FILE``).

The file may be anything :func:`alphafold_mem.weights.load_weights` reads, recognised by content:
AF2 ``params_model_*.npz``, an OpenFold ``.pt`` state dict or checkpoint, our inference checkpoints
(``data/demo_weights/demo.ckpt``, :func:`alphafold_mem.train.export_weights`) and Lightning training
checkpoints (their EMA weights). The weights are loaded into the LightningModule's model and the EMA
copy is reset to them, so evaluation at step 0 uses the given weights, not the random
initialisation. Optimiser, schedule and step count start fresh (use ``--resume`` to continue a run).
"""

from __future__ import annotations

import os
from typing import Optional

from ..config import ModelConfig
from ..weights import load_weights
from ..weights.detect import detect_format
from .checkpoint import check_config_compatible
from .ema import EMA

__all__ = ["weights_config", "init_from_weights"]


def weights_config(path: str | os.PathLike, preset: Optional[str] = None) -> ModelConfig:
    """The model config a weights file describes (AF2/OpenFold files: sizes from the shapes, the rest
    from ``preset``, default as in :func:`alphafold_mem.weights.load_weights`).

    Raises:
        alphafold_mem.weights.WeightsError: unreadable or unrecognised file.
    """
    return load_weights(path, preset if preset is not None and _npz_or_openfold(path) else None).config


def _npz_or_openfold(path) -> bool:

    return detect_format(path) in ("af2-npz", "openfold")


def init_from_weights(module, path: str | os.PathLike) -> str:
    """Load the weights of ``path`` into ``module.model`` (an :class:`AlphaFoldLightning`) and restart
    its EMA from them. Returns a one-line description (format, details).

    Raises:
        alphafold_mem.weights.WeightsError: unreadable or unrecognised file.
        ValueError: the file's architecture differs from ``module.model_config`` (one sentence naming
            the differing fields; loss weights, data sizes and recycling may differ).
    """
    preset = module.model_config if _npz_or_openfold(path) else None  # the file must have the module's layers
    loaded = load_weights(path, preset)
    check_config_compatible(loaded.config, module.model_config, what="--init-weights file")
    module.model.load_state_dict(loaded.model.state_dict(), strict=True)
    module.ema = EMA(module.model, module.train_config.ema_decay)
    return f"{loaded.format} weights from {loaded.path}" + (f" ({loaded.details})" if loaded.details else "")
