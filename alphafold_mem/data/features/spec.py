"""The model's input feature table (Jumper et al. 2021, Suppl. 1.2): :class:`FeatureSpec`, the
:data:`FEATURES` table (single source of truth for names, symbolic shapes, dtypes and groups),
:func:`check_features`, and :func:`symbolic_dims`, the per-feature size symbols that padding and
collation work on.

Feature table (``N_res`` residues, ``N_seq`` cluster rows, ``N_extra`` extra rows, ``N_templ``
templates; all float32 unless noted):

==================================== ========================== ==================================
key                                  shape                      meaning
==================================== ========================== ==================================
aatype                               [N_res] int64              0-19 ``restypes``, 20 = X
residue_index                        [N_res] int64              SEQRES index (0-based)
seq_mask                             [N_res]                    1 = real residue
between_segment_residues             [N_res]                    0 (monomer)
seq_length                           [] int64                   N_res before padding
target_feat                          [N_res, 22]                [has_break, one_hot(aatype, 21)]
msa_feat                             [N_seq, N_res, 49]         Table 1, see msa.make_msa_feat
msa_mask                             [N_seq, N_res]             1 = real row
extra_msa                            [N_extra, N_res] int64     tokens 0-21 (X 20, gap 21)
extra_msa_mask                       [N_extra, N_res]
extra_has_deletion                   [N_extra, N_res]           deletion count > 0
extra_deletion_value                 [N_extra, N_res]           atan(d/3)*2/pi
atom37_atom_exists                   [N_res, 37]
atom14_atom_exists                   [N_res, 14]
residx_atom14_to_atom37              [N_res, 14] int64
residx_atom37_to_atom14              [N_res, 37] int64
template_aatype                      [N_templ, N_res] int64     0-20, 21 = gap (unaligned)
template_all_atom_positions          [N_templ, N_res, 37, 3]    Å
template_all_atom_mask               [N_templ, N_res, 37]
template_pseudo_beta(_mask)          [N_templ, N_res, 3] / [..] Å, CB (CA for Gly)
template_torsion_angles_sin_cos      [N_templ, N_res, 7, 2]     (sin, cos)
template_alt_torsion_angles_sin_cos  [N_templ, N_res, 7, 2]
template_torsion_angles_mask         [N_templ, N_res, 7]
template_mask                        [N_templ]
-- training / evaluation (ground truth) --
true_msa                             [N_seq, N_res] int64       cluster rows before masking
bert_mask                            [N_seq, N_res]             1 = position was corrupted
all_atom_positions                   [N_res, 37, 3]             Å
all_atom_mask                        [N_res, 37]
atom14_gt_positions / _alt_          [N_res, 14, 3]             Å
atom14_gt_exists / _alt_ / is_ambig. [N_res, 14]
rigidgroups_gt_frames / _alt_        [N_res, 8, 4, 4]           Å (translation)
rigidgroups_gt_exists / group_exists [N_res, 8]
rigidgroups_group_is_ambiguous       [N_res, 8]
backbone_rigid_tensor                [N_res, 4, 4]              group 0 frame
backbone_rigid_mask                  [N_res]
chi_angles_sin_cos                   [N_res, 4, 2]
chi_mask                             [N_res, 4]
pseudo_beta                          [N_res, 3]                 Å
pseudo_beta_mask                     [N_res]
resolution                           []                         Å (0 when not given)
==================================== ========================== ==================================
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["FeatureSpec", "FEATURES", "check_features", "symbolic_dims"]


@dataclass(frozen=True)
class FeatureSpec:
    """One batch feature: symbolic shape (str = size symbol, int = fixed), dtype, group, meaning."""

    shape: tuple
    dtype: torch.dtype
    group: str  # "input", "template" or "ground_truth"
    doc: str


_F32, _I64 = torch.float32, torch.int64
#: The feature table (single source of truth; the docstring table mirrors it). Symbols: ``N_res``,
#: ``N_seq`` (msa_feat rows), ``N_extra``, ``N_templ``.
FEATURES: dict[str, FeatureSpec] = {
    "aatype": FeatureSpec(("N_res",), _I64, "input", "0-19 restypes, 20 = X"),
    "residue_index": FeatureSpec(("N_res",), _I64, "input", "SEQRES index, 0-based"),
    "seq_mask": FeatureSpec(("N_res",), _F32, "input", "1 = real residue"),
    "between_segment_residues": FeatureSpec(("N_res",), _F32, "input", "0 for a monomer"),
    "seq_length": FeatureSpec((), _I64, "input", "N_res before padding"),
    "target_feat": FeatureSpec(("N_res", 22), _F32, "input", "[has_break, one_hot(aatype, 21)]"),
    "msa_feat": FeatureSpec(
        ("N_seq", "N_res", 49),
        _F32,
        "input",
        "[one_hot(msa,23), has_del, atan(d/3)*2/pi, cluster_profile(23), atan(mean_d/3)*2/pi]",
    ),
    "msa_mask": FeatureSpec(("N_seq", "N_res"), _F32, "input", "1 = real row"),
    "extra_msa": FeatureSpec(("N_extra", "N_res"), _I64, "input", "tokens 0-21 (20 X, 21 gap)"),
    "extra_msa_mask": FeatureSpec(("N_extra", "N_res"), _F32, "input", "1 = real row"),
    "extra_has_deletion": FeatureSpec(("N_extra", "N_res"), _F32, "input", "deletion count > 0"),
    "extra_deletion_value": FeatureSpec(("N_extra", "N_res"), _F32, "input", "atan(d/3)*2/pi"),
    "atom37_atom_exists": FeatureSpec(("N_res", 37), _F32, "input", "atom exists for the residue type"),
    "atom14_atom_exists": FeatureSpec(("N_res", 14), _F32, "input", "atom14 slot used"),
    "residx_atom14_to_atom37": FeatureSpec(("N_res", 14), _I64, "input", "atom14 slot -> atom37 index"),
    "residx_atom37_to_atom14": FeatureSpec(("N_res", 37), _I64, "input", "atom37 index -> atom14 slot"),
    "template_aatype": FeatureSpec(("N_templ", "N_res"), _I64, "template", "0-20, 21 = gap (unaligned)"),
    "template_all_atom_positions": FeatureSpec(("N_templ", "N_res", 37, 3), _F32, "template", "Å"),
    "template_all_atom_mask": FeatureSpec(("N_templ", "N_res", 37), _F32, "template", "resolved atoms"),
    "template_pseudo_beta": FeatureSpec(("N_templ", "N_res", 3), _F32, "template", "CB (CA for Gly), Å"),
    "template_pseudo_beta_mask": FeatureSpec(("N_templ", "N_res"), _F32, "template", ""),
    "template_torsion_angles_sin_cos": FeatureSpec(("N_templ", "N_res", 7, 2), _F32, "template", "(sin, cos)"),
    "template_alt_torsion_angles_sin_cos": FeatureSpec(
        ("N_templ", "N_res", 7, 2), _F32, "template", "pi-periodic chis rotated by pi"
    ),
    "template_torsion_angles_mask": FeatureSpec(("N_templ", "N_res", 7), _F32, "template", ""),
    "template_mask": FeatureSpec(("N_templ",), _F32, "template", "1 = real template"),
    "true_msa": FeatureSpec(("N_seq", "N_res"), _I64, "ground_truth", "cluster rows before masking"),
    "bert_mask": FeatureSpec(("N_seq", "N_res"), _F32, "ground_truth", "1 = corrupted position"),
    "all_atom_positions": FeatureSpec(("N_res", 37, 3), _F32, "ground_truth", "Å"),
    "all_atom_mask": FeatureSpec(("N_res", 37), _F32, "ground_truth", "resolved atoms"),
    "atom14_gt_positions": FeatureSpec(("N_res", 14, 3), _F32, "ground_truth", "Å"),
    "atom14_gt_exists": FeatureSpec(("N_res", 14), _F32, "ground_truth", ""),
    "atom14_alt_gt_positions": FeatureSpec(("N_res", 14, 3), _F32, "ground_truth", "symmetric atoms swapped"),
    "atom14_alt_gt_exists": FeatureSpec(("N_res", 14), _F32, "ground_truth", ""),
    "atom14_atom_is_ambiguous": FeatureSpec(("N_res", 14), _F32, "ground_truth", ""),
    "rigidgroups_gt_frames": FeatureSpec(("N_res", 8, 4, 4), _F32, "ground_truth", "4x4, Å"),
    "rigidgroups_gt_exists": FeatureSpec(("N_res", 8), _F32, "ground_truth", ""),
    "rigidgroups_group_exists": FeatureSpec(("N_res", 8), _F32, "ground_truth", ""),
    "rigidgroups_group_is_ambiguous": FeatureSpec(("N_res", 8), _F32, "ground_truth", ""),
    "rigidgroups_alt_gt_frames": FeatureSpec(("N_res", 8, 4, 4), _F32, "ground_truth", "4x4, Å"),
    "backbone_rigid_tensor": FeatureSpec(("N_res", 4, 4), _F32, "ground_truth", "group-0 frame, Å"),
    "backbone_rigid_mask": FeatureSpec(("N_res",), _F32, "ground_truth", ""),
    "chi_angles_sin_cos": FeatureSpec(("N_res", 4, 2), _F32, "ground_truth", "(sin, cos)"),
    "chi_mask": FeatureSpec(("N_res", 4), _F32, "ground_truth", ""),
    "pseudo_beta": FeatureSpec(("N_res", 3), _F32, "ground_truth", "CB (CA for Gly), Å"),
    "pseudo_beta_mask": FeatureSpec(("N_res",), _F32, "ground_truth", ""),
    "resolution": FeatureSpec((), _F32, "ground_truth", "Å, 0 when unknown"),
}


def check_features(features: dict, *, batched: bool = False) -> dict[str, int]:
    """Check every known feature's dtype and shape against :data:`FEATURES` with one consistent size
    per symbol; returns the symbol sizes. Unknown keys are ignored.

    Raises:
        ValueError: naming the key, the expected and the actual shape/dtype.
    """
    sizes: dict[str, int] = {}
    lead = 1 if batched else 0
    for key, value in features.items():
        spec = FEATURES.get(key)
        if spec is None:
            continue
        if value.dtype != spec.dtype:
            raise ValueError(f"feature '{key}': dtype {value.dtype}, expected {spec.dtype}")
        shape = tuple(value.shape[lead:])
        if len(shape) != len(spec.shape):
            raise ValueError(f"feature '{key}': shape {tuple(value.shape)}, expected {spec.shape}")
        for dim, want in zip(shape, spec.shape):
            if isinstance(want, int):
                if dim != want:
                    raise ValueError(f"feature '{key}': shape {shape}, expected {spec.shape}")
            elif sizes.setdefault(want, dim) != dim:
                raise ValueError(f"feature '{key}': {want}={dim} but another feature has {want}={sizes[want]}")
    return sizes


def symbolic_dims(key: str) -> tuple[str, ...]:
    """Leading symbolic dims of a feature (from :data:`FEATURES`); ``()`` for an unknown key."""
    spec = FEATURES.get(key)
    if spec is None:
        return ()
    return tuple(d for d in spec.shape if isinstance(d, str))
