"""The AF2-Multimer v3 model has exactly the parameter names and shapes of AF2's
``params_model_*_multimer_v3.npz``, from the architecture alone (no parameter file).

The table below is written from AF2-Multimer's module layout (AF2 v2.3 ``modules_multimer.py``,
``modules.py``, ``folding_multimer.py``; Haiku names), independently of :mod:`alphafold_mem.weights`:
its rules are first checked against the parity set's manifest (every key and shape of a real
multimer v3 file made by OpenFold's exporter layout at small sizes), then applied at AF2's published
full sizes and compared with the model's key table and parameter count.
"""

import json
from pathlib import Path

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.weights.af2_entry_table import af2_entries

PARITY = Path(__file__).parent / "data" / "parity_multimer"
PREFIX = "alphafold/alphafold_iteration/"


def _af2_multimer_table(s: dict) -> dict[str, tuple[int, ...]]:
    """Every AF2-Multimer v3 key (without PREFIX) and its shape, from the architecture sizes ``s``."""
    t: dict[str, tuple[int, ...]] = {}

    def linear(key, c_in, c_out, bias=True, lead=()):
        t[f"{key}//weights"] = (*lead, c_in, c_out)
        if bias:
            t[f"{key}//bias"] = (*lead, c_out)

    def norm(key, c, lead=()):
        t[f"{key}//scale"] = t[f"{key}//offset"] = (*lead, c)

    def attention(key, c_in, h, c, lead=(), global_kv=False):
        t[f"{key}//query_w"] = (*lead, c_in, h, c)
        kv = (*lead, c_in, c) if global_kv else (*lead, c_in, h, c)
        t[f"{key}//key_w"] = t[f"{key}//value_w"] = kv
        t[f"{key}//gating_w"] = (*lead, c_in, h, c)
        t[f"{key}//gating_b"] = (*lead, h, c)
        t[f"{key}//output_w"] = (*lead, h, c, c_in)
        t[f"{key}//output_b"] = (*lead, c_in)

    def transition(key, c, n, lead):
        norm(f"{key}/input_layer_norm", c, lead)
        linear(f"{key}/transition1", c, n * c, lead=lead)
        linear(f"{key}/transition2", n * c, c, lead=lead)

    def pair_stack(key, c_z, heads, c_att, c_mul, n, lead):
        for d in ("outgoing", "incoming"):  # v3: fused [left | right] projection and gate
            k = f"{key}triangle_multiplication_{d}"
            norm(f"{k}/left_norm_input", c_z, lead)
            linear(f"{k}/projection", c_z, 2 * c_mul, lead=lead)
            linear(f"{k}/gate", c_z, 2 * c_mul, lead=lead)
            norm(f"{k}/center_norm", c_mul, lead)
            linear(f"{k}/output_projection", c_mul, c_z, lead=lead)
            linear(f"{k}/gating_linear", c_z, c_z, lead=lead)
        for d in ("starting", "ending"):
            k = f"{key}triangle_attention_{d}_node"
            norm(f"{k}/query_norm", c_z, lead)
            t[f"{k}//feat_2d_weights"] = (*lead, c_z, heads)
            attention(f"{k}/attention", c_z, heads, c_att, lead)
        transition(f"{key}pair_transition", c_z, n, lead)

    def msa_stack(key, c_m, st, global_column):
        lead = (st["blocks"],)
        row = f"{key}msa_row_attention_with_pair_bias"
        norm(f"{row}/query_norm", c_m, lead)
        norm(f"{row}/feat_2d_norm", s["c_z"], lead)
        t[f"{row}//feat_2d_weights"] = (*lead, s["c_z"], st["heads_msa"])
        attention(f"{row}/attention", c_m, st["heads_msa"], st["c_msa"], lead)
        col = f"{key}msa_column_{'global_' if global_column else ''}attention"
        norm(f"{col}/query_norm", c_m, lead)
        attention(f"{col}/attention", c_m, st["heads_msa"], st["c_msa"], lead, global_kv=global_column)
        transition(f"{key}msa_transition", c_m, 4, lead)
        opm = f"{key}outer_product_mean"
        norm(f"{opm}/layer_norm_input", c_m, lead)
        linear(f"{opm}/left_projection", c_m, st["c_opm"], lead=lead)
        linear(f"{opm}/right_projection", c_m, st["c_opm"], lead=lead)
        t[f"{opm}//output_w"] = (*lead, st["c_opm"], st["c_opm"], s["c_z"])
        t[f"{opm}//output_b"] = (*lead, s["c_z"])
        pair_stack(key, s["c_z"], st["heads_pair"], st["c_pair"], st["c_mul"], 4, lead)

    c_m, c_z, c_s, c_t, c_e = s["c_m"], s["c_z"], s["c_s"], s["c_t"], s["c_e"]
    e = "evoformer/"
    # input embedding: target_feat 21, msa_feat 49, relative encoding 2*32+2 + 1 + 2*2+2
    linear(e + "preprocess_1d", 21, c_m)
    linear(e + "preprocess_msa", 49, c_m)
    linear(e + "left_single", 21, c_z)
    linear(e + "right_single", 21, c_z)
    linear(e + "~_relative_encoding/position_activations", 73, c_z)
    linear(e + "prev_pos_linear", 15, c_z)
    norm(e + "prev_msa_first_row_norm", c_m)
    norm(e + "prev_pair_norm", c_z)
    linear(e + "extra_msa_activations", 25, c_e)
    linear(e + "single_activations", c_m, c_s)
    msa_stack(e + "evoformer_iteration/", c_m, s["evoformer"], global_column=False)
    msa_stack(e + "extra_msa_stack/", c_e, s["extra"], global_column=True)
    # templates: 9 per-template pair features (distogram 39, pseudo-beta mask, aatype j, aatype i,
    # unit vector x/y/z, backbone mask, normed query pair), each projected to c_t
    st = e + "template_embedding/single_template_embedding/"
    norm(st + "query_embedding_norm", c_z)
    for i, c_in in enumerate((39, 1, 22, 22, 1, 1, 1, 1, c_z)):
        linear(f"{st}template_pair_embedding_{i}", c_in, c_t)
    tp = s["template"]
    pair_stack(st + "template_embedding_iteration/", c_t, tp["heads"], tp["c_att"], tp["c_mul"], 2, (tp["blocks"],))
    norm(st + "output_layer_norm", c_t)
    linear(e + "template_embedding/output_linear", c_t, c_z)
    linear(e + "template_single_embedding", 34, c_m)
    linear(e + "template_projection", c_m, c_m)
    # structure module (one shared fold iteration)
    sm, fi = s["sm"], "structure_module/fold_iteration/"
    norm("structure_module/single_layer_norm", c_s)
    norm("structure_module/pair_layer_norm", c_z)
    linear("structure_module/initial_projection", c_s, c_s)
    ipa, h = fi + "invariant_point_attention/", sm["heads"]
    for name in ("q", "k", "v"):
        t[f"{ipa}{name}_scalar_projection//weights"] = (c_s, h, sm["c_ipa"])
        points = sm["v_points"] if name == "v" else sm["qk_points"]
        t[f"{ipa}{name}_point_projection/point_projection//weights"] = (c_s, h, 3 * points)
        t[f"{ipa}{name}_point_projection/point_projection//bias"] = (h, 3 * points)
    t[ipa + "/trainable_point_weights"] = (h,)
    linear(ipa + "attention_2d", c_z, h)
    linear(ipa + "output_projection", h * (c_z + sm["c_ipa"] + 4 * sm["v_points"]), c_s)
    norm(fi + "attention_layer_norm", c_s)
    norm(fi + "transition_layer_norm", c_s)
    for name in ("transition", "transition_1", "transition_2"):
        linear(fi + name, c_s, c_s)
    linear(fi + "quat_rigid/rigid", c_s, 6)
    rs, c_r = fi + "rigid_sidechain/", sm["c_resnet"]
    linear(rs + "input_projection", c_s, c_r)
    linear(rs + "input_projection_1", c_s, c_r)
    for i in range(sm["resnet_blocks"]):
        suffix = f"_{i}" if i else ""
        linear(f"{rs}resblock1{suffix}", c_r, c_r)
        linear(f"{rs}resblock2{suffix}", c_r, c_r)
    linear(rs + "unnormalized_angles", c_r, 14)
    # heads
    norm("predicted_lddt_head/input_layer_norm", c_s)
    linear("predicted_lddt_head/act_0", c_s, s["plddt_hidden"])
    linear("predicted_lddt_head/act_1", s["plddt_hidden"], s["plddt_hidden"])
    linear("predicted_lddt_head/logits", s["plddt_hidden"], 50)
    linear("distogram_head/half_logits", c_z, 64)
    linear("masked_msa_head/logits", c_m, 22)
    linear("experimentally_resolved_head/logits", c_s, 37)
    linear("predicted_aligned_error_head/logits", c_z, 64)
    return t


