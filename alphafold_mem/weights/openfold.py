"""OpenFold weights: state dicts under OpenFold's parameter names, and checkpoints loaded from them.

The name of every AF2 key in OpenFold (``{i}`` standing for the block index of stacked keys) is in
``openfold_names.json`` next to this module. OpenFold tensors already have this package's torch
layout (``[out, in]`` linear weights, attention projections as flat ``[H*C, in]`` matrices), so
only the names change; sizes are inferred from the AF2-layout shapes
(:func:`alphafold_mem.weights.af2_npz.infer_config`).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Mapping

import torch

from ..config import ModelConfig, model_config
from ..model.alphafold import AlphaFold
from .af2_npz import PREFIX, af2_entries, infer_config
from .keys import ParameterLoadError, normalize_state_dict_keys

__all__ = ["load_openfold_checkpoint", "openfold_config", "openfold_state_dict"]


def _openfold_names() -> dict[str, str]:
    text = resources.files("alphafold_mem.weights").joinpath("openfold_names.json").read_text()
    return json.loads(text)["names"]


def openfold_state_dict(model: AlphaFold) -> dict[str, torch.Tensor]:
    """``model``'s parameters under OpenFold's state-dict names (for OpenFold or for saving)."""
    names = _openfold_names()
    sd = {}
    for e in af2_entries(model):
        pattern = names[e.key]
        for i, p in enumerate(e.params):
            sd[pattern.format(i=i)] = p.detach().clone()
    return sd


def load_openfold_checkpoint(path_or_state_dict, preset: str = "model_1_ptm", **overrides) -> AlphaFold:
    """Build and load an :class:`AlphaFold` from an OpenFold checkpoint (.pt state dict, optionally
    wrapped under ``state_dict``/``model``/``ema`` and with ``module.``/``model.`` prefixes).

    Sizes are inferred as in :func:`load_af2_params`. OpenFold stores attention projections as
    flat ``[H*C, in]`` matrices; heads come from the pair-bias projections where there is one. The
    template pointwise attention has none: its head count is the preset's (or
    ``template__pointwise_num_heads=...`` in ``overrides``).

    Raises:
        ParameterLoadError: a parameter is missing, unexpected or mis-shaped (named with both shapes).
    """
    tensors = _openfold_tensors(path_or_state_dict)
    cfg = _config_of(tensors, preset, overrides)
    with torch.device("meta"):
        model = AlphaFold(cfg)
    model = model.to_empty(device="cpu")
    entries = {e.key: e for e in af2_entries(model)}
    names = _openfold_names()
    missing = sorted(set(entries) - set(tensors))
    if missing:
        raise ParameterLoadError(f"OpenFold checkpoint lacks '{names[missing[0]]}' (AF2 key '{PREFIX + missing[0]}')")
    for key, e in entries.items():
        ts = tensors[key]
        if len(ts) != len(e.params):
            raise ParameterLoadError(
                f"'{names[key]}': {len(ts)} blocks in the checkpoint, model expects {len(e.params)}"
            )
        for i, (t, p) in enumerate(zip(ts, e.params)):
            if tuple(t.shape) != tuple(p.shape):
                raise ParameterLoadError(
                    f"'{names[key].format(i=i)}' has shape {tuple(t.shape)} but the model expects {tuple(p.shape)}"
                )
            with torch.no_grad():
                p.copy_(t)
    return model.eval()


def openfold_config(path_or_state_dict, preset: str = "model_1_ptm", **overrides) -> ModelConfig:
    """The config :func:`load_openfold_checkpoint` would build for this checkpoint (sizes from the
    shapes, the rest from ``preset`` and ``overrides``), without building the model.

    Raises:
        ParameterLoadError: as :func:`load_openfold_checkpoint`.
    """
    return _config_of(_openfold_tensors(path_or_state_dict), preset, overrides)


def _openfold_tensors(path_or_state_dict) -> dict[str, list[torch.Tensor]]:
    """The checkpoint's tensors by AF2 key (one per block for stacked keys), our torch layout."""
    sd = path_or_state_dict
    if not isinstance(sd, Mapping):
        sd = torch.load(sd, map_location="cpu", weights_only=True)
    for wrapper in ("ema", "state_dict", "model"):
        if isinstance(sd, Mapping) and wrapper in sd and isinstance(sd[wrapper], Mapping):
            inner = sd[wrapper]
            sd = inner.get("params", inner) if wrapper == "ema" else inner
    sd = normalize_state_dict_keys(sd)
    names = _openfold_names()
    tensors: dict[str, list[torch.Tensor]] = {}
    for key, pattern in names.items():
        if "{i}" in pattern:
            blocks, i = [], 0
            while pattern.format(i=i) in sd:
                blocks.append(sd[pattern.format(i=i)])
                i += 1
            if blocks:
                tensors[key] = blocks
        elif pattern in sd:
            tensors[key] = [sd[pattern]]
    known = {p.format(i=i) for p in names.values() for i in range(64)} | set(names.values())
    unexpected = sorted(k for k in sd if k not in known)
    if unexpected:
        raise ParameterLoadError(f"unexpected OpenFold parameter '{unexpected[0]}' ({len(unexpected)} in all)")
    return tensors


def _config_of(tensors: dict[str, list[torch.Tensor]], preset: str, overrides: dict) -> ModelConfig:
    cfg = infer_config(_af2_shapes_from_openfold(tensors, preset, overrides), preset)
    if overrides:
        cfg = model_config(preset, **{**_config_overrides_from(cfg), **overrides})
    return cfg


def _config_overrides_from(cfg: ModelConfig) -> dict:
    """Flatten a config into dotted overrides (so extra overrides can be layered on it)."""
    flat = {}

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, prefix + k + ".")
            elif k != "preset":
                flat[prefix + k] = v

    walk(cfg.to_dict(), "")
    return flat


def _af2_shapes_from_openfold(tensors: dict[str, list[torch.Tensor]], preset: str, overrides: dict):
    """AF2-layout shapes of OpenFold tensors, enough for :func:`infer_config`."""
    shapes = {}
    for key, ts in tensors.items():
        t = ts[0]
        shape = (t.shape[1], t.shape[0]) if t.dim() == 2 else tuple(t.shape)
        stacked = (
            key.startswith(("evoformer/evoformer_iteration/", "evoformer/extra_msa_stack/"))
            or "__layer_stack_no_state" in key
        )
        shapes[key] = ((len(ts),) if stacked else ()) + shape
    for key in list(shapes):
        if not key.endswith("/attention//query_w"):
            continue
        owner = key[: -len("/attention//query_w")]
        bias_key = owner + "//feat_2d_weights"
        if owner.endswith("msa_column_attention"):  # AF2 uses the row attention's head count
            bias_key = owner[: -len("msa_column_attention")] + "msa_row_attention_with_pair_bias//feat_2d_weights"
        if bias_key in shapes:
            heads = shapes[bias_key][-1]
        else:
            heads = overrides.get(
                "template.pointwise_num_heads",
                overrides.get("template__pointwise_num_heads", model_config(preset).template.pointwise_num_heads),
            )
        *lead, c_in, hc = shapes[key]
        if hc % heads:
            raise ParameterLoadError(
                f"'{key}': {hc} output channels do not split into {heads} heads; "
                f"pass template__pointwise_num_heads=<H> to load_openfold_checkpoint"
            )
        shapes[key] = (*lead, c_in, heads, hc // heads)
    return shapes
