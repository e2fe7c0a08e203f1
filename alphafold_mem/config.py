"""Typed, frozen, nested model configuration and the named presets.

The config holds hyperparameters only (sizes, bins, loss weights, data-sampling sizes). Runtime
choices such as chunking, checkpointing, precision or the parallel layout belong to
:class:`alphafold_mem.memory.MemoryPolicy` and never appear here.

Presets (``model_config(name)``) are small named diffs over the AF2 defaults:

* ``model_1`` ... ``model_5`` and ``model_1_ptm`` ... ``model_5_ptm``: the published AlphaFold2
  monomer network (Jumper et al. 2021, Suppl. Table 5 / Suppl. 1.5-1.8): c_m 256, c_z 128, c_s 384,
  c_t 64, c_e 64, 48 Evoformer blocks, 4 extra-MSA blocks, 2 template pair blocks, 8 structure-module
  iterations. Models 1-2 use templates; models 1, 3, 4 sample up to 5120 extra-MSA sequences, models
  2 and 5 up to 1024 (AF2 ``config.py`` CONFIG_DIFFS). ``*_ptm`` adds the predicted-aligned-error head.
* ``initial_training`` / ``finetuning``: model_1 with the training sample sizes of Suppl. Table 4
  (crop 256 / 384, 128 / 512 MSA clusters, 1024 / 5120 extra sequences, violation loss off / on).
* ``model_1_multimer_v3`` ... ``model_5_multimer_v3``: AF2-Multimer v3 (Evans et al. 2021; AF2 v2.3
  ``CONFIG_MULTIMER``): the monomer's sizes with the multimer's parts (``multimer=True`` and the
  fields listed at ``_MULTIMER``); models 4-5 sample 1152 extra-MSA sequences, models 1-3 2048.
* ``tiny``: a few blocks and small channels, for tests; ``tiny_multimer`` the same with the
  multimer's parts.
* ``demo``: small enough to train on 2 CPU cores in about an hour.

Overrides use dotted paths (``model_config("tiny", **{"evoformer.num_blocks": 3})``) or double
underscores (``model_config("tiny", evoformer__num_blocks=3)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .presets import MULTIMER_FINETUNING_LOSS, MULTIMER_PRESETS, PRESETS, preset_overrides  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class InputEmbedderConfig:
    """Alg. 3-5: target_feat / msa_feat embedding and relative position encoding."""

    tf_dim: int = 22
    msa_dim: int = 49
    relpos_k: int = 32
    #: AF2-Multimer's chain-relative encoding (Evans et al. 2021, ``max_relative_chain``): 0 is the
    #: monomer's Alg. 4; > 0 adds the same-chain offset bin, the same-entity bit and the clipped
    #: relative chain index (``2 * relpos_k + 2 + 1 + 2 * max_relative_chain + 2`` inputs).
    max_relative_chain: int = 0


@dataclass(frozen=True)
class RecyclingConfig:
    """Alg. 32: recycling of m[0], z and the pseudo-beta distogram (15 bins, 3.25-20.75 Å)."""

    num_bins: int = 15
    min_bin: float = 3.25
    max_bin: float = 20.75


@dataclass(frozen=True)
class TemplatePairStackConfig:
    """Alg. 16: the template pair stack (triangle updates over c_t)."""

    num_blocks: int = 2
    c_hidden_tri_att: int = 16
    num_heads_tri_att: int = 4
    c_hidden_tri_mul: int = 64
    transition_n: int = 2
    dropout_rate: float = 0.25
    #: AF2-Multimer order: the two triangle multiplications before the two triangle attentions
    #: (the monomer's template stack runs the attentions first).
    tri_mul_first: bool = False


@dataclass(frozen=True)
class TemplateConfig:
    """Template embedding (Suppl. 1.7.1, Alg. 16-17)."""

    enabled: bool = True
    embed_angles: bool = True
    use_unit_vector: bool = False
    max_templates: int = 4
    dgram_num_bins: int = 39
    dgram_min_bin: float = 3.25
    dgram_max_bin: float = 50.75
    pair_in_dim: int = 88
    angle_feat_dim: int = 57
    pair_stack: TemplatePairStackConfig = field(default_factory=TemplatePairStackConfig)
    pointwise_c_hidden: int = 16
    pointwise_num_heads: int = 4


@dataclass(frozen=True)
class StackConfig:
    """Evoformer-style block stack (Alg. 6) used by the Evoformer and the extra-MSA stack (Alg. 18)."""

    num_blocks: int = 48
    c_hidden_msa_att: int = 32
    num_heads_msa: int = 8
    c_hidden_opm: int = 32
    c_hidden_mul: int = 128
    c_hidden_pair_att: int = 32
    num_heads_pair: int = 4
    transition_n: int = 4
    msa_dropout: float = 0.15
    pair_dropout: float = 0.25
    #: AF2-Multimer order: the outer product mean first, before MSA row attention (the monomer runs
    #: it after the MSA transition).
    opm_first: bool = False


@dataclass(frozen=True)
class StructureModuleConfig:
    """Alg. 20-24: invariant point attention and the structure module."""

    num_layers: int = 8
    c_ipa: int = 16
    num_heads_ipa: int = 12
    num_qk_points: int = 4
    num_v_points: int = 8
    c_resnet: int = 128
    num_resnet_blocks: int = 2
    num_transition_layers: int = 1
    num_angles: int = 7
    position_scale: float = 10.0
    dropout_rate: float = 0.1


@dataclass(frozen=True)
class HeadsConfig:
    """Auxiliary heads (Suppl. 1.9): pLDDT (Alg. 29), distogram, masked MSA, exp. resolved, PAE/pTM."""

    plddt_num_bins: int = 50
    plddt_c_hidden: int = 128
    distogram_num_bins: int = 64
    distogram_min_bin: float = 2.3125
    distogram_max_bin: float = 21.6875
    masked_msa_num_classes: int = 23
    pae_enabled: bool = False
    pae_num_bins: int = 64
    pae_max_bin: float = 31.0
    #: AF2-Multimer: interface pTM from ``asym_id``, the ranking confidence 0.8 ipTM + 0.2 pTM and
    #: the chain-pair ipTM matrix (needs ``pae_enabled``).
    iptm_enabled: bool = False


@dataclass(frozen=True)
class DataConfig:
    """Sample sizes and MSA processing (Suppl. 1.2, Table 4)."""

    max_msa_clusters: int = 512
    max_extra_msa: int = 1024
    crop_size: int = 256
    masked_msa_fraction: float = 0.15
    masked_msa_uniform_prob: float = 0.1
    masked_msa_profile_prob: float = 0.1
    masked_msa_same_prob: float = 0.1
    reduce_msa_clusters_by_max_templates: bool = True


@dataclass(frozen=True)
class LossConfig:
    """Loss weights (Suppl. 1.9, Eq. 7)."""

    fape_weight: float = 1.0
    fape_clamp_distance: float = 10.0
    fape_clamp_probability: float = 0.9
    fape_length_scale: float = 10.0
    sidechain_fape_weight: float = 0.5
    backbone_fape_weight: float = 0.5
    supervised_chi_weight: float = 0.5
    angle_norm_weight: float = 0.01
    distogram_weight: float = 0.3
    masked_msa_weight: float = 2.0
    plddt_weight: float = 0.01
    experimentally_resolved_weight: float = 0.0
    violation_weight: float = 0.0
    pae_weight: float = 0.0
    #: AF2-Multimer terms (Evans et al. 2022); 0 / False: the monomer loss. With
    #: ``interface_fape_weight > 0`` and ``asym_id`` in the batch the backbone FAPE splits into an
    #: intra-chain part (``backbone_fape_weight``, ``fape_clamp_distance``, ``fape_length_scale``)
    #: and an inter-chain part (clamp 30 Å, length scale 20 Å).
    interface_fape_weight: float = 0.0
    interface_fape_clamp_distance: float = 30.0
    interface_fape_length_scale: float = 20.0
    chain_center_of_mass_weight: float = 0.0
    average_clashes: bool = False


@dataclass(frozen=True)
class ModelConfig:
    """The whole AF2 monomer configuration. Channel names follow the supplement (c_m, c_z, c_s, c_t, c_e)."""

    c_m: int = 256
    c_z: int = 128
    c_s: int = 384
    c_t: int = 64
    c_e: int = 64
    #: AF2-Multimer (Evans et al. 2021): chain features (``asym_id``, ``entity_id``, ``sym_id``) and
    #: the multimer's own classes where it differs: the chain-relative position encoding, the
    #: template embedder (per-template feature projections, average over templates, template rows
    #: from chi angles), the extra-MSA features from raw deletion counts, invariant point attention
    #: with per-head point projections, and ipTM. The scalar differences are their own fields
    #: (``opm_first``, ``tri_mul_first``, ``max_relative_chain``, ``position_scale``, bins, ...).
    multimer: bool = False
    num_recycles: int = 3
    #: Runtime setting (AF2 v2.3 ``recycle_early_stop_tolerance``, Å): recycling stops once the Cα
    #: distance matrix changes by at most this much between iterations (root mean square over residue
    #: pairs); 0 runs every iteration.
    recycle_early_stop_tolerance: float = 0.0
    input_embedder: InputEmbedderConfig = field(default_factory=InputEmbedderConfig)
    recycling: RecyclingConfig = field(default_factory=RecyclingConfig)
    template: TemplateConfig = field(default_factory=TemplateConfig)
    extra_msa: StackConfig = field(
        default_factory=lambda: StackConfig(num_blocks=4, c_hidden_msa_att=8, num_heads_msa=8)
    )
    evoformer: StackConfig = field(default_factory=StackConfig)
    structure_module: StructureModuleConfig = field(default_factory=StructureModuleConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    preset: str = "model_1"

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for checkpoints and JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Inverse of :meth:`to_dict`. Raises ``KeyError`` naming an unknown field."""
        return _from_dict(cls, d)


