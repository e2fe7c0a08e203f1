"""Reading OpenFold's training-loss vectors and reproducing every term with :class:`AlphaFoldLoss`.

A vectors directory (``../shared/parity_loss/``, a copy in ``tests/data/parity_loss/``) holds:

* ``batch.npz``: the training batch OpenFold built (no batch dim, a trailing recycling dim ``R``;
  the loss reads ``feature[..., -1]``);
* ``outputs.npz``: OpenFold's model outputs of the last iteration (``sm_*`` stacked over the
  structure-module layers, frames as quaternion + translation ``[*, 7]``);
* ``losses.json``: each term OpenFold's ``AlphaFoldLoss`` computed (``losses_fp32``), its weights,
  sub-terms (``components``) and the resolved ``loss_config``;
* ``config.json`` (the preset), optionally ``gt.npz`` (ground truth of the whole chain before
  cropping) and ``params.npz`` (AF2-format weights of the model that made the outputs).

:func:`loss_parity` returns, per OpenFold term name, OpenFold's value and ours, computed from the
same batch and outputs by our loss, configured from the directory's ``loss_config`` alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..config import ModelConfig, apply_overrides, model_config
from ..geometry.rigid import Rigid
from . import AlphaFoldLoss, LossConstants
from .fape import backbone_fape
from .violations import find_structural_violations

__all__ = [
    "LossVectors",
    "load_loss_vectors",
    "openfold_outputs_to_ours",
    "loss_setup",
    "loss_parity",
    "our_terms_by_openfold_name",
]


@dataclasses.dataclass
class LossVectors:
    """One vectors directory, loaded: the last batch slice and OpenFold's outputs in our layout."""

    batch: dict[str, Tensor]  # last recycling slice, no batch dim
    batch_all: dict[str, Tensor]  # every slice (trailing recycling dim)
    outputs: dict[str, Tensor]  # our output names and layouts
    reference: dict  # losses.json
    config: dict  # config.json


def openfold_outputs_to_ours(o: dict[str, Tensor]) -> dict[str, Tensor]:
    """OpenFold's outputs (``outputs.npz`` keys) -> the names and layouts :class:`AlphaFoldLoss` reads.

    ``sm_frames [L, *, N_res, 7]`` (quaternion w, x, y, z + translation in Å) become 4x4 matrices
    ``[L, *, N_res, 4, 4]``; ``tm_logits`` becomes ``pae_logits``; the others keep name and layout.
    """
    out = {
        k: o[k]
        for k in (
            "sm_sidechain_frames",
            "sm_positions",
            "sm_angles",
            "sm_unnormalized_angles",
            "final_atom_positions",
            "distogram_logits",
            "masked_msa_logits",
            "lddt_logits",
            "experimentally_resolved_logits",
        )
        if k in o
    }
    out["sm_frames"] = Rigid.from_tensor_7(o["sm_frames"]).to_tensor_4x4()
    if "tm_logits" in o:
        out["pae_logits"] = o["tm_logits"]
    return out


def load_loss_vectors(directory: str | os.PathLike, dtype: torch.dtype = torch.float32) -> LossVectors:
    """Load ``batch.npz``, ``outputs.npz``, ``losses.json`` and ``config.json`` of ``directory``.

    Raises:
        FileNotFoundError: one of the four files is missing (the message names it).
    """
    d = Path(directory)
    for name in ("batch.npz", "outputs.npz", "losses.json", "config.json"):
        if not (d / name).is_file():
            raise FileNotFoundError(
                f"{d / name}: missing (a loss-vectors directory holds batch.npz, "
                "outputs.npz, losses.json and config.json)"
            )

    def cast(t: Tensor) -> Tensor:
        return t.to(dtype) if t.is_floating_point() else t

    with np.load(d / "batch.npz") as z:
        batch_all = {k: cast(torch.from_numpy(z[k])) for k in z.files}
    with np.load(d / "outputs.npz") as z:
        outputs = openfold_outputs_to_ours({k: cast(torch.from_numpy(z[k])) for k in z.files})
    return LossVectors(
        batch={k: v[..., -1] for k, v in batch_all.items()},
        batch_all=batch_all,
        outputs=outputs,
        reference=json.loads((d / "losses.json").read_text()),
        config=json.loads((d / "config.json").read_text()),
    )


