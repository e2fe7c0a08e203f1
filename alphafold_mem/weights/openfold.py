"""OpenFold weights: state dicts under OpenFold's parameter names, and checkpoints loaded from them.

The name of every AF2 key in OpenFold (``{i}`` standing for the block index of stacked keys) is in
``openfold_names.json`` next to this module, and for AF2-Multimer v3 models (OpenFold's
``model_{1..5}_multimer_v3``, recognised by ``structure_module.ipa.linear_k.weight``) in
``openfold_names_multimer.json``. OpenFold tensors already have this package's torch layout
(``[out, in]`` linear weights, attention projections as flat ``[H*C, in]`` matrices), so only the
names change, except for multimer v3's fused triangle multiplication: one ``linear_ab_p`` /
``linear_ab_g`` of ``[2C, c]`` fills our left and right layers (rows ``[:C]`` / ``[C:]``), with the
halves swapped in the incoming update (OpenFold's ``a`` is AF2's right half; the JSON's
``halves_swapped``). Sizes are inferred from the AF2-layout shapes
(:func:`alphafold_mem.weights.af2_npz.infer_config`).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Mapping

import torch

from ..config import ModelConfig, model_config
from ..model.alphafold import AlphaFold
from .af2_npz import PREFIX, af2_entries, check_kind, empty_on_cpu, infer_config
from .keys import ParameterLoadError, normalize_state_dict_keys

__all__ = ["load_openfold_checkpoint", "openfold_config", "openfold_state_dict"]


#: A parameter only OpenFold's multimer models have (the multimer IPA's separate key projection).
MULTIMER_MARKER = "structure_module.ipa.linear_k.weight"


def _table(multimer: bool) -> dict:
    name = "openfold_names_multimer.json" if multimer else "openfold_names.json"
    return json.loads(resources.files("alphafold_mem.weights").joinpath(name).read_text())


def _openfold_names(multimer: bool = False) -> dict[str, str]:
    return _table(multimer)["names"]


def _swapped(multimer: bool) -> set[str]:
    return set(_table(multimer).get("halves_swapped", ()))


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def openfold_state_dict(model: AlphaFold) -> dict[str, torch.Tensor]:
    """``model``'s parameters under OpenFold's state-dict names (for OpenFold or for saving); for a
    multimer model, OpenFold's ``model_{1..5}_multimer_v3`` names and fused layout."""
    multimer = model.config.multimer
    names, swapped = _openfold_names(multimer), _swapped(multimer)
    sd = {}
    for e in af2_entries(model):
        pattern = names[e.key]
        for b in range(len(e.params) // e.parts):
            t = torch.cat([p.detach() for p in e.params[b * e.parts : (b + 1) * e.parts]], dim=0)
            sd[pattern.format(i=b)] = (_swap_halves(t) if e.key in swapped else t).clone()
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
    tensors, multimer = _openfold_tensors(path_or_state_dict)
    cfg = _config_of(tensors, multimer, preset, overrides)
    with torch.device("meta"):
        model = AlphaFold(cfg)
    model = empty_on_cpu(model)
    entries = {e.key: e for e in af2_entries(model)}
    names, swapped = _openfold_names(multimer), _swapped(multimer)
    missing = sorted(set(entries) - set(tensors))
    if missing:
        raise ParameterLoadError(f"OpenFold checkpoint lacks '{names[missing[0]]}' (AF2 key '{PREFIX + missing[0]}')")
    for key, e in entries.items():
        ts = tensors[key]
        if len(ts) != e.blocks:
            raise ParameterLoadError(f"'{names[key]}': {len(ts)} blocks in the checkpoint, model expects {e.blocks}")
        for b, t in enumerate(ts):
            ps = e.params[b * e.parts : (b + 1) * e.parts]
            want = (sum(p.shape[0] for p in ps), *ps[0].shape[1:])
            if tuple(t.shape) != want:
                raise ParameterLoadError(
                    f"'{names[key].format(i=b)}' has shape {tuple(t.shape)} but the model expects {want}"
                )
            parts = (_swap_halves(t) if key in swapped else t).chunk(e.parts, dim=0)
            with torch.no_grad():
                for p, part in zip(ps, parts):
                    p.copy_(part)
    return model.eval()


def openfold_config(path_or_state_dict, preset: str = "model_1_ptm", **overrides) -> ModelConfig:
    """The config :func:`load_openfold_checkpoint` would build for this checkpoint (sizes from the
    shapes, the rest from ``preset`` and ``overrides``), without building the model.

    Raises:
        ParameterLoadError: as :func:`load_openfold_checkpoint`.
    """
    return _config_of(*_openfold_tensors(path_or_state_dict), preset, overrides)


def _openfold_tensors(path_or_state_dict) -> tuple[dict[str, list[torch.Tensor]], bool]:
    """The checkpoint's tensors by AF2 key (one per block for stacked keys), our torch layout (fused
    multimer projections as stored), and whether it is a multimer model."""
    sd = path_or_state_dict
    if not isinstance(sd, Mapping):
        sd = torch.load(sd, map_location="cpu", weights_only=True)
    for wrapper in ("ema", "state_dict", "model"):
        if isinstance(sd, Mapping) and wrapper in sd and isinstance(sd[wrapper], Mapping):
            inner = sd[wrapper]
            sd = inner.get("params", inner) if wrapper == "ema" else inner
    sd = normalize_state_dict_keys(sd)
    multimer = MULTIMER_MARKER in sd
    names = _openfold_names(multimer)
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
    return tensors, multimer


def _config_of(tensors: dict[str, list[torch.Tensor]], multimer: bool, preset: str, overrides: dict) -> ModelConfig:
    check_kind("OpenFold checkpoint", multimer, preset)
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
            or "/template_embedding_iteration/" in key
        )
        shapes[key] = ((len(ts),) if stacked else ()) + shape
    ipa = "structure_module/fold_iteration/invariant_point_attention/"
    if ipa + "q_scalar_projection//weights" in shapes:  # multimer IPA: [c_s, H, C] and [c_s, H, 3P]
        heads = shapes["structure_module/fold_iteration/invariant_point_attention//trainable_point_weights"][0]
        for key in [k for k in shapes if k.startswith(ipa) and ("scalar_" in k or "point_projection//" in k)]:
            *c_in, c_out = shapes[key]
            shapes[key] = (*c_in, heads, c_out // heads)
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
