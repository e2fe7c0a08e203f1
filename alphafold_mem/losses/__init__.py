"""AlphaFold2 training losses (Jumper et al. 2021, Suppl. 1.9, Eq. 7).

:class:`AlphaFoldLoss` combines the terms with the weights of ``config.loss``
(:class:`alphafold_mem.config.LossConfig`) and the fixed constants of :class:`LossConstants`.
Geometry and losses always run in fp32 with autocast disabled, whatever the training precision.

    L = w_fape (w_bb * FAPE_backbone + w_sc * FAPE_sidechain) + L_chi + L_anglenorm
        + w_dist L_dist + w_msa L_msa + w_plddt L_plddt + w_exp L_exp + w_viol L_viol + w_pae L_tm

(AF2 Eq. 7 with the weights of Suppl. Table 4 / AF2 ``config.py``), multiplied by
sqrt(N_res in the crop) as in AF2/OpenFold training (``LossConstants.scale_by_sqrt_num_res``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

from ..config import HeadsConfig, LossConfig
from ..geometry import all_atom
from .auxiliary import (
    distogram_loss,
    experimentally_resolved_loss,
    masked_msa_loss,
    plddt_loss,
    supervised_chi_loss,
    tm_loss,
)
from .fape import backbone_fape, compute_fape, rename_symmetric_ground_truth, sidechain_fape
from .multimer import chain_center_of_mass_loss, multimer_backbone_fape
from .violations import find_structural_violations, violation_fraction, violation_loss

__all__ = [
    "AlphaFoldLoss",
    "LossConstants",
    "add_ground_truth_features",
    "compute_fape",
    "backbone_fape",
    "sidechain_fape",
    "rename_symmetric_ground_truth",
    "supervised_chi_loss",
    "distogram_loss",
    "masked_msa_loss",
    "plddt_loss",
    "experimentally_resolved_loss",
    "tm_loss",
    "find_structural_violations",
    "violation_loss",
    "violation_fraction",
    "multimer_backbone_fape",
    "chain_center_of_mass_loss",
]


@dataclass(frozen=True)
class LossConstants:
    """Fixed loss constants from AF2 ``config.py`` (``model.heads``) and Suppl. 1.9.

    The weights live in :class:`alphafold_mem.config.LossConfig`; these are the published
    constants that the presets never change.
    """

    fape_eps: float = 1e-4  # Å², Alg. 28
    sidechain_clamp_distance: float = 10.0  # Å, Suppl. 1.9.3
    sidechain_length_scale: float = 10.0
    lddt_cutoff: float = 15.0  # Å, pLDDT target (Suppl. 1.9.6)
    min_resolution: float = 0.1  # Å, pLDDT / exp. resolved / TM losses only for 0.1-3.0 Å
    max_resolution: float = 3.0
    violation_tolerance_factor: float = 12.0
    clash_overlap_tolerance: float = 1.5  # Å
    scale_by_sqrt_num_res: bool = True


_GT_KEYS = (
    "atom14_gt_positions",
    "atom14_alt_gt_positions",
    "atom14_gt_exists",
    "atom14_alt_gt_exists",
    "atom14_atom_is_ambiguous",
    "rigidgroups_gt_frames",
    "rigidgroups_alt_gt_frames",
    "rigidgroups_gt_exists",
    "backbone_rigid_tensor",
    "backbone_rigid_mask",
    "chi_angles_sin_cos",
    "chi_mask",
    "pseudo_beta",
    "pseudo_beta_mask",
)


def add_ground_truth_features(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Return ``batch`` plus any training target missing from it, derived from ``aatype``,
    ``all_atom_positions [*, N_res, 37, 3]`` and ``all_atom_mask [*, N_res, 37]`` with
    :mod:`alphafold_mem.geometry.all_atom` (atom14 ground truth, rigid-group frames, backbone frames,
    chi angles, pseudo-beta). Present keys are kept as they are.

    Raises:
        KeyError: a target is missing and ``all_atom_positions`` / ``all_atom_mask`` are absent.
    """
    if all(k in batch for k in _GT_KEYS):
        return batch
    for k in ("aatype", "all_atom_positions", "all_atom_mask"):
        if k not in batch:
            missing = [g for g in _GT_KEYS if g not in batch]
            raise KeyError(f"training targets {missing} are missing and cannot be derived without '{k}'")
    out = dict(batch)
    aatype, pos, mask = batch["aatype"], batch["all_atom_positions"].float(), batch["all_atom_mask"].float()
    derived: dict[str, Tensor] = {}
    derived.update(all_atom.make_atom14_gt(aatype, pos, mask))
    frames = all_atom.atom37_to_frames(aatype, pos, mask)
    derived.update(frames)
    derived["backbone_rigid_tensor"] = frames["rigidgroups_gt_frames"][..., 0, :, :]
    derived["backbone_rigid_mask"] = frames["rigidgroups_gt_exists"][..., 0]
    tors = all_atom.atom37_to_torsion_angles(aatype, pos, mask)
    derived["chi_angles_sin_cos"] = tors["torsion_angles_sin_cos"][..., 3:, :]
    derived["chi_mask"] = tors["torsion_angles_mask"][..., 3:]
    derived["pseudo_beta"], derived["pseudo_beta_mask"] = all_atom.pseudo_beta(aatype, pos, mask)
    for k, v in derived.items():
        out.setdefault(k, v)
    return out


