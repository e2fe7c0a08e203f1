"""AlphaFold2 parameters (``params_model_*.npz``, Haiku names): the key table, load, export and
size inference.

AF2 key = ``alphafold/alphafold_iteration/`` + module path + ``//`` + parameter name. Linear weights
are ``[in, out]`` (torch: ``[out, in]``); attention projections are ``[in, H, C]`` / ``[H, C, out]``;
blocks of the Evoformer, extra-MSA and template pair stacks are stacked on a leading axis.

Every AF2 key maps to exactly one parameter of :class:`alphafold_mem.AlphaFold` per block, and every
model parameter is reached by exactly one key (checked by :func:`load_af2_params`). The same key
table (:func:`af2_entries`) names OpenFold's parameters (:mod:`alphafold_mem.weights.openfold`).
"""

from __future__ import annotations

import os
import re
import zipfile
from typing import Iterable, Mapping

import numpy as np
import torch

from ..config import ModelConfig, model_config
from ..io import atomic_write
from ..model.alphafold import AlphaFold
from .af2_entry_table import af2_entries
from .keys import ParameterLoadError, key_mismatch

__all__ = [
    "PREFIX",
    "af2_entries",
    "export_af2_params",
    "infer_architecture",
    "infer_config",
    "load_af2_arrays",
    "load_af2_params",
    "npz_shapes",
]

PREFIX = "alphafold/alphafold_iteration/"


def _to_torch(arr: np.ndarray, kind: str, torch_shape: torch.Size) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(arr))
    if kind == "w_in":
        t = t.reshape(arr.shape[0], -1).T
    elif kind == "w_out":
        t = t.reshape(-1, arr.shape[-1]).T
    return t.reshape(torch_shape)


def _to_af2(p: torch.Tensor, kind: str, af2_shape: tuple[int, ...]) -> np.ndarray:
    t = p.detach().cpu()
    if kind in ("w_in", "w_out"):
        t = t.T
    return t.reshape(af2_shape).numpy().copy()


# ------------------------------------------------------------------------------------------------
# size inference
# ------------------------------------------------------------------------------------------------
def infer_config(shapes: Mapping[str, tuple[int, ...]], preset: str = "model_1_ptm") -> ModelConfig:
    """Infer every size from AF2 parameter shapes (keys without :data:`PREFIX`).

    Channels, heads and head widths, hidden sizes, block counts, IPA points and the resnet width
    come from the shapes (:func:`infer_architecture`); the rest (e.g. 8 structure-module layers,
    bins) from ``preset``.

    Raises:
        ParameterLoadError: a key needed to infer a size is missing.
    """
    return model_config(preset, **infer_architecture(shapes))


