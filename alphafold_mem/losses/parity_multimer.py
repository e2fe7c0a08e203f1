"""OpenFold's AF2-Multimer training-loss vectors (``../shared/parity_loss_multimer/``, a copy in
``tests/data/parity_loss_multimer/``) reproduced by our permutation alignment and loss.

Besides the monomer set's files (:mod:`alphafold_mem.losses.parity`) the directory holds
``gt.npz`` (``full.*``: ground truth of the whole complex, ``aligned.*``: after OpenFold's
alignment) and ``permutation.json`` (its chosen assignment). The model outputs carry 4x4 frames.

Where OpenFold departs from the AF2-Multimer paper (Evans et al. 2022) we follow the paper, and
:func:`multimer_loss_parity` reports the difference that departure must make, computed from
OpenFold's own numbers:

* chain centre of mass: OpenFold passes its weight 0.05 into the term (the 1/20 Å scale) and
  multiplies the term by 0.05 again; ours applies the term once, so ``unscaled_loss`` differs by
  ``(1 - 0.05) x chain_center_of_mass`` and ``loss`` by that times sqrt(N_res);
* peptide bonds: OpenFold bonds consecutive crop residues of different chains when their
  ``residue_index`` differ by 1; ours never across chains: the violation term differs by the
  bond/angle terms of those junctions (0 where no junction has that index step).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..config import MULTIMER_FINETUNING_LOSS, PRESETS, apply_overrides, model_config
from . import AlphaFoldLoss, LossConstants
from .auxiliary import experimentally_resolved_loss
from .permutation import PermutationResult, multi_chain_permutation_align
from .violations import find_structural_violations, violation_loss

__all__ = [
    "load_multimer_vectors",
    "multimer_loss_setup",
    "aligned_batch",
    "openfold_named_terms",
    "multimer_loss_parity",
    "multimer_end_to_end",
    "is_multimer_vectors",
]

_FILES = ("batch.npz", "outputs.npz", "gt.npz", "losses.json", "permutation.json")


def is_multimer_vectors(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` is a multimer loss-vectors set (it has ``permutation.json``)."""
    return (Path(directory) / "permutation.json").is_file()


def load_multimer_vectors(directory: str | os.PathLike) -> dict:
    """``{"preset", "batch", "outputs", "gt_full", "gt_aligned", "reference", "permutation"}`` of ``directory``
    (fp32; batch = last recycling slice; outputs under our names, ``tm_logits`` -> ``pae_logits``).

    Raises:
        FileNotFoundError: a file is missing (the message names it).
    """
    d = Path(directory)
    for name in _FILES:
        if not (d / name).is_file():
            raise FileNotFoundError(
                f"{d / name}: missing (a multimer loss-vectors directory holds {', '.join(_FILES)})"
            )

    def load(name: str) -> dict[str, Tensor]:
        with np.load(d / name) as z:
            return {k: torch.from_numpy(z[k]) for k in z.files}

    batch = {k: v[..., -1] for k, v in load("batch.npz").items()}
    outputs = load("outputs.npz")
    outputs["pae_logits"] = outputs.pop("tm_logits")
    gt = load("gt.npz")
    return {
        "preset": json.loads((d / "config.json").read_text()).get("preset", "model_1_multimer_v3")
        if (d / "config.json").is_file()
        else "model_1_multimer_v3",
        "batch": batch,
        "outputs": outputs,
        "gt_full": {k[5:]: v for k, v in gt.items() if k.startswith("full.")},
        "gt_aligned": {k[8:]: v for k, v in gt.items() if k.startswith("aligned.")},
        "reference": json.loads((d / "losses.json").read_text()),
        "permutation": json.loads((d / "permutation.json").read_text()),
    }


