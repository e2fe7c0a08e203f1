"""Detect and load any weights file the predictor accepts, by content (not by extension):
format sniffing, safe ``torch.load``, the :func:`load_weights` dispatch and its errors.

Accepted formats (:func:`detect_format` returns the name in brackets):

* ``af2-npz``: AlphaFold2 parameters (``params_model_*.npz``, Haiku names under
  ``alphafold/alphafold_iteration/``). Sizes are inferred from the shapes
  (:func:`alphafold_mem.weights.load_af2_params`); the preset supplies what shapes cannot, and the
  file must have its layers (:mod:`alphafold_mem.weights.architecture`; default: the preset the file
  name gives, else the first named preset with the file's layers). AF2-Multimer v3 files
  (``params_model_*_multimer_v3.npz``) run only under a multimer preset, monomer files only under a
  monomer one (OpenFold checkpoints too).
* ``openfold``: an OpenFold state dict or checkpoint saved with ``torch.save`` (optionally under
  ``state_dict``/``model``/``ema.params``, with ``module.``/``model.`` prefixes), loaded with
  :func:`alphafold_mem.weights.load_openfold_checkpoint`.
* ``alphafold-mem``: our checkpoint: a ``torch.save`` mapping with ``config`` (``ModelConfig.to_dict()``)
  and ``state_dict`` in :class:`alphafold_mem.AlphaFold` names (see :mod:`alphafold_mem.weights.checkpoints`).
* ``lightning``: a Lightning ``.ckpt`` from ``alphafold-mem train``: ``state_dict`` with ``model.``
  prefixes and the model config in ``hyper_parameters`` (``config``/``model_config`` as a dict or a
  ``ModelConfig``, or ``preset`` plus ``overrides``) or at the top level.

torch files are read with ``torch.load(weights_only=True)``; a few plain-data globals that
checkpoints commonly hold (numpy arrays, Lightning's ``AttributeDict``, our config dataclasses) are
allow-listed, anything else is refused with a message naming it.

Every failure raises :class:`WeightsError` with one line naming the file and what is wrong.
"""

from __future__ import annotations

import importlib
import os
import pickle
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import torch

from ..config import PRESETS, ModelConfig, model_config
from ..model.alphafold import AlphaFold
from .af2_npz import PREFIX as _AF2_PREFIX
from .af2_npz import infer_config, load_af2_params, npz_shapes
from .architecture import NAMED_ORDER, ArchitectureMismatch, architecture_differences, choose_preset
from .checkpoints import FORMAT as _OUR_FORMAT
from .checkpoints import model_from_state_dict
from .keys import ParameterLoadError, normalize_state_dict_keys
from .openfold import load_openfold_checkpoint, openfold_config

__all__ = [
    "WeightsError",
    "LoadedWeights",
    "FORMATS",
    "DEFAULT_WEIGHTS",
    "default_weights_path",
    "detect_format",
    "load_weights",
]

FORMATS = ("af2-npz", "openfold", _OUR_FORMAT, "lightning")

#: Default weights of ``alphafold-mem predict``, relative to the repository root: the demo
#: checkpoint that ``scripts/train_demo.py`` exports (EMA weights + config).
DEFAULT_WEIGHTS = "data/demo_weights/demo.ckpt"

_EXPECTED = "expected an AlphaFold2 .npz, an OpenFold .pt or an alphafold-mem/Lightning checkpoint"

# Plain-data globals that checkpoints hold besides tensors, safe to reconstruct.
_SAFE_GLOBALS = {
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.ndarray",
    "numpy.dtype",
    "lightning.fabric.utilities.data.AttributeDict",
    "lightning.pytorch.utilities.parsing.AttributeDict",
    "pytorch_lightning.utilities.parsing.AttributeDict",
    "collections.OrderedDict",
    "collections.defaultdict",
    "builtins.set",
    "builtins.frozenset",
    "copyreg._reconstructor",
    "builtins.object",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
    "pathlib.PurePosixPath",
}
_SAFE_PATTERNS = (re.compile(r"numpy\.dtypes\.\w+DType"), re.compile(r"alphafold_mem\.config\.\w+Config"))