def _sizes_from_openfold(cfg: dict) -> dict:
    """The table's sizes from an OpenFold config (the parity set's resolved config)."""
    g, m = cfg["globals"], cfg["model"]
    evo, extra = m["evoformer_stack"], m["extra_msa"]["extra_msa_stack"]
    tps, sm = m["template"]["template_pair_stack"], m["structure_module"]

    def stack(d):
        return {
            "blocks": d["no_blocks"],
            "heads_msa": d["no_heads_msa"],
            "c_msa": d["c_hidden_msa_att"],
            "c_opm": d["c_hidden_opm"],
            "heads_pair": d["no_heads_pair"],
            "c_pair": d["c_hidden_pair_att"],
            "c_mul": d["c_hidden_mul"],
        }

    return {
        **{k: g[k] for k in ("c_m", "c_z", "c_s", "c_t", "c_e")},
        "evoformer": stack(evo),
        "extra": stack(extra),
        "template": {
            "blocks": tps["no_blocks"],
            "heads": tps["no_heads"],
            "c_att": tps["c_hidden_tri_att"],
            "c_mul": tps["c_hidden_tri_mul"],
        },
        "sm": {
            "heads": sm["no_heads_ipa"],
            "c_ipa": sm["c_ipa"],
            "qk_points": sm["no_qk_points"],
            "v_points": sm["no_v_points"],
            "c_resnet": sm["c_resnet"],
            "resnet_blocks": sm["no_resnet_blocks"],
        },
        "plddt_hidden": m["heads"]["lddt"]["c_hidden"],
    }


