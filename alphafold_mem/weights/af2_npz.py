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
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import torch
import torch.nn as nn

from ..config import ModelConfig, model_config
from ..io import atomic_write
from ..model.alphafold import AlphaFold
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


@dataclass(frozen=True)
class _Entry:
    key: str  # AF2 key without PREFIX
    params: tuple[nn.Parameter, ...]  # one per block
    kind: str  # "w_in": AF2 [in, ...] -> torch reshape(in, -1).T; "w_out": [..., out] -> reshape(-1, out).T; "flat"
    af2_shape: tuple[int, ...]  # per-block AF2 shape
    stacked: bool

    @property
    def full_shape(self) -> tuple[int, ...]:
        return ((len(self.params),) if self.stacked else ()) + self.af2_shape


class _Builder:
    def __init__(self):
        self.entries: list[_Entry] = []

    def add(self, key, params, kind, af2_shape, stacked):
        self.entries.append(_Entry(key, tuple(params), kind, tuple(af2_shape), stacked))

    # mods: list of modules (one per block); stacked says whether the AF2 array has a block axis
    def linear(self, key, mods, stacked=False):
        w = mods[0].weight
        self.add(f"{key}//weights", [m.weight for m in mods], "w_in", (w.shape[1], w.shape[0]), stacked)
        if mods[0].bias is not None:
            self.add(f"{key}//bias", [m.bias for m in mods], "flat", tuple(mods[0].bias.shape), stacked)

    def layer_norm(self, key, mods, stacked=False):
        c = mods[0].weight.shape[0]
        self.add(f"{key}//scale", [m.weight for m in mods], "flat", (c,), stacked)
        self.add(f"{key}//offset", [m.bias for m in mods], "flat", (c,), stacked)

    def attention(self, key, mods, stacked=False):
        a = mods[0]
        h, c = a.num_heads, a.c_hidden
        self.add(f"{key}//query_w", [m.linear_q.weight for m in mods], "w_in", (a.linear_q.in_features, h, c), stacked)
        self.add(f"{key}//key_w", [m.linear_k.weight for m in mods], "w_in", (a.linear_k.in_features, h, c), stacked)
        self.add(f"{key}//value_w", [m.linear_v.weight for m in mods], "w_in", (a.linear_v.in_features, h, c), stacked)
        if a.linear_g is not None:
            self.add(
                f"{key}//gating_w", [m.linear_g.weight for m in mods], "w_in", (a.linear_g.in_features, h, c), stacked
            )
            self.add(f"{key}//gating_b", [m.linear_g.bias for m in mods], "flat", (h, c), stacked)
        self.add(
            f"{key}//output_w", [m.linear_o.weight for m in mods], "w_out", (h, c, a.linear_o.out_features), stacked
        )
        self.add(f"{key}//output_b", [m.linear_o.bias for m in mods], "flat", (a.linear_o.out_features,), stacked)

    def global_attention(self, key, mods, stacked=False):
        a = mods[0]
        h, c = a.num_heads, a.c_hidden
        c_in = a.linear_q.in_features
        self.add(f"{key}//query_w", [m.linear_q.weight for m in mods], "w_in", (c_in, h, c), stacked)
        self.add(f"{key}//key_w", [m.linear_k.weight for m in mods], "w_in", (c_in, c), stacked)
        self.add(f"{key}//value_w", [m.linear_v.weight for m in mods], "w_in", (c_in, c), stacked)
        self.add(f"{key}//gating_w", [m.linear_g.weight for m in mods], "w_in", (c_in, h, c), stacked)
        self.add(f"{key}//gating_b", [m.linear_g.bias for m in mods], "flat", (h, c), stacked)
        self.add(
            f"{key}//output_w", [m.linear_o.weight for m in mods], "w_out", (h, c, a.linear_o.out_features), stacked
        )
        self.add(f"{key}//output_b", [m.linear_o.bias for m in mods], "flat", (a.linear_o.out_features,), stacked)

    def transition(self, key, mods, stacked=False):
        self.layer_norm(f"{key}/input_layer_norm", [m.layer_norm for m in mods], stacked)
        self.linear(f"{key}/transition1", [m.linear_1 for m in mods], stacked)
        self.linear(f"{key}/transition2", [m.linear_2 for m in mods], stacked)

    def pair_bias_weights(self, key, mods, stacked=False):
        """AF2's bias-free pair-bias projection: ``<key>//feat_2d_weights`` ``[c_z, H]``."""
        w = mods[0].weight
        self.add(f"{key}//feat_2d_weights", [m.weight for m in mods], "w_in", (w.shape[1], w.shape[0]), stacked)

    def triangle_attention(self, key, mods, stacked=False):
        self.layer_norm(f"{key}/query_norm", [m.query_norm for m in mods], stacked)
        self.pair_bias_weights(key, [m.feat_2d_weights for m in mods], stacked)
        self.attention(f"{key}/attention", [m.attention for m in mods], stacked)

    def triangle_multiplication(self, key, mods, stacked=False):
        for name in ("layer_norm_input", "center_layer_norm"):
            self.layer_norm(f"{key}/{name}", [getattr(m, name) for m in mods], stacked)
        for name in (
            "left_projection",
            "right_projection",
            "left_gate",
            "right_gate",
            "output_projection",
            "gating_linear",
        ):
            self.linear(f"{key}/{name}", [getattr(m, name) for m in mods], stacked)

    def pair_updates(self, key, blocks, stacked=True):
        for name in ("triangle_multiplication_outgoing", "triangle_multiplication_incoming"):
            self.triangle_multiplication(f"{key}{name}", [getattr(b, name) for b in blocks], stacked)
        for name in ("triangle_attention_starting_node", "triangle_attention_ending_node"):
            self.triangle_attention(f"{key}{name}", [getattr(b, name) for b in blocks], stacked)
        self.transition(f"{key}pair_transition", [b.pair_transition for b in blocks], stacked)

    def evoformer_blocks(self, key, blocks, global_column: bool):
        row = [b.msa_row_attention_with_pair_bias for b in blocks]
        self.layer_norm(f"{key}msa_row_attention_with_pair_bias/query_norm", [r.query_norm for r in row], True)
        self.layer_norm(f"{key}msa_row_attention_with_pair_bias/feat_2d_norm", [r.feat_2d_norm for r in row], True)
        self.pair_bias_weights(f"{key}msa_row_attention_with_pair_bias", [r.feat_2d_weights for r in row], True)
        self.attention(f"{key}msa_row_attention_with_pair_bias/attention", [r.attention for r in row], True)
        col = [b.msa_column_attention for b in blocks]
        if global_column:
            self.layer_norm(f"{key}msa_column_global_attention/query_norm", [c.query_norm for c in col], True)
            self.global_attention(f"{key}msa_column_global_attention/attention", [c.attention for c in col], True)
        else:
            self.layer_norm(f"{key}msa_column_attention/query_norm", [c.query_norm for c in col], True)
            self.attention(f"{key}msa_column_attention/attention", [c.attention for c in col], True)
        self.transition(f"{key}msa_transition", [b.msa_transition for b in blocks], True)
        opm = [b.outer_product_mean for b in blocks]
        self.layer_norm(f"{key}outer_product_mean/layer_norm_input", [o.layer_norm_input for o in opm], True)
        self.linear(f"{key}outer_product_mean/left_projection", [o.left_projection for o in opm], True)
        self.linear(f"{key}outer_product_mean/right_projection", [o.right_projection for o in opm], True)
        c = opm[0].left_projection.out_features
        self.add(
            f"{key}outer_product_mean//output_w",
            [o.output.weight for o in opm],
            "w_out",
            (c, c, opm[0].output.out_features),
            True,
        )
        self.add(
            f"{key}outer_product_mean//output_b",
            [o.output.bias for o in opm],
            "flat",
            (opm[0].output.out_features,),
            True,
        )
        self.pair_updates(key, [b.pair_updates for b in blocks])


