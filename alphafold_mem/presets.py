"""The named presets of :func:`alphafold_mem.config.model_config` as override tables: dotted
config paths and their values over the AF2 defaults of :class:`alphafold_mem.config.ModelConfig`
(see that module's docstring for what each preset is)."""

from __future__ import annotations

from typing import Any

__all__ = ["MULTIMER_FINETUNING_LOSS", "MULTIMER_PRESETS", "PRESETS", "preset_overrides"]

#: Loss weights of AF2-Multimer fine-tuning (``apply_overrides`` keys): FAPE 0.5 intra-chain +
#: 0.5 interface backbone + 0.5 side chain, always clamped; violation 0.03 with clashes averaged
#: per atom; PAE/TM 0.1; chain centre of mass once (its 1/20 Å scale is inside the term, see
#: :func:`alphafold_mem.losses.multimer.chain_center_of_mass_loss`); experimentally resolved 0.
MULTIMER_FINETUNING_LOSS: dict[str, Any] = {
    "loss.fape_clamp_probability": 1.0,
    "loss.backbone_fape_weight": 0.5,
    "loss.interface_fape_weight": 0.5,
    "loss.sidechain_fape_weight": 0.5,
    "loss.supervised_chi_weight": 0.5,
    "loss.angle_norm_weight": 0.01,
    "loss.distogram_weight": 0.3,
    "loss.masked_msa_weight": 2.0,
    "loss.plddt_weight": 0.01,
    "loss.experimentally_resolved_weight": 0.0,
    "loss.violation_weight": 0.03,
    "loss.pae_weight": 0.1,
    "loss.chain_center_of_mass_weight": 1.0,
    "loss.average_clashes": True,
}


_MODEL_DIFFS: dict[str, dict[str, Any]] = {
    # AF2 config.py CONFIG_DIFFS: templates on for models 1-2; extra MSA 5120 for models 1, 3, 4.
    "model_1": {"data.max_extra_msa": 5120},
    "model_2": {},
    "model_3": {"template.enabled": False, "data.max_extra_msa": 5120},
    "model_4": {"template.enabled": False, "data.max_extra_msa": 5120},
    "model_5": {"template.enabled": False},
}


def _stack(
    path: str,
    num_blocks: int,
    c_hidden_msa_att: int,
    num_heads_msa: int,
    c_hidden_opm: int,
    c_hidden_mul: int,
    c_hidden_pair_att: int,
    num_heads_pair: int,
) -> dict[str, int]:
    """Overrides of one Evoformer-style stack (``evoformer`` or ``extra_msa``) as dotted paths."""
    sizes = dict(
        num_blocks=num_blocks,
        c_hidden_msa_att=c_hidden_msa_att,
        num_heads_msa=num_heads_msa,
        c_hidden_opm=c_hidden_opm,
        c_hidden_mul=c_hidden_mul,
        c_hidden_pair_att=c_hidden_pair_att,
        num_heads_pair=num_heads_pair,
    )
    return {f"{path}.{k}": v for k, v in sizes.items()}


_TINY = {
    "c_m": 16,
    "c_z": 8,
    "c_s": 24,
    "c_t": 8,
    "c_e": 8,
    "num_recycles": 1,
    **_stack("evoformer", 2, 4, 2, 4, 8, 4, 2),
    **_stack("extra_msa", 1, 4, 2, 4, 8, 4, 2),
    "template.pair_stack.num_blocks": 1,
    "template.pair_stack.c_hidden_tri_att": 4,
    "template.pair_stack.num_heads_tri_att": 2,
    "template.pair_stack.c_hidden_tri_mul": 8,
    "template.pointwise_c_hidden": 4,
    "template.pointwise_num_heads": 2,
    "template.max_templates": 2,
    "structure_module.num_layers": 3,
    "structure_module.c_ipa": 4,
    "structure_module.num_heads_ipa": 2,
    "structure_module.num_qk_points": 2,
    "structure_module.num_v_points": 3,
    "structure_module.c_resnet": 8,
    "heads.plddt_c_hidden": 16,
    "heads.pae_enabled": True,
    "data.max_msa_clusters": 16,
    "data.max_extra_msa": 32,
    "data.crop_size": 64,
}

_DEMO = {
    "c_m": 32,
    "c_z": 32,
    "c_s": 64,
    "c_t": 16,
    "c_e": 16,
    "num_recycles": 1,
    "template.enabled": False,
    **_stack("evoformer", 4, 8, 4, 8, 32, 8, 4),
    **_stack("extra_msa", 1, 8, 4, 8, 16, 8, 4),
    "structure_module.num_layers": 4,
    "structure_module.c_ipa": 16,
    "structure_module.num_heads_ipa": 4,
    "structure_module.c_resnet": 32,
    "heads.plddt_c_hidden": 32,
    "heads.pae_enabled": True,
    "data.max_msa_clusters": 32,
    "data.max_extra_msa": 128,
    "data.crop_size": 96,
}