class WeightsError(ValueError):
    """A weights file that cannot be used; ``str`` is one line naming the file."""

    def __init__(self, path, reason: str):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class LoadedWeights:
    """A loaded model and where it came from.

    Attributes:
        model: :class:`AlphaFold` in eval mode, on CPU, float32.
        config: its :class:`ModelConfig`.
        format: one of :data:`FORMATS`.
        path: the file.
        details: a short human-readable note (e.g. ``"EMA weights, step 1200"``).
        architecture: the named preset whose layers the model has
            (:mod:`alphafold_mem.weights.architecture`), with the presets of the same layers or
            the config's own preset in brackets (``"model_3_ptm (same layers as model_4_ptm)"``,
            ``"model_1 (preset demo)"``); for provenance (the scores JSON's ``architecture``).
    """

    model: AlphaFold
    config: ModelConfig
    format: str
    path: str
    details: str = ""
    architecture: str = ""


def default_weights_path() -> Path:
    """``<repo>/data/demo_weights/demo.ckpt`` (next to the ``alphafold_mem`` package)."""
    return Path(__file__).resolve().parents[2] / DEFAULT_WEIGHTS


# ------------------------------------------------------------------------------------------------
# detection
# ------------------------------------------------------------------------------------------------
def _check_path(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise WeightsError(path, "weights file not found")
    if os.path.isdir(path):
        raise WeightsError(path, f"is a directory, not a weights file; {_EXPECTED}")
    if os.path.getsize(path) == 0:
        raise WeightsError(path, "empty file")
    return path


def _sniff(path: str) -> str:
    """``"npz"`` or ``"torch"`` from the file's bytes; raises :class:`WeightsError` otherwise."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile as exc:
            raise WeightsError(path, f"damaged zip archive ({exc})") from None
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise WeightsError(
            path,
            f"zip archive that is neither a numpy .npz nor a torch.save file (first entry {names[0]!r}); {_EXPECTED}"
            if names
            else "empty zip archive",
        )
    if head.startswith(b"\x93NUMPY"):
        raise WeightsError(path, f"a single numpy array (.npy), not a parameter set; {_EXPECTED}")
    if head[:1] == b"\x80":  # pickle protocol 2+: torch's legacy (non-zip) format
        return "torch"
    raise WeightsError(path, f"not a recognised weights file (starts with {head!r}); {_EXPECTED}")


def _safe_global(name: str):
    if name not in _SAFE_GLOBALS and not any(p.fullmatch(name) for p in _SAFE_PATTERNS):
        return None
    module, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _torch_load(path: str) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        pass
    except Exception as exc:  # noqa: BLE001 - any torch.load failure is a bad file
        raise WeightsError(path, f"cannot be read by torch.load ({_first_line(exc)})") from None
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as exc:  # noqa: BLE001
        raise WeightsError(path, f"cannot be read by torch.load ({_first_line(exc)})") from None
    allowed, refused = [], []
    for name in unsafe:
        obj = _safe_global(name)
        (allowed if obj is not None else refused).append(obj if obj is not None else name)
    if any(name.startswith("numpy.") for name in unsafe):
        # numpy arrays name their dtype class only while they are rebuilt, so list those up front.
        import numpy as np

        allowed += [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]
    if refused:
        raise WeightsError(
            path,
            f"holds Python objects that cannot be loaded safely (first: '{refused[0]}'); "
            "save tensors, numbers, strings, lists and dicts only",
        )
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise WeightsError(path, f"cannot be read by torch.load ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _is_tensor_dict(obj) -> bool:
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


_OUR_MARKERS = ("input_embedder.preprocess_1d.weight", "structure_module.initial_projection.weight")
_OPENFOLD_MARKERS = ("input_embedder.linear_tf_m.weight", "structure_module.linear_in.weight")


def _names_kind(sd: Mapping[str, Any]) -> Optional[str]:
    keys = set(normalize_state_dict_keys(sd))
    if any(k in keys for k in _OUR_MARKERS):
        return "ours"
    if any(k in keys for k in _OPENFOLD_MARKERS):
        return "openfold"
    return None


def _config_from(obj: Mapping[str, Any], path: str) -> tuple[Optional[ModelConfig], str]:
    """Find the model config in a checkpoint mapping: (config or None, where it was found)."""
    places = [("", obj)]
    for key in ("alphafold_mem", "hyper_parameters", "hparams", "meta", "metadata"):
        if isinstance(obj.get(key), Mapping):
            places.append((key + ".", obj[key]))
    for prefix, d in places:
        for key in ("config", "model_config", "cfg"):
            value = d.get(key)
            if isinstance(value, ModelConfig):
                return value, prefix + key
            if isinstance(value, Mapping) and value:
                try:
                    return ModelConfig.from_dict(dict(value)), prefix + key
                except (KeyError, TypeError) as exc:
                    raise WeightsError(path, f"'{prefix + key}' is not a valid model config ({exc})") from None
        preset = d.get("preset")
        if isinstance(preset, str):
            overrides = d.get("overrides") or d.get("config_overrides") or {}
            try:
                return model_config(preset, **dict(overrides)), prefix + "preset"
            except (KeyError, ValueError) as exc:
                raise WeightsError(path, f"'{prefix}preset' = {preset!r}: {exc}") from None
    return None, ""


def detect_format(path) -> str:
    """The format of a weights file, one of :data:`FORMATS`, decided from its content.

    Raises:
        WeightsError: missing, empty, unreadable or unrecognised file (one line naming it).
    """
    path = _check_path(path)
    kind = _sniff(path)
    if kind == "npz":
        _check_af2_npz(path)
        return "af2-npz"
    fmt, _ = _classify(_torch_load(path), path)
    return fmt


def _check_af2_npz(path: str) -> None:
    with zipfile.ZipFile(path) as zf:
        names = [n.removesuffix(".npy") for n in zf.namelist()]
    if not any(n.startswith(_AF2_PREFIX) for n in names):
        raise WeightsError(
            path,
            f"a numpy .npz without AlphaFold2 parameter names (first array {names[0]!r}, "
            f"expected names under '{_AF2_PREFIX}')",
        )


def _classify(obj: Any, path: str) -> tuple[str, dict]:
    """(format, info) for a loaded torch object; info has ``state_dict``, ``config``, ``details``."""
    if not isinstance(obj, Mapping):
        raise WeightsError(
            path, f"torch file holds a {type(obj).__name__}, not a checkpoint or state dict; {_EXPECTED}"
        )
    config, _ = _config_from(obj, path)
    is_lightning = "pytorch-lightning_version" in obj or "hyper_parameters" in obj
    details = []
    # Candidate state dicts, most specific first (EMA weights win over the raw ones for inference).
    candidates = []
    ours = obj.get("alphafold_mem") if isinstance(obj.get("alphafold_mem"), Mapping) else {}
    for ema in (ours.get("ema"), obj.get("ema_state_dict"), obj.get("ema")):
        if isinstance(ema, Mapping):
            for inner in ("params", "shadow", "state_dict", "model"):
                if _is_tensor_dict(ema.get(inner)):
                    ema = ema[inner]
                    break
            if _is_tensor_dict(ema):
                candidates.append(("EMA weights", ema))
    for key in ("state_dict", "model", "model_state_dict", "module"):
        if _is_tensor_dict(obj.get(key)):
            candidates.append(("", obj[key]))
    if _is_tensor_dict(obj):
        candidates.append(("", obj))
    for note, sd in candidates:
        kind = _names_kind(sd)
        if kind is None:
            continue
        if note:
            details.append(note)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        for d in (obj, meta):
            step = d.get("global_step", d.get("step"))
            if isinstance(step, int):
                details.append(f"step {step}")
                break
        if note == "EMA weights":
            live = next((s for n, s in candidates if not n), None)
            if live is not None:  # non-float buffers are not averaged: take them from the live weights
                sd = {**normalize_state_dict_keys(live), **normalize_state_dict_keys(sd)}
        if meta.get("ema") is True and not note:
            details.append("EMA weights")
        if kind == "openfold":
            return "openfold", {"state_dict": sd, "config": config, "details": ", ".join(details)}
        fmt = "lightning" if is_lightning else _OUR_FORMAT
        return fmt, {"state_dict": sd, "config": config, "details": ", ".join(details)}
    if candidates:
        first = next(iter(candidates[0][1]))
        raise WeightsError(path, f"state dict with unknown parameter names (first: '{first}'); {_EXPECTED}")
    keys = ", ".join(repr(k) for k in list(obj)[:5])
    raise WeightsError(path, f"torch file without a model state dict (top-level keys: {keys}); {_EXPECTED}")


# ------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------
def _named(config: ModelConfig) -> str:
    """``"<preset>"``: the first named preset with ``config``'s layers, else its own preset."""
    same = [p for p in NAMED_ORDER if not architecture_differences(config, model_config(p))]
    if config.preset in same or not same:
        return config.preset
    return f"{same[0]} (preset {config.preset})"


def _architecture(note: str) -> str:
    """The architecture named by a :func:`~.architecture.choose_preset` note, without the word."""
    return note.removeprefix("architecture ")


def _preset_from_name(path: str) -> Optional[str]:
    m = re.search(r"model_[1-5](_ptm|_multimer_v3)?", os.path.basename(path))
    return m.group(0) if m else None


def load_weights(path, preset: Union[str, ModelConfig, None] = None) -> LoadedWeights:
    """Load any accepted weights file into an :class:`AlphaFold` (eval mode, CPU, float32).

    Args:
        path: the weights file (format detected from its content, see the module docstring).
        preset: for AF2/OpenFold files, the preset (or config) whose layers the file must have; it
            supplies what the shapes cannot. Default: the preset an AF2 file name gives
            (``params_model_3_ptm.npz``; the file must have its layers), else the first named preset
            with the file's layers (:func:`alphafold_mem.weights.architecture.choose_preset`), so
            ``config.preset`` names the architecture that runs. For our checkpoints, which hold their
            config, a different preset is an error.

    Raises:
        WeightsError: unreadable or unrecognised file, a config/preset mismatch (AF2/OpenFold: one
            line naming the differing fields), or parameters that do not fit the model (one line
            naming the file and the parameter).
    """
    path = _check_path(path)
    if isinstance(preset, str) and preset not in PRESETS:
        raise WeightsError(path, f"unknown preset '{preset}'; valid presets: {', '.join(PRESETS)}")
    kind = _sniff(path)
    try:
        if kind == "npz":
            _check_af2_npz(path)
            shapes = {k.removeprefix(_AF2_PREFIX): v for k, v in npz_shapes(path).items()}
            use, note = choose_preset(lambda p: infer_config(shapes, p), preset, _preset_from_name(path))
            model = load_af2_params(path, use)
            return LoadedWeights(model, model.config, "af2-npz", path, f"sizes inferred, {note}", _architecture(note))
        obj = _torch_load(path)
        fmt, info = _classify(obj, path)
        if fmt == "openfold":
            sd = info["state_dict"]
            use, note = choose_preset(lambda p: openfold_config(sd, p), preset)
            model = load_openfold_checkpoint(sd, use)
            details = ", ".join(x for x in (info["details"], f"sizes inferred, {note}") if x)
            return LoadedWeights(model, model.config, "openfold", path, details, _architecture(note))
        if isinstance(preset, ModelConfig):
            preset = preset.preset
        config = info["config"]
        if config is None:
            if preset is None:
                raise WeightsError(
                    path,
                    "checkpoint in alphafold-mem parameter names but without a model "
                    "config; pass the preset it was trained with (--preset)",
                )
            config = model_config(preset)
        elif preset is not None and preset != config.preset:
            raise WeightsError(
                path,
                f"checkpoint holds a '{config.preset}' model but preset '{preset}' was "
                "requested; omit --preset to use the checkpoint's own config",
            )
        model = model_from_state_dict(config, info["state_dict"])
        return LoadedWeights(model, config, fmt, path, info["details"], _named(config))
    except (ParameterLoadError, ArchitectureMismatch) as exc:
        raise WeightsError(path, str(exc)) from None
    except OSError as exc:
        raise WeightsError(path, f"cannot be read ({exc.strerror or exc})") from None