def _from_dict(cls, d):
    kwargs = {}
    names = {f.name: f for f in fields(cls)}
    for k, v in d.items():
        if k not in names:
            raise KeyError(f"unknown config field {cls.__name__}.{k}")
        f = names[k]
        sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(sub) and isinstance(v, dict):
            v = _from_dict(type(sub), v)
        kwargs[k] = v
    return cls(**kwargs)


def _set_path(cfg, path: list[str], value):
    name = path[0]
    if not any(f.name == name for f in fields(cfg)):
        valid = ", ".join(f.name for f in fields(cfg))
        raise KeyError(f"unknown config field '{name}' in {type(cfg).__name__} (valid: {valid})")
    if len(path) == 1:
        return replace(cfg, **{name: value})
    return replace(cfg, **{name: _set_path(getattr(cfg, name), path[1:], value)})


def apply_overrides(cfg: ModelConfig, overrides: dict[str, Any]) -> ModelConfig:
    """Return ``cfg`` with dotted-path (or ``__``-separated) overrides applied.

    Raises:
        KeyError: a path names a field that does not exist (the message lists the valid ones).
    """
    for key, value in overrides.items():
        cfg = _set_path(cfg, key.replace("__", ".").split("."), value)
    return cfg


def model_config(preset: str = "model_1", **overrides: Any) -> ModelConfig:
    """Build the frozen config of a named preset, with optional overrides.

    Args:
        preset: one of :data:`PRESETS` (:mod:`alphafold_mem.presets` holds their tables).
        **overrides: dotted or ``__``-separated field paths and their values.

    Raises:
        ValueError: unknown preset (the message lists the valid names).
        KeyError: an override names a field that does not exist.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset '{preset}'; valid presets: {', '.join(PRESETS)}")
    cfg = apply_overrides(ModelConfig(preset=preset), preset_overrides(preset))
    return apply_overrides(cfg, overrides)