# Suppl. Table 4: initial training vs fine-tuning sample sizes and loss weights.
_INITIAL_TRAINING = {
    "data.crop_size": 256,
    "data.max_msa_clusters": 128,
    "data.max_extra_msa": 1024,
    "loss.violation_weight": 0.0,
    "loss.experimentally_resolved_weight": 0.0,
}
_FINETUNING = {
    "data.crop_size": 384,
    "data.max_msa_clusters": 512,
    "data.max_extra_msa": 5120,
    "loss.violation_weight": 1.0,
    "loss.experimentally_resolved_weight": 0.01,
}

# AF2-Multimer (Evans et al. 2021; AF2 v2.3 ``config.py`` CONFIG_MULTIMER): the monomer's channels,
# heads and blocks, with the multimer's own parts switched on (ModelConfig.multimer), the outer
# product mean first, triangle multiplications first in the template stack, chain-relative position
# encoding (max_relative_chain 2), a 21-wide target_feat, template single features of 34 channels,
# structure-module translations in units of 20 Å, 22 masked-MSA classes, the PAE head and ipTM, 508
# MSA clusters and 2048 extra sequences, 20 recycling iterations with early stopping at 0.5 Å.
_MULTIMER = {
    "multimer": True,
    "input_embedder.tf_dim": 21,
    "input_embedder.max_relative_chain": 2,
    "template.angle_feat_dim": 34,
    "template.pair_stack.tri_mul_first": True,
    "evoformer.opm_first": True,
    "extra_msa.opm_first": True,
    "structure_module.position_scale": 20.0,
    "heads.masked_msa_num_classes": 22,
    "heads.pae_enabled": True,
    "heads.iptm_enabled": True,
    "num_recycles": 20,
    "recycle_early_stop_tolerance": 0.5,
    "data.max_msa_clusters": 508,
    "data.max_extra_msa": 2048,
    "data.reduce_msa_clusters_by_max_templates": False,
    **MULTIMER_FINETUNING_LOSS,
}
# AF2 v2.3 CONFIG_DIFFS: models 4 and 5 of multimer v3 sample 1152 extra sequences.
_MULTIMER_DIFFS = {
    "model_1": {},
    "model_2": {},
    "model_3": {},
    "model_4": {"data.max_extra_msa": 1152},
    "model_5": {"data.max_extra_msa": 1152},
}
# A small multimer network for tests (the tiny preset's sizes, multimer parts on).
_TINY_MULTIMER = {**_TINY, **_MULTIMER, "num_recycles": 1, "data.max_msa_clusters": 16, "data.max_extra_msa": 32}

#: The AF2-Multimer presets (parameter files ``params_model_{1..5}_multimer_v3.npz``).
MULTIMER_PRESETS: tuple[str, ...] = tuple(f"model_{i}_multimer_v3" for i in range(1, 6)) + ("tiny_multimer",)

PRESETS: tuple[str, ...] = (
    ("tiny", "demo", "initial_training", "finetuning")
    + tuple(f"model_{i}" for i in range(1, 6))
    + tuple(f"model_{i}_ptm" for i in range(1, 6))
    + MULTIMER_PRESETS
)


def preset_overrides(preset: str) -> dict[str, Any]:
    """The overrides that make ``preset`` from the AF2 defaults, in the order they apply.

    Raises:
        KeyError: ``preset`` is not one of :data:`PRESETS`.
    """
    if preset == "tiny":
        return dict(_TINY)
    if preset == "tiny_multimer":
        return dict(_TINY_MULTIMER)
    if preset.endswith("_multimer_v3"):
        return {**_MULTIMER, **_MULTIMER_DIFFS[preset.removesuffix("_multimer_v3")]}
    if preset == "demo":
        return dict(_DEMO)
    if preset == "initial_training":
        return {**_MODEL_DIFFS["model_1"], **_INITIAL_TRAINING}
    if preset == "finetuning":
        return {**_MODEL_DIFFS["model_1"], **_FINETUNING}
    base = preset.removesuffix("_ptm")
    if base not in _MODEL_DIFFS:
        raise KeyError(preset)
    diffs = dict(_MODEL_DIFFS[base])
    if preset.endswith("_ptm"):
        diffs.update({"heads.pae_enabled": True, "loss.pae_weight": 0.1})
    return diffs