def infer_architecture(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, object]:
    """The config fields that AF2 parameter shapes (keys without :data:`PREFIX`) determine, as dotted
    paths (``"multimer"``, ``"c_m"``, ``"evoformer.num_blocks"``, ``"template.enabled"``, ``"heads.pae_enabled"``, ...);
    template sizes only when the file has a template embedding.

    Raises:
        ParameterLoadError: a key needed to infer a size is missing.
    """

    def shp(key):
        if key not in shapes:
            raise ParameterLoadError(f"cannot infer the model size: key '{PREFIX + key}' is missing")
        return shapes[key]

    evo = "evoformer/"
    o: dict = {}
    o["c_m"] = shp(evo + "preprocess_1d//weights")[1]
    o["c_z"] = shp(evo + "left_single//weights")[1]
    o["c_s"] = shp(evo + "single_activations//weights")[1]
    o["c_e"] = shp(evo + "extra_msa_activations//weights")[1]

    multimer = is_multimer_keys(shapes)
    o["multimer"] = multimer
    # AF2-Multimer v3 fuses the triangle multiplication's left/right projections: [c, 2C]
    tri_mul = "projection//weights" if multimer else "left_projection//weights"
    halves = 2 if multimer else 1

    def stack(prefix, name, c_msa):
        q = shp(prefix + "msa_row_attention_with_pair_bias/attention//query_w")
        tri = shp(prefix + "triangle_attention_starting_node/attention//query_w")
        o[f"{name}.num_blocks"] = q[0]
        o[f"{name}.num_heads_msa"], o[f"{name}.c_hidden_msa_att"] = q[2], q[3]
        o[f"{name}.num_heads_pair"], o[f"{name}.c_hidden_pair_att"] = tri[2], tri[3]
        o[f"{name}.c_hidden_opm"] = shp(prefix + "outer_product_mean/left_projection//weights")[2]
        o[f"{name}.c_hidden_mul"] = shp(prefix + "triangle_multiplication_outgoing/" + tri_mul)[2] // halves
        o[f"{name}.transition_n"] = shp(prefix + "msa_transition/transition1//weights")[2] // c_msa

    stack(evo + "evoformer_iteration/", "evoformer", o["c_m"])
    stack(evo + "extra_msa_stack/", "extra_msa", o["c_e"])
    t = evo + "template_embedding/"
    fi = "structure_module/fold_iteration/"
    if multimer:
        st = t + "single_template_embedding/"
        o["template.enabled"] = st + "template_pair_embedding_0//weights" in shapes
        if o["template.enabled"]:
            o["c_t"] = shp(st + "template_pair_embedding_0//weights")[1]
            tps = st + "template_embedding_iteration/"
            _template_stack(o, shp, tps, tri_mul, halves)
        h = shp(fi + "invariant_point_attention//trainable_point_weights")[0]
        o["structure_module.num_heads_ipa"] = h
        ipa = fi + "invariant_point_attention/"
        o["structure_module.c_ipa"] = shp(ipa + "q_scalar_projection//weights")[2]
        o["structure_module.num_qk_points"] = shp(ipa + "q_point_projection/point_projection//weights")[2] // 3
        o["structure_module.num_v_points"] = shp(ipa + "v_point_projection/point_projection//weights")[2] // 3
    else:
        has_templates = t + "single_template_embedding/embedding2d//weights" in shapes
        o["template.enabled"] = has_templates
        if has_templates:
            o["c_t"] = shp(t + "single_template_embedding/embedding2d//weights")[1]
            tps = t + "single_template_embedding/template_pair_stack/__layer_stack_no_state/"
            _template_stack(o, shp, tps, tri_mul, halves)
            pq = shp(t + "attention//query_w")
            o["template.pointwise_num_heads"], o["template.pointwise_c_hidden"] = pq[1], pq[2]
            o["template.embed_angles"] = evo + "template_single_embedding//weights" in shapes
        h = shp(fi + "invariant_point_attention//trainable_point_weights")[0]
        o["structure_module.num_heads_ipa"] = h
        o["structure_module.c_ipa"] = shp(fi + "invariant_point_attention/q_scalar//weights")[1] // h
        pq = shp(fi + "invariant_point_attention/q_point_local//weights")[1] // (3 * h)
        o["structure_module.num_qk_points"] = pq
        o["structure_module.num_v_points"] = (
            shp(fi + "invariant_point_attention/kv_point_local//weights")[1] // (3 * h) - pq
        )
    o["structure_module.c_resnet"] = shp(fi + "rigid_sidechain/input_projection//weights")[1]
    o["structure_module.num_resnet_blocks"] = sum(
        1 for k in shapes if re.fullmatch(fi + r"rigid_sidechain/resblock1(_\d+)?//weights", k)
    )
    o["heads.plddt_c_hidden"] = shp("predicted_lddt_head/act_0//weights")[1]
    o["heads.plddt_num_bins"] = shp("predicted_lddt_head/logits//weights")[1]
    o["heads.distogram_num_bins"] = shp("distogram_head/half_logits//weights")[1]
    o["heads.pae_enabled"] = "predicted_aligned_error_head/logits//weights" in shapes
    return o


def _template_stack(o: dict, shp, tps: str, tri_mul: str, halves: int) -> None:
    """The template pair stack's sizes from its keys (prefix ``tps``) into ``o``."""
    tri = shp(tps + "triangle_attention_starting_node/attention//query_w")
    o["template.pair_stack.num_blocks"] = tri[0]
    o["template.pair_stack.num_heads_tri_att"], o["template.pair_stack.c_hidden_tri_att"] = tri[2], tri[3]
    o["template.pair_stack.c_hidden_tri_mul"] = shp(tps + "triangle_multiplication_outgoing/" + tri_mul)[2] // halves
    o["template.pair_stack.transition_n"] = shp(tps + "pair_transition/transition1//weights")[2] // o["c_t"]


#: A key only AF2-Multimer parameter files hold (the chain-relative position encoding).
MULTIMER_KEY = "evoformer/~_relative_encoding/position_activations//weights"


def is_multimer_keys(keys) -> bool:
    """Whether AF2 parameter keys (without :data:`PREFIX`) are AF2-Multimer's."""
    return MULTIMER_KEY in keys


