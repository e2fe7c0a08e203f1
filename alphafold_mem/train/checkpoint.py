"""Checkpoint files: atomic writes, config checks, prefix normalisation and weight export.

A training checkpoint is Lightning's dict (``state_dict`` with ``model.`` prefixes, optimizer and
scheduler states, loop progress) plus our ``alphafold_mem`` entry (model config, train config,
EMA shadow, RNG states, data-sampler position, consecutive bad steps). :func:`export_weights`
writes the small inference file (EMA weights + config) that ``alphafold-mem predict`` loads.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from ..config import ModelConfig
from ..io import atomic_save
from ..model import AlphaFold
from ..weights import normalize_state_dict_keys, write_checkpoint

__all__ = [
    "AtomicCheckpointIO",
    "check_config_compatible",
    "read_checkpoint_config",
    "export_weights",
    "load_training_checkpoint",
    "load_model",
    "load_weights",
]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO whose saves go through :func:`atomic_save`."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO does not take storage_options")
        atomic_save(checkpoint, path)


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def check_config_compatible(saved: dict | ModelConfig, current: ModelConfig, what: str = "checkpoint") -> None:
    """Raise ``ValueError`` (one sentence naming the differing fields) if the architecture of
    ``saved`` differs from ``current``. Loss weights and data sizes may differ (fine-tuning)."""
    saved_d = saved.to_dict() if isinstance(saved, ModelConfig) else saved
    a, b = _flatten(saved_d), _flatten(current.to_dict())
    ignore = ("loss.", "data.", "preset", "num_recycles")
    diffs = [
        f"{k} ({a.get(k)!r} vs {b.get(k)!r})"
        for k in sorted(set(a) | set(b))
        if not k.startswith(ignore) and a.get(k) != b.get(k)
    ]
    if diffs:
        shown = ", ".join(diffs[:6]) + (f" and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise ValueError(
            f"the {what} was saved for preset '{saved_d.get('preset')}' but the model is preset "
            f"'{current.preset}', and they differ in {shown}."
        )


def _damaged(path, exc: BaseException) -> ValueError:
    text = " ".join(str(exc).split())[:160] or type(exc).__name__
    return ValueError(f"{path}: damaged or truncated checkpoint ({text}); resume from an earlier step=N.ckpt")


def load_training_checkpoint(path: str | os.PathLike, mmap: bool = True) -> dict:
    """``torch.load`` of a training checkpoint (memory-mapped where the format allows).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is damaged or truncated, or not a checkpoint (one line naming it).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: checkpoint not found")
    try:
        try:  # memory-mapped: only the entries used are read from a large checkpoint
            ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
        except (RuntimeError, ValueError):  # not the zip format
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - whatever torch.load raises on a cut file, one line
        raise _damaged(path, exc) from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path}: holds a {type(ckpt).__name__}, not a training checkpoint")
    return ckpt


def read_checkpoint_config(path: str | os.PathLike) -> tuple[ModelConfig, dict]:
    """The model config and the raw checkpoint dict of a training checkpoint or weights file.

    Raises:
        FileNotFoundError: no such file. ValueError: damaged, truncated, or without a model config.
    """
    ckpt = load_training_checkpoint(path, mmap=False)
    meta = ckpt.get("alphafold_mem") or {}
    cfg = meta.get("model_config") or ckpt.get("model_config") or ckpt.get("config")
    if cfg is None:
        raise ValueError(f"{path} holds no alphafold_mem model config (not written by alphafold-mem train)")
    return ModelConfig.from_dict(cfg), ckpt


def _weights(ckpt: dict, use_ema: bool) -> dict[str, torch.Tensor]:
    meta = ckpt.get("alphafold_mem") or {}
    if use_ema and meta.get("ema") is not None:
        sd = dict(meta["ema"]["shadow"])
        live = normalize_state_dict_keys(ckpt["state_dict"])
        for k, v in live.items():  # non-float buffers are not averaged
            sd.setdefault(k, v)
        return normalize_state_dict_keys(sd)
    for key in ("state_dict", "model", "module"):
        if key in ckpt and isinstance(ckpt[key], dict):
            return normalize_state_dict_keys(ckpt[key])
    return normalize_state_dict_keys(ckpt)


def export_weights(
    ckpt_path: str | os.PathLike, out_path: str | os.PathLike, use_ema: bool = True, extra: Optional[dict] = None
) -> None:
    """Write the inference file in the plain format of :mod:`alphafold_mem.weights.checkpoints`:
    ``{"format": "alphafold-mem", "format_version": 1, "config", "state_dict" (EMA weights, fp32),
    "metadata"}`` (atomically, by :func:`alphafold_mem.weights.write_checkpoint`)."""
    cfg, ckpt = read_checkpoint_config(ckpt_path)
    sd = {k: v.float() if v.is_floating_point() else v for k, v in _weights(ckpt, use_ema).items()}
    meta = {"global_step": ckpt.get("global_step"), "ema": use_ema, **(extra or {})}
    write_checkpoint(out_path, cfg, sd, {"metadata": meta})


def load_weights(model: AlphaFold, path: str | os.PathLike, use_ema: bool = True) -> dict:
    """Load a training checkpoint or an exported weights file into ``model`` after checking that
    the architectures match; wrapper prefixes (``model.``, ``module.``, ``_orig_mod.``) are
    stripped. Returns the file's metadata dict."""
    cfg, ckpt = read_checkpoint_config(path)
    check_config_compatible(cfg, model.config)
    sd = _weights(ckpt, use_ema)
    model.load_state_dict(sd, strict=True)
    return ckpt.get("metadata") or {"global_step": ckpt.get("global_step")}


def load_model(path: str | os.PathLike, use_ema: bool = True) -> AlphaFold:
    """Build the model described by a checkpoint / weights file and load its weights (eval mode)."""
    cfg, _ = read_checkpoint_config(path)
    model = AlphaFold(cfg)
    load_weights(model, path, use_ema)
    return model.eval()