#: AF2-Multimer v3's published sizes (AF2 v2.3 config.py CONFIG_MULTIMER; Evans et al. 2021).
AF2_MULTIMER_SIZES = {
    "c_m": 256,
    "c_z": 128,
    "c_s": 384,
    "c_t": 64,
    "c_e": 64,
    "evoformer": {"blocks": 48, "heads_msa": 8, "c_msa": 32, "c_opm": 32, "heads_pair": 4, "c_pair": 32, "c_mul": 128},
    "extra": {"blocks": 4, "heads_msa": 8, "c_msa": 8, "c_opm": 32, "heads_pair": 4, "c_pair": 32, "c_mul": 128},
    "template": {"blocks": 2, "heads": 4, "c_att": 16, "c_mul": 64},
    "sm": {"heads": 12, "c_ipa": 16, "qk_points": 4, "v_points": 8, "c_resnet": 128, "resnet_blocks": 2},
    "plddt_hidden": 128,
}


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_table_rules_reproduce_the_parity_manifest():
    manifest = json.loads((PARITY / "weights_manifest.json").read_text())
    config = json.loads((PARITY / "config.json").read_text())
    table = _af2_multimer_table(_sizes_from_openfold(config["resolved_openfold_config"]))
    expected = {k.removeprefix(PREFIX): tuple(v["shape"]) for k, v in manifest.items()}
    assert set(table) == set(expected), (sorted(set(table) - set(expected))[:3], sorted(set(expected) - set(table))[:3])
    assert {k: v for k, v in table.items() if expected[k] != v} == {}


@pytest.mark.parametrize("preset", ["model_1_multimer_v3", "model_5_multimer_v3"])
def test_full_size_model_has_af2_multimer_v3_names_shapes_and_parameter_count(preset):
    table = _af2_multimer_table(AF2_MULTIMER_SIZES)
    with torch.device("meta"):
        model = AlphaFold(model_config(preset))
    entries = {e.key: e.full_shape for e in af2_entries(model)}
    assert set(entries) == set(table), (sorted(set(entries) - set(table))[:3], sorted(set(table) - set(entries))[:3])
    assert {k: v for k, v in entries.items() if table[k] != v} == {}
    total = sum(_numel(v) for v in table.values())  # derived from AF2's sizes, not a stored figure
    assert sum(p.numel() for p in model.parameters()) == total
    # every parameter is filled by exactly one key part (no parameter outside the table)
    filled = [id(p) for e in af2_entries(model) for p in e.params]
    assert len(filled) == len(set(filled)) == len(list(model.parameters()))