def multimer_loss_setup(reference: dict, preset: str = "model_1_multimer_v3"):
    """Our config (``preset`` with :data:`MULTIMER_FINETUNING_LOSS`, head bins from OpenFold's
    ``loss_config``) and loss constants. Raises ``ValueError`` where OpenFold's weights are not
    :data:`MULTIMER_FINETUNING_LOSS`'s."""
    lc, w = reference["loss_config"], reference["weights"]
    cfg = apply_overrides(
        model_config(preset if preset in PRESETS else "model_1_multimer_v3"),
        {
            **MULTIMER_FINETUNING_LOSS,
            "heads.pae_enabled": True,
            "heads.pae_num_bins": lc["tm"]["no_bins"],
            "heads.pae_max_bin": float(lc["tm"]["max_bin"]),
            "heads.plddt_num_bins": lc["plddt_loss"]["no_bins"],
        },
    )
    fape, chi = lc["fape"], lc["supervised_chi"]
    expected = {
        cfg.loss.backbone_fape_weight: fape["intra_chain_backbone"]["weight"],
        cfg.loss.interface_fape_weight: fape["interface_backbone"]["weight"],
        cfg.loss.sidechain_fape_weight: fape["sidechain"]["weight"],
        cfg.loss.supervised_chi_weight: w["supervised_chi"] * chi["chi_weight"],
        cfg.loss.angle_norm_weight: w["supervised_chi"] * chi["angle_norm_weight"],
        cfg.loss.distogram_weight: w["distogram"],
        cfg.loss.masked_msa_weight: w["masked_msa"],
        cfg.loss.plddt_weight: w["plddt_loss"],
        cfg.loss.violation_weight: w["violation"],
        cfg.loss.pae_weight: w["tm"],
    }
    bad = {ours: theirs for ours, theirs in expected.items() if abs(ours - theirs) > 1e-12}
    if bad:
        raise ValueError(f"losses.json weights differ from MULTIMER_FINETUNING_LOSS: {bad}")
    const = LossConstants(
        fape_eps=fape["eps"],
        sidechain_clamp_distance=fape["sidechain"]["clamp_distance"],
        sidechain_length_scale=fape["sidechain"]["length_scale"],
        lddt_cutoff=lc["plddt_loss"]["cutoff"],
        violation_tolerance_factor=lc["violation"]["violation_tolerance_factor"],
        clash_overlap_tolerance=lc["violation"]["clash_overlap_tolerance"],
    )
    return cfg, const


def aligned_batch(v: dict, rng: random.Random | None = None) -> tuple[dict[str, Tensor], PermutationResult]:
    """The loss batch: the last slice with our permutation-aligned ground truth put in. ``rng``
    (default: seeded as OpenFold's python ``random`` was before its alignment) draws the anchor."""
    if rng is None:
        rng = random.Random(v["reference"].get("python_random_seed_before_alignment", 0))
    o, b = v["outputs"], v["batch"]
    crop = {k: b[k] for k in ("asym_id", "entity_id", "residue_index")}
    res = multi_chain_permutation_align(o["final_atom_positions"], o["final_atom_mask"], crop, v["gt_full"], rng)
    return {**b, **res.labels}, res


def _openfold_bond_terms(o: dict, batch: dict, const: LossConstants) -> Tensor:
    """The violation term as OpenFold computes it (peptide bonds tested by residue_index alone)."""
    mask14 = batch["atom14_atom_exists"] * batch["seq_mask"][..., None]
    v = find_structural_violations(
        o["sm_positions"][-1], mask14, batch["residue_index"], batch["aatype"],
        const.violation_tolerance_factor, const.clash_overlap_tolerance, asym_id=batch["asym_id"],
    )  # fmt: skip
    no_chain = find_structural_violations(
        o["sm_positions"][-1], mask14, batch["residue_index"], batch["aatype"],
        const.violation_tolerance_factor, const.clash_overlap_tolerance, asym_id=None,
    )  # fmt: skip
    v["bonds"] = no_chain["bonds"]  # clash exclusion keeps asym_id, as OpenFold
    return violation_loss(v, mask14, eps=1e-8, average_clashes=True)


def openfold_named_terms(outputs: dict[str, Tensor], batch: dict[str, Tensor], cfg, const) -> dict[str, float]:
    """Our terms on an aligned ``batch`` under OpenFold's names and scales (its ``fape`` and
    ``supervised_chi`` mixtures, ``experimentally_resolved`` even at weight 0, ``unscaled_loss``,
    ``loss``)."""
    o = outputs
    with torch.no_grad():
        _, t = AlphaFoldLoss(cfg.loss, cfg.heads, const)(o, batch)
        exp = experimentally_resolved_loss(
            o["experimentally_resolved_logits"], batch["all_atom_mask"], batch["atom37_atom_exists"],
            batch["resolution"], const.min_resolution, const.max_resolution,
        )  # fmt: skip
    f = {k: float(x) for k, x in t.items()}
    L = cfg.loss
    sqrt_n = float(torch.sqrt(batch["seq_mask"].sum()))
    return {
        "fape": L.backbone_fape_weight * f["fape_backbone"]
        + L.interface_fape_weight * f["fape_interface"]
        + L.sidechain_fape_weight * f["fape_sidechain"],
        "supervised_chi": f["chi"] + f["angle_norm"],
        "distogram": f["distogram"],
        "masked_msa": f["masked_msa"],
        "plddt_loss": f["plddt"],
        "experimentally_resolved": float(exp),
        "violation": f["violation"],
        "tm": f["tm"],
        "chain_center_of_mass": f["chain_center_of_mass"],
        "unscaled_loss": f["total"] / sqrt_n,
        "loss": f["total"],
    }


