"""Model weights in every format the project reads or writes.

* :mod:`.detect`: recognise a weights file by content and load it (:func:`load_weights`);
* :mod:`.af2_npz`: AlphaFold2's Haiku ``params_model_*.npz`` names, load and bit-identical export;
* :mod:`.openfold`: OpenFold state dicts (``.pt``);
* :mod:`.checkpoints`: our own plain checkpoint format;
* :mod:`.keys`: state-dict key normalisation and the key-mismatch message the strict loaders share.

The public names below load on first use (:mod:`alphafold_mem.lazy`), so that ``alphafold_mem.weights.fetch``
loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # the names below, for type checkers and documentation tools
    from .af2_npz import af2_entries, export_af2_params, infer_config, load_af2_params
    from .checkpoints import save_checkpoint, write_checkpoint
    from .detect import (
        DEFAULT_WEIGHTS,
        FORMATS,
        LoadedWeights,
        WeightsError,
        default_weights_path,
        detect_format,
        load_weights,
    )
    from .keys import ParameterLoadError, normalize_state_dict_keys
    from .openfold import load_openfold_checkpoint, openfold_state_dict

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "af2_entries": ".af2_npz",
        "export_af2_params": ".af2_npz",
        "infer_config": ".af2_npz",
        "load_af2_params": ".af2_npz",
        "save_checkpoint": ".checkpoints",
        "write_checkpoint": ".checkpoints",
        "DEFAULT_WEIGHTS": ".detect",
        "FORMATS": ".detect",
        "LoadedWeights": ".detect",
        "WeightsError": ".detect",
        "default_weights_path": ".detect",
        "detect_format": ".detect",
        "load_weights": ".detect",
        "ParameterLoadError": ".keys",
        "normalize_state_dict_keys": ".keys",
        "load_openfold_checkpoint": ".openfold",
        "openfold_state_dict": ".openfold",
    },
)

__all__ = [
    "DEFAULT_WEIGHTS",
    "FORMATS",
    "LoadedWeights",
    "ParameterLoadError",
    "WeightsError",
    "af2_entries",
    "default_weights_path",
    "detect_format",
    "export_af2_params",
    "infer_config",
    "load_af2_params",
    "load_openfold_checkpoint",
    "load_weights",
    "normalize_state_dict_keys",
    "openfold_state_dict",
    "save_checkpoint",
    "write_checkpoint",
]
