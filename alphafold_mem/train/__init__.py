"""Training: the Lightning wrapper, data module, AF2 schedule, EMA and checkpoint files.

Public entry points: :class:`AlphaFoldLightning`, :class:`AF2DataModule`, :class:`TrainConfig`,
:func:`build_trainer`, :func:`train` (what ``alphafold-mem train`` runs), :func:`load_model` /
:func:`export_weights` (inference weights).
"""

from .checkpoint import AtomicCheckpointIO, check_config_compatible, export_weights, load_model, load_weights
from .config import DEFAULT_HELD_OUT, TrainConfig
from .data_module import AF2DataModule
from .ema import EMA
from .lightning_module import AlphaFoldLightning, NonFiniteLossError, evaluate_lddt
from .runner import build_trainer, train

__all__ = [
    "AlphaFoldLightning",
    "AF2DataModule",
    "TrainConfig",
    "DEFAULT_HELD_OUT",
    "EMA",
    "AtomicCheckpointIO",
    "check_config_compatible",
    "export_weights",
    "load_model",
    "load_weights",
    "NonFiniteLossError",
    "evaluate_lddt",
    "build_trainer",
    "train",
]