def documented_differences(
    ours: dict[str, float], violation_openfold_bonds: float, reference: dict, cfg, sqrt_n: float
):
    """ours - OpenFold that the stated departures imply (module docstring), per term: the centre-of-mass
    part from OpenFold's own term and weight, the peptide-bond part from our violation term with and
    without OpenFold's cross-chain bonds (``violation_openfold_bonds``)."""
    L, w_of = cfg.loss, reference["weights"]
    com = reference["losses_fp32"]["chain_center_of_mass"]
    com_diff = (L.chain_center_of_mass_weight - w_of["chain_center_of_mass"]) * com
    viol_diff = ours["violation"] - violation_openfold_bonds
    total = com_diff + L.violation_weight * viol_diff
    return {"violation": viol_diff, "unscaled_loss": total, "loss": total * sqrt_n}


def multimer_loss_parity(directory: str | os.PathLike) -> dict[str, dict[str, float]]:
    """``{term: {"openfold", "ours", "abs_diff", "documented_diff"}}`` per OpenFold term name and the
    chosen assignment under ``"align"`` (``{"openfold": [[i, j], ...], "ours": [...]}``).
    ``documented_diff`` is the ours - OpenFold difference the module docstring's departures imply
    (0 for every other term).

    Raises:
        FileNotFoundError: see :func:`load_multimer_vectors`.
    """
    v = load_multimer_vectors(directory)
    cfg, const = multimer_loss_setup(v["reference"], v["preset"])
    batch, res = aligned_batch(v)
    ours = openfold_named_terms(v["outputs"], batch, cfg, const)
    with torch.no_grad():
        viol_openfold_bonds = float(_openfold_bond_terms(v["outputs"], batch, const))
    sqrt_n = float(torch.sqrt(batch["seq_mask"].sum()))
    documented = documented_differences(ours, viol_openfold_bonds, v["reference"], cfg, sqrt_n)
    theirs = v["reference"]["losses_fp32"]
    rows: dict = {
        k: {
            "openfold": float(theirs[k]),
            "ours": ours[k],
            "abs_diff": abs(ours[k] - float(theirs[k])),
            "documented_diff": documented.get(k, 0.0),
        }
        for k in theirs
        if k in ours
    }
    rows["align"] = {"openfold": v["permutation"]["align"], "ours": [list(p) for p in res.align]}
    return rows


def multimer_end_to_end(directory: str | os.PathLike) -> dict:
    """Our model (``params.npz`` under the vectors' preset, all recycling slices of ``batch.npz``,
    no early stop, as OpenFold's run), then our permutation alignment and loss. Returns
    ``{term: {"openfold", "ours_on_openfold_outputs", "ours_on_our_outputs"}}`` (OpenFold's names)
    and ``"align"``: ``{"openfold", "on_openfold_outputs", "on_our_outputs"}``.

    Raises:
        FileNotFoundError: ``params.npz`` or a file of :func:`load_multimer_vectors` is missing.
    """
    # on demand: only this check loads weights; the rest of the module reads vectors
    import dataclasses

    from ..weights import load_af2_params  # on demand, as above

    d = Path(directory)
    if not (d / "params.npz").is_file():
        raise FileNotFoundError(f"{d / 'params.npz'}: missing (the model weights the outputs were made with)")
    v = load_multimer_vectors(d)
    cfg, const = multimer_loss_setup(v["reference"], v["preset"])
    model = load_af2_params(d / "params.npz", preset=v["preset"]).eval()
    model.config = dataclasses.replace(model.config, recycle_early_stop_tolerance=0.0)
    with np.load(d / "batch.npz") as z:
        batch_all = {k: torch.from_numpy(z[k]) for k in z.files}
    with torch.no_grad():
        ours_out = model(batch_all, recycle_dim=-1)
    rows: dict = {}
    aligns = {"openfold": v["permutation"]["align"]}
    for name, outputs in (("on_openfold_outputs", v["outputs"]), ("on_our_outputs", ours_out)):
        batch, res = aligned_batch({**v, "outputs": outputs})
        aligns[name] = [list(p) for p in res.align]
        for k, x in openfold_named_terms(outputs, batch, cfg, const).items():
            rows.setdefault(k, {"openfold": float(v["reference"]["losses_fp32"][k])})[f"ours_{name}"] = x
    rows["align"] = aligns
    return rows
