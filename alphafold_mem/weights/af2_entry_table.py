"""The AF2 parameter key table: every AF2 key of a model (``params_model_*.npz`` and AF2-Multimer
v3's ``params_model_*_multimer_v3.npz``), the parameter(s) it fills and its layout.

AF2 key = ``alphafold/alphafold_iteration/`` + module path + ``//`` + parameter name. Linear weights
are ``[in, out]`` (torch: ``[out, in]``); attention projections are ``[in, H, C]`` / ``[H, C, out]``;
blocks of the Evoformer, extra-MSA and template pair stacks are stacked on a leading axis.
AF2-Multimer v3 fuses the triangle multiplication's left and right projections (and gates) into one
``[c, 2C]`` array each: [left half | right half] in AF2's naming, filling two of our layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from ..model.alphafold import AlphaFold

__all__ = ["af2_entries"]


@dataclass(frozen=True)
class _Entry:
    key: str  # AF2 key without PREFIX
    params: tuple[nn.Parameter, ...]  # one per block
    kind: str  # "w_in": AF2 [in, ...] -> torch reshape(in, -1).T; "w_out": [..., out] -> reshape(-1, out).T; "flat"
    af2_shape: tuple[int, ...]  # per-block AF2 shape
    stacked: bool
    #: parameters one block's array fills, split evenly along its last axis (AF2-Multimer v3's fused
    #: triangle-multiplication ``projection``/``gate``: [left half | right half])
    parts: int = 1

    @property
    def blocks(self) -> int:
        return len(self.params) // self.parts

    @property
    def full_shape(self) -> tuple[int, ...]:
        return ((self.blocks,) if self.stacked else ()) + self.af2_shape


class _Builder:
    def __init__(self, fused: bool = False):
        self.entries: list[_Entry] = []
        self.fused = fused

    def add(self, key, params, kind, af2_shape, stacked, parts=1):
        self.entries.append(_Entry(key, tuple(params), kind, tuple(af2_shape), stacked, parts))

    def fused_linear(self, key, left, right, stacked=False):
        """One AF2 Linear whose output is [left half | right half] of two of our layers."""
        w = left[0].weight
        params = [p for pair in zip(left, right) for p in (pair[0].weight, pair[1].weight)]
        self.add(f"{key}//weights", params, "w_in", (w.shape[1], 2 * w.shape[0]), stacked, parts=2)
        biases = [p for pair in zip(left, right) for p in (pair[0].bias, pair[1].bias)]
        self.add(f"{key}//bias", biases, "flat", (2 * w.shape[0],), stacked, parts=2)

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
        if self.fused:  # AF2-Multimer v3 names, projections and gates fused
            self.layer_norm(f"{key}/left_norm_input", [m.layer_norm_input for m in mods], stacked)
            self.layer_norm(f"{key}/center_norm", [m.center_layer_norm for m in mods], stacked)
            self.fused_linear(
                f"{key}/projection", [m.left_projection for m in mods], [m.right_projection for m in mods], stacked
            )
            self.fused_linear(f"{key}/gate", [m.left_gate for m in mods], [m.right_gate for m in mods], stacked)
            for name in ("output_projection", "gating_linear"):
                self.linear(f"{key}/{name}", [getattr(m, name) for m in mods], stacked)
            return
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
    """Every AF2 key of ``model``, the parameter(s) it fills and its layout: the monomer's
    ``params_model_*.npz`` names, or AF2-Multimer v3's (``params_model_*_multimer_v3.npz``) for a
    multimer config."""
    multimer = model.config.multimer
    b = _Builder(fused=multimer)
    evo = "evoformer/"
    ie, re_ = model.input_embedder, model.recycling_embedder
    for name in ("preprocess_1d", "preprocess_msa", "left_single", "right_single"):
        b.linear(evo + name, [getattr(ie, name)])
    if multimer:
        b.linear(evo + "~_relative_encoding/position_activations", [ie.position_activations])
    else:
        b.linear(evo + "pair_activiations", [ie.pair_activations])  # (sic) AF2's spelling
    b.linear(evo + "prev_pos_linear", [re_.prev_pos_linear])
    b.layer_norm(evo + "prev_msa_first_row_norm", [re_.prev_msa_first_row_norm])
    b.layer_norm(evo + "prev_pair_norm", [re_.prev_pair_norm])
    b.linear(evo + "extra_msa_activations", [model.extra_msa_embedder.extra_msa_activations])
    b.linear(evo + "single_activations", [model.evoformer.single_activations])
    b.evoformer_blocks(evo + "evoformer_iteration/", list(model.evoformer.blocks), global_column=False)
    b.evoformer_blocks(evo + "extra_msa_stack/", list(model.extra_msa_stack.blocks), global_column=True)
    te = model.template_embedding
    if te is not None and multimer:
        _template_multimer(b, te)
    elif te is not None:
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
    if multimer:
        key = fi + "invariant_point_attention/"
        for name in ("q_scalar_projection", "k_scalar_projection", "v_scalar_projection"):
            lin = getattr(ipa, name)
            b.add(f"{key}{name}//weights", [lin.weight], "w_in", (lin.in_features, ipa.h, ipa.c), False)
        for name, points in (("q_point", ipa.pq), ("k_point", ipa.pq), ("v_point", ipa.pv)):
            lin = getattr(ipa, f"{name}_projection")
            k = f"{key}{name}_projection/point_projection"
            b.add(f"{k}//weights", [lin.weight], "w_in", (lin.in_features, ipa.h, 3 * points), False)
            b.add(f"{k}//bias", [lin.bias], "flat", (ipa.h, 3 * points), False)
        for name in ("attention_2d", "output_projection"):
            b.linear(key + name, [getattr(ipa, name)])
    else:
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
    b.linear(fi + ("quat_rigid/rigid" if multimer else "affine_update"), [sm.affine_update])
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


def _template_multimer(b: _Builder, te) -> None:
    """AF2-Multimer's template embedding keys (``template_pair_embedding_0`` ... ``_8``, the stack as
    ``template_embedding_iteration``, ``output_linear``, the template single embedding)."""
    t = "evoformer/template_embedding/"
    st = t + "single_template_embedding/"
    b.layer_norm(st + "query_embedding_norm", [te.query_embedding_norm])
    for i, lin in enumerate(te.template_pair_embedding):
        b.linear(st + f"template_pair_embedding_{i}", [lin])
    b.pair_updates(st + "template_embedding_iteration/", list(te.blocks))
    b.layer_norm(st + "output_layer_norm", [te.output_layer_norm])
    b.linear(t + "output_linear", [te.output_linear])
    b.linear("evoformer/template_single_embedding", [te.template_single_embedding])
    b.linear("evoformer/template_projection", [te.template_projection])