def loss_setup(reference: dict, preset: str) -> tuple[ModelConfig, LossConstants]:
    """Our model config (loss weights, head bins) and loss constants from OpenFold's resolved
    ``loss_config`` (``losses.json``). OpenFold's shared ``eps`` values are not copied: every term
    keeps AF2's own (see :mod:`alphafold_mem.losses.auxiliary`)."""
    lc = reference["loss_config"]
    fape, chi, viol = lc["fape"], lc["supervised_chi"], lc["violation"]
    w = reference["weights"]
    overrides = {
        "loss.fape_weight": w["fape"],
        "loss.backbone_fape_weight": fape["backbone"]["weight"],
        "loss.sidechain_fape_weight": fape["sidechain"]["weight"],
        "loss.fape_clamp_distance": fape["backbone"]["clamp_distance"],
        "loss.fape_length_scale": fape["backbone"]["loss_unit_distance"],
        "loss.supervised_chi_weight": w["supervised_chi"] * chi["chi_weight"],
        "loss.angle_norm_weight": w["supervised_chi"] * chi["angle_norm_weight"],
        "loss.distogram_weight": w["distogram"],
        "loss.masked_msa_weight": w["masked_msa"],
        "loss.plddt_weight": w["plddt_loss"],
        "loss.experimentally_resolved_weight": w["experimentally_resolved"],
        "loss.violation_weight": w["violation"],
        "loss.pae_weight": w.get("tm", 0.0),
        "heads.distogram_num_bins": lc["distogram"]["no_bins"],
        "heads.distogram_min_bin": lc["distogram"]["min_bin"],
        "heads.distogram_max_bin": lc["distogram"]["max_bin"],
        "heads.plddt_num_bins": lc["plddt_loss"]["no_bins"],
    }
    if w.get("tm", 0.0):
        overrides.update(
            {
                "heads.pae_enabled": True,
                "heads.pae_num_bins": lc["tm"]["no_bins"],
                "heads.pae_max_bin": float(lc["tm"]["max_bin"]),
            }
        )
    cfg = apply_overrides(model_config(preset), overrides)
    const = LossConstants(
        fape_eps=lc["fape"].get("eps", 1e-4),
        sidechain_clamp_distance=fape["sidechain"]["clamp_distance"],
        sidechain_length_scale=fape["sidechain"]["length_scale"],
        lddt_cutoff=lc["plddt_loss"]["cutoff"],
        min_resolution=lc["plddt_loss"]["min_resolution"],
        max_resolution=lc["plddt_loss"]["max_resolution"],
        violation_tolerance_factor=viol["violation_tolerance_factor"],
        clash_overlap_tolerance=viol["clash_overlap_tolerance"],
    )
    return cfg, const


