"""Model weights in every format the project reads or writes.

* :mod:`.detect`: recognise a weights file by content and load it (:func:`load_weights`);
* :mod:`.af2_npz`: AlphaFold2's Haiku ``params_model_*.npz`` names, load and bit-identical export;
* :mod:`.openfold`: OpenFold state dicts (``.pt``);
* :mod:`.checkpoints`: our own plain checkpoint format.
"""

from .af2_npz import (ParameterLoadError, af2_entries, export_af2_params, infer_config, load_af2_params,
                      normalize_state_dict_keys, openfold_state_dict, load_openfold_checkpoint)
from .detect import (DEFAULT_WEIGHTS, FORMATS, LoadedWeights, WeightsError, default_weights_path, detect_format,
                     load_weights, save_checkpoint)

__all__ = ["DEFAULT_WEIGHTS", "FORMATS", "LoadedWeights", "ParameterLoadError", "WeightsError", "af2_entries",
           "default_weights_path", "detect_format", "export_af2_params", "infer_config", "load_af2_params",
           "load_openfold_checkpoint", "load_weights", "normalize_state_dict_keys", "openfold_state_dict",
           "save_checkpoint"]