def af2_entries(model: AlphaFold) -> list[_Entry]:
    """Every AF2 key of ``model``, the parameter(s) it fills and its layout."""
    b = _Builder()
    evo = "evoformer/"
    ie, re_ = model.input_embedder, model.recycling_embedder
    for name in ("preprocess_1d", "preprocess_msa", "left_single", "right_single"):
        b.linear(evo + name, [getattr(ie, name)])
    b.linear(evo + "pair_activiations", [ie.pair_activations])  # (sic) AF2's spelling
    b.linear(evo + "prev_pos_linear", [re_.prev_pos_linear])
    b.layer_norm(evo + "prev_msa_first_row_norm", [re_.prev_msa_first_row_norm])
    b.layer_norm(evo + "prev_pair_norm", [re_.prev_pair_norm])
    b.linear(evo + "extra_msa_activations", [model.extra_msa_embedder.extra_msa_activations])
    b.linear(evo + "single_activations", [model.evoformer.single_activations])
    b.evoformer_blocks(evo + "evoformer_iteration/", list(model.evoformer.blocks), global_column=False)
    b.evoformer_blocks(evo + "extra_msa_stack/", list(model.extra_msa_stack.blocks), global_column=True)
    te = model.template_embedding
    if te is not None:
        t = evo + "template_embedding/"
        b.linear(t + "single_template_embedding/embedding2d", [te.embedding2d])
        b.layer_norm(t + "single_template_embedding/output_layer_norm", [te.output_layer_norm])
        tps = t + "single_template_embedding/template_pair_stack/__layer_stack_no_state/"
        b.pair_updates(tps, list(te.blocks))
        b.attention(t + "attention", [te.pointwise_attention.attention])
        if te.cfg.embed_angles:
            b.linear(evo + "template_single_embedding", [te.template_single_embedding])
            b.linear(evo + "template_projection", [te.template_projection])
    sm = model.structure_module
    b.layer_norm("structure_module/single_layer_norm", [sm.single_layer_norm])
    b.layer_norm("structure_module/pair_layer_norm", [sm.pair_layer_norm])
    b.linear("structure_module/initial_projection", [sm.initial_projection])
    fi = "structure_module/fold_iteration/"
    ipa = sm.invariant_point_attention
    for name in ("q_scalar", "kv_scalar", "q_point_local", "kv_point_local", "attention_2d", "output_projection"):
        b.linear(fi + "invariant_point_attention/" + name, [getattr(ipa, name)])
    b.add(
        fi + "invariant_point_attention//trainable_point_weights",
        [ipa.trainable_point_weights],
        "flat",
        tuple(ipa.trainable_point_weights.shape),
        False,
    )
    b.layer_norm(fi + "attention_layer_norm", [sm.attention_layer_norm])
    b.layer_norm(fi + "transition_layer_norm", [sm.transition_layer_norm])
    for i, lin in enumerate(sm.transition):
        b.linear(fi + "transition" + ("" if i == 0 else f"_{i}"), [lin])
    b.linear(fi + "affine_update", [sm.affine_update])
    rs = sm.rigid_sidechain
    b.linear(fi + "rigid_sidechain/input_projection", [rs.input_projection])
    b.linear(fi + "rigid_sidechain/input_projection_1", [rs.input_projection_1])
    for i, blk in enumerate(rs.resblocks):
        suffix = "" if i == 0 else f"_{i}"
        b.linear(fi + f"rigid_sidechain/resblock1{suffix}", [blk["linear_1"]])
        b.linear(fi + f"rigid_sidechain/resblock2{suffix}", [blk["linear_2"]])
    b.linear(fi + "rigid_sidechain/unnormalized_angles", [rs.unnormalized_angles])
    h = model.aux_heads
    b.layer_norm("predicted_lddt_head/input_layer_norm", [h.predicted_lddt.input_layer_norm])
    for name in ("act_0", "act_1", "logits"):
        b.linear(f"predicted_lddt_head/{name}", [getattr(h.predicted_lddt, name)])
    b.linear("distogram_head/half_logits", [h.distogram.half_logits])
    b.linear("masked_msa_head/logits", [h.masked_msa])
    b.linear("experimentally_resolved_head/logits", [h.experimentally_resolved])
    if h.predicted_aligned_error is not None:
        b.linear("predicted_aligned_error_head/logits", [h.predicted_aligned_error])
    return b.entries


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
    paths (``"c_m"``, ``"evoformer.num_blocks"``, ``"template.enabled"``, ``"heads.pae_enabled"``, ...);
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

    def stack(prefix, name, c_msa):
        q = shp(prefix + "msa_row_attention_with_pair_bias/attention//query_w")
        tri = shp(prefix + "triangle_attention_starting_node/attention//query_w")
        o[f"{name}.num_blocks"] = q[0]
        o[f"{name}.num_heads_msa"], o[f"{name}.c_hidden_msa_att"] = q[2], q[3]
        o[f"{name}.num_heads_pair"], o[f"{name}.c_hidden_pair_att"] = tri[2], tri[3]
        o[f"{name}.c_hidden_opm"] = shp(prefix + "outer_product_mean/left_projection//weights")[2]
        o[f"{name}.c_hidden_mul"] = shp(prefix + "triangle_multiplication_outgoing/left_projection//weights")[2]
        o[f"{name}.transition_n"] = shp(prefix + "msa_transition/transition1//weights")[2] // c_msa

    stack(evo + "evoformer_iteration/", "evoformer", o["c_m"])
    stack(evo + "extra_msa_stack/", "extra_msa", o["c_e"])
    t = evo + "template_embedding/"
    has_templates = t + "single_template_embedding/embedding2d//weights" in shapes
    o["template.enabled"] = has_templates
    if has_templates:
        o["c_t"] = shp(t + "single_template_embedding/embedding2d//weights")[1]
        tps = t + "single_template_embedding/template_pair_stack/__layer_stack_no_state/"
        tri = shp(tps + "triangle_attention_starting_node/attention//query_w")
        o["template.pair_stack.num_blocks"] = tri[0]
        o["template.pair_stack.num_heads_tri_att"], o["template.pair_stack.c_hidden_tri_att"] = tri[2], tri[3]
        o["template.pair_stack.c_hidden_tri_mul"] = shp(
            tps + "triangle_multiplication_outgoing/left_projection//weights"
        )[2]
        o["template.pair_stack.transition_n"] = shp(tps + "pair_transition/transition1//weights")[2] // o["c_t"]
        pq = shp(t + "attention//query_w")
        o["template.pointwise_num_heads"], o["template.pointwise_c_hidden"] = pq[1], pq[2]
        o["template.embed_angles"] = evo + "template_single_embedding//weights" in shapes
    fi = "structure_module/fold_iteration/"
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
    cfg = infer_config(shapes, preset)
    with torch.device("meta"):
        model = AlphaFold(cfg)
    model = model.to_empty(device="cpu")
    with np.load(path) as npz:
        names = {_strip(k): k for k in npz.files}
        load_af2_arrays(model, ((k, lambda k=k: npz[names[k]]) for k in names), set(names))
    return model.eval()


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
                block = arr[i] if e.stacked else arr
                p.copy_(_to_torch(block, e.kind, p.shape).to(p.dtype))
        consumed.add(key)


def export_af2_params(model: AlphaFold, path: str | os.PathLike) -> None:
    """Write ``model``'s parameters as an AF2-format .npz (Haiku names, float32 as stored).

    Written atomically (:func:`alphafold_mem.io.atomic_write`).
    """
    arrays = {}
    for e in af2_entries(model):
        blocks = [_to_af2(p, e.kind, e.af2_shape) for p in e.params]
        arrays[PREFIX + e.key] = np.stack(blocks) if e.stacked else blocks[0]
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