def _f32(x):
    return x.float() if torch.is_tensor(x) and x.is_floating_point() else x


class AlphaFoldLoss(nn.Module):
    """The AF2 training loss (Suppl. 1.9, Eq. 7).

    Args:
        loss_cfg: the weights (``config.loss``).
        heads_cfg: bin layouts of the heads (``config.heads``).
        constants: fixed constants (defaults: AF2's).

    Forward:
        outputs: :meth:`alphafold_mem.AlphaFold.forward` outputs (with or without a batch dim; the
            structure-module trajectories carry their layer dim first).
        batch: features + training targets (see ``alphafold_mem.data.features``); missing geometric
            targets are derived by :func:`add_ground_truth_features`. Optional ``use_clamped_fape
            [*]`` (1 = clamp the backbone FAPE; default: always clamp).

    Returns:
        ``(loss, terms)``: the scalar loss (mean over the batch) and a dict of per-example ``[*]``
        unweighted terms (``fape_backbone``, ``fape_sidechain``, ``chi``, ``angle_norm``,
        ``distogram``, ``masked_msa``, ``plddt``, ``experimentally_resolved``, ``violation``,
        ``tm``; only those with a non-zero weight) and ``total [*]``.

    Complexes (AF2-Multimer, weights :data:`alphafold_mem.config.MULTIMER_FINETUNING_LOSS`): with
    ``asym_id [*, N_res]`` in the batch, ``loss.interface_fape_weight > 0`` splits the backbone FAPE
    (``fape_backbone`` intra-chain, ``fape_interface``), the violation terms bond no residues of
    different chains, ``loss.average_clashes`` averages each atom's clashes and
    ``loss.chain_center_of_mass_weight`` adds ``chain_center_of_mass``. The ground truth must be
    permutation-aligned to the prediction first
    (:func:`alphafold_mem.losses.permutation.multi_chain_permutation_align`).
    """

    def __init__(self, loss_cfg: LossConfig, heads_cfg: HeadsConfig, constants: LossConstants = LossConstants()):
        super().__init__()
        self.cfg, self.heads, self.const = loss_cfg, heads_cfg, constants

    def forward(self, outputs: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        device_type = outputs["final_atom_positions"].device.type
        with torch.autocast(device_type=device_type, enabled=False):
            return self._forward(
                {k: _f32(v) for k, v in outputs.items()},
                {k: _f32(v) for k, v in add_ground_truth_features(batch).items()},
            )

    def _forward(self, out: dict[str, Tensor], b: dict[str, Tensor]):
        cfg, c = self.cfg, self.const
        terms: dict[str, Tensor] = {}
        weighted: dict[str, Tensor] = {}

        asym_id = b.get("asym_id")
        if cfg.fape_weight:
            if cfg.interface_fape_weight and asym_id is not None:
                bb, interface = multimer_backbone_fape(
                    out["sm_frames"],
                    b["backbone_rigid_tensor"],
                    b["backbone_rigid_mask"],
                    asym_id,
                    cfg.fape_clamp_distance,
                    cfg.fape_length_scale,
                    cfg.interface_fape_clamp_distance,
                    cfg.interface_fape_length_scale,
                    b.get("use_clamped_fape"),
                    c.fape_eps,
                )
                terms["fape_interface"] = interface
                weighted["fape_interface"] = cfg.fape_weight * cfg.interface_fape_weight * interface
            else:
                bb = backbone_fape(
                    out["sm_frames"],
                    b["backbone_rigid_tensor"],
                    b["backbone_rigid_mask"],
                    cfg.fape_clamp_distance,
                    cfg.fape_length_scale,
                    b.get("use_clamped_fape"),
                    c.fape_eps,
                )
            renamed = rename_symmetric_ground_truth(
                out["sm_positions"][-1],
                b["atom14_gt_positions"],
                b["atom14_alt_gt_positions"],
                b["atom14_gt_exists"],
                b["atom14_alt_gt_exists"],
                b["atom14_atom_is_ambiguous"],
            )
            sc = sidechain_fape(
                out["sm_sidechain_frames"][-1],
                out["sm_positions"][-1],
                b["rigidgroups_gt_frames"],
                b["rigidgroups_alt_gt_frames"],
                b["rigidgroups_gt_exists"],
                renamed,
                c.sidechain_clamp_distance,
                c.sidechain_length_scale,
                c.fape_eps,
            )
            terms["fape_backbone"], terms["fape_sidechain"] = bb, sc
            weighted["fape"] = cfg.fape_weight * (cfg.backbone_fape_weight * bb + cfg.sidechain_fape_weight * sc)
        if cfg.supervised_chi_weight or cfg.angle_norm_weight:
            chi, norm = supervised_chi_loss(
                out["sm_angles"],
                out["sm_unnormalized_angles"],
                b["aatype"],
                b["seq_mask"],
                b["chi_mask"],
                b["chi_angles_sin_cos"],
                cfg.supervised_chi_weight,
                cfg.angle_norm_weight,
            )
            terms["chi"], terms["angle_norm"] = chi, norm  # already weighted (Alg. 27 folds them in)
            weighted["chi"], weighted["angle_norm"] = chi, norm
        if cfg.distogram_weight:
            t = distogram_loss(
                out["distogram_logits"],
                b["pseudo_beta"],
                b["pseudo_beta_mask"],
                self.heads.distogram_min_bin,
                self.heads.distogram_max_bin,
            )
            terms["distogram"], weighted["distogram"] = t, cfg.distogram_weight * t
        if cfg.masked_msa_weight:
            t = masked_msa_loss(out["masked_msa_logits"], b["true_msa"], b["bert_mask"])
            terms["masked_msa"], weighted["masked_msa"] = t, cfg.masked_msa_weight * t
        resolution = b.get("resolution")
        if resolution is None:
            resolution = out["final_atom_positions"].new_zeros(out["final_atom_positions"].shape[:-3])
        if cfg.plddt_weight:
            t = plddt_loss(
                out["lddt_logits"],
                out["final_atom_positions"],
                b["all_atom_positions"],
                b["all_atom_mask"],
                resolution,
                c.lddt_cutoff,
                c.min_resolution,
                c.max_resolution,
            )
            terms["plddt"], weighted["plddt"] = t, cfg.plddt_weight * t
        if cfg.experimentally_resolved_weight:
            exists = b.get("atom37_atom_exists")
            if exists is None:
                exists = all_atom.make_atom14_masks(b["aatype"])["atom37_atom_exists"]
            t = experimentally_resolved_loss(
                out["experimentally_resolved_logits"],
                b["all_atom_mask"],
                exists,
                resolution,
                c.min_resolution,
                c.max_resolution,
            )
            terms["experimentally_resolved"], weighted["experimentally_resolved"] = (
                t,
                cfg.experimentally_resolved_weight * t,
            )
        if cfg.violation_weight:
            mask14 = b.get("atom14_atom_exists")
            if mask14 is None:
                mask14 = all_atom.make_atom14_masks(b["aatype"])["atom14_atom_exists"]
            mask14 = mask14 * b["seq_mask"][..., None]
            v = find_structural_violations(
                out["sm_positions"][-1],
                mask14,
                b["residue_index"],
                b["aatype"],
                c.violation_tolerance_factor,
                c.clash_overlap_tolerance,
                asym_id=asym_id,
            )
            # AF2-Multimer (as OpenFold's multimer config): eps 1e-8 with clashes averaged per atom
            eps = 1e-8 if cfg.average_clashes else 1e-6
            t = violation_loss(v, mask14, eps=eps, average_clashes=cfg.average_clashes)
            terms["violation"], weighted["violation"] = t, cfg.violation_weight * t
        if cfg.pae_weight:
            if "pae_logits" not in out:
                raise KeyError("loss.pae_weight > 0 but the model has no PAE head (heads.pae_enabled is False)")
            t = tm_loss(
                out["pae_logits"],
                out["sm_frames"][-1],
                b["backbone_rigid_tensor"],
                b["backbone_rigid_mask"],
                resolution,
                self.heads.pae_max_bin,
                c.min_resolution,
                c.max_resolution,
            )
            terms["tm"], weighted["tm"] = t, cfg.pae_weight * t
        if cfg.chain_center_of_mass_weight and asym_id is not None:
            t = chain_center_of_mass_loss(
                out["final_atom_positions"], b["all_atom_positions"], b["all_atom_mask"], asym_id
            )
            terms["chain_center_of_mass"] = t
            weighted["chain_center_of_mass"] = cfg.chain_center_of_mass_weight * t

        total = sum(weighted.values())
        if c.scale_by_sqrt_num_res:
            total = total * torch.sqrt(b["seq_mask"].sum(-1).clamp(min=1.0))
        terms["total"] = total
        return total.mean(), terms