def our_terms_by_openfold_name(terms: dict[str, Tensor], sub: dict[str, Tensor], reference: dict) -> dict[str, float]:
    """Our per-term values (``AlphaFoldLoss`` ``terms`` plus the violation parts and ``sqrt_num_res``
    in ``sub``) under OpenFold's names: its terms (unweighted, with the FAPE and chi mixtures
    inside), its sub-terms (``components`` of ``losses.json``), ``unscaled_loss`` and ``loss``.
    The mixtures' weights come from ``reference["loss_config"]`` (our ``chi``/``angle_norm`` terms
    carry their weights already)."""
    lc, w = reference["loss_config"], reference["weights"]
    chi_w = w["supervised_chi"] * lc["supervised_chi"]["chi_weight"]
    norm_w = w["supervised_chi"] * lc["supervised_chi"]["angle_norm_weight"]
    f = {k: float(v.reshape(-1)[0]) for k, v in {**terms, **sub}.items()}
    out = {
        "fape": lc["fape"]["backbone"]["weight"] * f["fape_backbone"]
        + lc["fape"]["sidechain"]["weight"] * f["fape_sidechain"],
        "fape_backbone_used": f["fape_backbone"],
        "fape_sidechain": f["fape_sidechain"],
        "fape_backbone_clamped": f["fape_backbone_clamped"],
        "fape_backbone_unclamped": f["fape_backbone_unclamped"],
        "supervised_chi": (f["chi"] + f["angle_norm"]) / w["supervised_chi"],
        "supervised_chi_sq_chi_part": f["chi"] / chi_w,
        "supervised_chi_angle_norm_part": f["angle_norm"] / norm_w,
        "distogram": f.get("distogram"),
        "masked_msa": f.get("masked_msa"),
        "plddt_loss": f.get("plddt"),
        "experimentally_resolved": f.get("experimentally_resolved"),
        "violation": f.get("violation"),
        "tm": f.get("tm"),
        "violation_bonds_c_n_loss_mean": f.get("c_n_loss_mean"),
        "violation_angles_ca_c_n_loss_mean": f.get("ca_c_n_loss_mean"),
        "violation_angles_c_n_ca_loss_mean": f.get("c_n_ca_loss_mean"),
        "violation_clash_term": f.get("clash_term"),
        "unscaled_loss": f["total"] / f["sqrt_num_res"],
        "loss": f["total"],
    }
    return {k: v for k, v in out.items() if v is not None}


def loss_parity(directory: str | os.PathLike, dtype: torch.dtype = torch.float32) -> dict[str, dict[str, float]]:
    """``{term: {"openfold": x, "ours": y, "abs_diff": |x - y|}}`` for every term and sub-term
    OpenFold saved in ``directory`` (see the module docstring), ours from the same batch and outputs.

    Raises:
        FileNotFoundError: see :func:`load_loss_vectors`.
    """
    v = load_loss_vectors(directory, dtype)
    cfg, const = loss_setup(v.reference, v.config.get("preset", "model_1_ptm"))
    batch = dict(v.batch)
    loss_fn = AlphaFoldLoss(cfg.loss, cfg.heads, const)
    with torch.no_grad():
        _, terms = loss_fn(v.outputs, batch)
        mask14 = batch["atom14_atom_exists"] * batch["seq_mask"][..., None]
        viol = find_structural_violations(
            v.outputs["sm_positions"][-1],
            mask14,
            batch["residue_index"],
            batch["aatype"],
            const.violation_tolerance_factor,
            const.clash_overlap_tolerance,
        )
    clash = viol["clashes"]["per_atom_loss_sum"].sum((-1, -2)) + viol["within"]["per_atom_loss_sum"].sum((-1, -2))
    sub = {k: viol["bonds"][k] for k in ("c_n_loss_mean", "ca_c_n_loss_mean", "c_n_ca_loss_mean")}
    sub["clash_term"] = clash / (1e-6 + mask14.sum((-1, -2)))
    sub["sqrt_num_res"] = torch.sqrt(batch["seq_mask"].sum(-1))
    for name, clamp in (("fape_backbone_clamped", cfg.loss.fape_clamp_distance), ("fape_backbone_unclamped", None)):
        sub[name] = backbone_fape(
            v.outputs["sm_frames"],
            batch["backbone_rigid_tensor"],
            batch["backbone_rigid_mask"],
            clamp,
            cfg.loss.fape_length_scale,
            None,
            const.fape_eps,
        )
    ours = our_terms_by_openfold_name(terms, sub, v.reference)
    theirs = {
        **v.reference["losses_fp32"],
        **{k: x for k, x in v.reference.get("components", {}).items() if isinstance(x, float)},
    }
    return {
        k: {"openfold": float(theirs[k]), "ours": ours[k], "abs_diff": abs(float(theirs[k]) - ours[k])}
        for k in theirs
        if k in ours
    }