# ------------------------------------------------------------------------------------------------
# loading / export
# ------------------------------------------------------------------------------------------------
def npz_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Shapes of every array in an .npz (keys as stored, ``.npy`` removed) without reading the data."""
    shapes = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            with zf.open(name) as f:
                major, _ = np.lib.format.read_magic(f)
                read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, _, _ = read_header(f)
            shapes[name.removesuffix(".npy")] = tuple(shape)
    return shapes


def _strip(key: str) -> str:
    return key[len(PREFIX) :] if key.startswith(PREFIX) else key


def empty_on_cpu(model: torch.nn.Module) -> torch.nn.Module:
    """``model.to_empty(device="cpu")`` for a model built on the meta device (uninitialised CPU
    tensors, for weights to be loaded into), with a plain ``torch.empty`` per tensor: to_empty's
    ``empty_like`` of a meta tensor runs torch's Python reference, which imports sympy (~0.35 s CPU
    per process)."""
    return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu"))


def load_af2_params(path: str | os.PathLike, preset: str = "model_1_ptm") -> AlphaFold:
    """Build an :class:`AlphaFold` whose sizes are inferred from an AF2 ``params_model_*.npz`` and
    load it with strict checking.

    Arrays are read one at a time straight into the model's parameters (the model is built
    without initialising its weights), so peak memory is about one model plus one array.

    Args:
        path: AF2 parameter file (.npz, Haiku names).
        preset: supplies what the shapes cannot (structure-module layers, bins, dropout, ...).

    Raises:
        ParameterLoadError: a key is missing, unexpected, or has the wrong shape (the message names
            the key and both shapes).
    """
    path = os.fspath(path)
    shapes = {_strip(k): v for k, v in npz_shapes(path).items()}
    check_kind(path, is_multimer_keys(shapes), preset)
    cfg = infer_config(shapes, preset)
    with torch.device("meta"):
        model = AlphaFold(cfg)
    model = empty_on_cpu(model)
    with np.load(path) as npz:
        names = {_strip(k): k for k in npz.files}
        load_af2_arrays(model, ((k, lambda k=k: npz[names[k]]) for k in names), set(names))
    return model.eval()


def check_kind(path: str | os.PathLike, file_is_multimer: bool, preset: str) -> None:
    """Refuse AF2-Multimer parameters under a monomer preset and the reverse.

    Raises:
        ParameterLoadError: one line naming the file, what it holds and the preset.
    """
    preset_is_multimer = model_config(preset).multimer
    if file_is_multimer != preset_is_multimer:
        held = "AF2-Multimer" if file_is_multimer else "monomer AF2"
        kind = "an AF2-Multimer" if preset_is_multimer else "a monomer"
        hint = "a *_multimer_v3 preset" if file_is_multimer else "a monomer preset (model_1 ... model_5_ptm)"
        raise ParameterLoadError(
            f"{os.fspath(path)} holds {held} parameters but preset '{preset}' is {kind} preset: use {hint}"
        )


def load_af2_arrays(model: AlphaFold, items: Iterable[tuple[str, object]], keys: set[str]) -> None:
    """Fill ``model`` from (AF2 key, array or zero-argument loader) pairs; strict on names and shapes.

    Raises:
        ParameterLoadError: as :func:`load_af2_params`.
    """
    entries = {e.key: e for e in af2_entries(model)}
    mismatch = key_mismatch(
        {k: entries[k].full_shape for k in sorted(entries)}, sorted(keys), show=lambda k: PREFIX + k
    )
    if mismatch:
        raise ParameterLoadError(mismatch)
    consumed = set()
    for key, arr in items:
        if key in consumed:
            raise ParameterLoadError(f"key '{PREFIX + key}' given twice")
        e = entries[key]
        arr = np.asarray(arr() if callable(arr) else arr)
        if tuple(arr.shape) != e.full_shape:
            raise ParameterLoadError(
                f"key '{PREFIX + key}' has shape {tuple(arr.shape)} in the file but the model expects {e.full_shape}"
            )
        with torch.no_grad():
            for i, p in enumerate(e.params):
                block = arr[i // e.parts] if e.stacked else arr
                if e.parts > 1:  # one of the parts along the last axis
                    block = np.split(block, e.parts, axis=-1)[i % e.parts]
                p.copy_(_to_torch(block, e.kind, p.shape).to(p.dtype))
        consumed.add(key)


def export_af2_params(model: AlphaFold, path: str | os.PathLike) -> None:
    """Write ``model``'s parameters as an AF2-format .npz (Haiku names, float32 as stored).

    Written atomically (:func:`alphafold_mem.io.atomic_write`).
    """
    arrays = {}
    for e in af2_entries(model):
        shape = e.af2_shape[:-1] + (e.af2_shape[-1] // e.parts,)
        parts = [_to_af2(p, e.kind, shape) for p in e.params]
        blocks = [np.concatenate(parts[i : i + e.parts], axis=-1) for i in range(0, len(parts), e.parts)]
        arrays[PREFIX + e.key] = np.stack(blocks) if e.stacked else blocks[0]
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
