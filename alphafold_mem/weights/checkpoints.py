"""Our own plain checkpoint format, ``alphafold-mem`` (format_version 1).

A ``torch.save`` mapping ``{"format": "alphafold-mem", "format_version": 1, "config":
ModelConfig.to_dict(), "state_dict": {name: tensor} in :class:`alphafold_mem.AlphaFold` names, **meta}``.
:func:`write_checkpoint` is the one writer of the format (also used by
:func:`alphafold_mem.train.checkpoint.export_weights`); :func:`model_from_state_dict` builds and
strictly loads the model it describes. Files are recognised by content, and may also come from
Lightning or other writers, in :mod:`alphafold_mem.weights.detect`.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import torch

from ..config import ModelConfig
from ..io import atomic_save
from ..model.alphafold import AlphaFold
from .af2_npz import empty_on_cpu
from .keys import ParameterLoadError, key_mismatch, normalize_state_dict_keys

__all__ = ["FORMAT", "FORMAT_VERSION", "model_from_state_dict", "save_checkpoint", "write_checkpoint"]

FORMAT = "alphafold-mem"
FORMAT_VERSION = 1


def write_checkpoint(
    path, config: ModelConfig, state_dict: Mapping[str, torch.Tensor], meta: Optional[Mapping[str, Any]] = None
) -> None:
    """Write ``{"format", "format_version", "config", "state_dict", **meta}`` to ``path`` (tensors
    detached, on CPU; written atomically: :func:`alphafold_mem.io.atomic_write`)."""
    obj = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": config.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        **(meta or {}),
    }
    atomic_save(obj, os.fspath(path))


def save_checkpoint(model: AlphaFold, path, **meta: Any) -> None:
    """Save ``model`` in the plain alphafold-mem format ``{"format", "config", "state_dict", **meta}``
    (written atomically: :func:`alphafold_mem.io.atomic_write`)."""
    write_checkpoint(path, model.config, model.state_dict(), meta)


def model_from_state_dict(config: ModelConfig, sd: Mapping[str, torch.Tensor]) -> AlphaFold:
    """Build an :class:`AlphaFold` for ``config`` and load ``sd`` into it (wrapper prefixes stripped,
    floating tensors as float32); eval mode, CPU.

    Raises:
        ParameterLoadError: a parameter is missing, unexpected, or has another shape than ``config``
            gives it (the message names it and the config's preset).
    """
    sd = normalize_state_dict_keys(sd)
    with torch.device("meta"):
        model = AlphaFold(config)
    expected = model.state_dict()
    mismatch = key_mismatch({k: t.shape for k, t in expected.items()}, sd, noun="parameter")
    if mismatch:
        raise ParameterLoadError(f"does not fit the '{config.preset}' config stored with it: {mismatch}")
    for k, t in expected.items():
        if tuple(sd[k].shape) != tuple(t.shape):
            raise ParameterLoadError(
                f"parameter '{k}' has shape {tuple(sd[k].shape)} but the "
                f"'{config.preset}' config expects {tuple(t.shape)}"
            )
    model = empty_on_cpu(model)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()})
    return model.eval()
