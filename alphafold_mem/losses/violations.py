"""Structural violation losses: peptide-bond geometry and steric clashes (Jumper et al. 2021,
Suppl. 1.9.11, Eq. 44-47). Used in fine-tuning (weight 1.0 there, 0 in initial training).

Constants (AF2 ``config.py``, ``structural_violation``): violation_tolerance_factor = 12 (bond
lengths/angles may deviate by 12 standard deviations of the Engh & Huber statistics before they
are penalised) and clash_overlap_tolerance = 1.5 Å (van der Waals radii may overlap by 1.5 Å).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..geometry import residue_constants as rc


@functools.lru_cache(maxsize=None)
def _atom14_radius_table() -> np.ndarray:
    """``[21, 14]`` van der Waals radius (Å) of each atom14 slot (0 for empty slots)."""
    out = np.zeros([21, 14], np.float32)
    for r, name in enumerate(rc.resnames):
        for i, atom in enumerate(rc.restype_name_to_atom14_names[name]):
            if atom:
                out[r, i] = rc.van_der_waals_radius[atom[0]]
    return out


@functools.lru_cache(maxsize=None)
def _bounds(overlap_tolerance: float, tolerance_factor: float) -> dict[str, np.ndarray]:
    return rc.make_atom14_dists_bounds(overlap_tolerance, tolerance_factor)


def _restype(aatype: Tensor) -> Tensor:
    return aatype.long().clamp(0, rc.restype_num)


def between_residue_bond_loss(
    pos: Tensor,
    mask: Tensor,
    residue_index: Tensor,
    aatype: Tensor,
    tolerance_factor_soft: float = 12.0,
    tolerance_factor_hard: float = 12.0,
    eps: float = 1e-6,
    asym_id: Tensor | None = None,
) -> dict[str, Tensor]:
    """Flat-bottom losses on the peptide bond C(i)-N(i+1) length and the CA-C-N / C-N-CA angles
    (Suppl. 1.9.11, Eq. 44-45) for consecutive residues (residue_index differs by 1).

    Args:
        pos: atom14 positions ``[*, N_res, 14, 3]`` (Å); mask: ``[*, N_res, 14]``;
        residue_index, aatype: ``[*, N_res]``.
        asym_id: optional chain ids ``[*, N_res]``: consecutive residues of different chains are
            not bonded (AF2-Multimer; OpenFold's multimer loss tests ``residue_index`` only and
            so bonds the last residue of a chain to the first of the next when their indices
            happen to differ by 1).

    Returns:
        ``c_n_loss_mean``, ``ca_c_n_loss_mean``, ``c_n_ca_loss_mean`` ``[*]`` and
        ``per_residue_violation_mask`` ``[*, N_res]`` (1 where a bond/angle exceeds the hard tolerance).
    """
    n, ca, c = 0, 1, 2  # atom14 slots of N, CA, C
    this_ca, this_c = pos[..., :-1, ca, :], pos[..., :-1, c, :]
    next_n, next_ca = pos[..., 1:, n, :], pos[..., 1:, ca, :]
    no_gap = (residue_index[..., 1:] - residue_index[..., :-1]) == 1  # [*, N-1]
    if asym_id is not None:
        no_gap = no_gap & (asym_id[..., 1:] == asym_id[..., :-1])
    no_gap = no_gap.to(pos.dtype)

    c_n_len = torch.sqrt(eps + ((this_c - next_n) ** 2).sum(-1))
    next_is_pro = (_restype(aatype[..., 1:]) == rc.resname_to_idx["PRO"]).to(pos.dtype)
    gt_len = (1 - next_is_pro) * rc.between_res_bond_length_c_n[0] + next_is_pro * rc.between_res_bond_length_c_n[1]
    gt_std = (1 - next_is_pro) * rc.between_res_bond_length_stddev_c_n[
        0
    ] + next_is_pro * rc.between_res_bond_length_stddev_c_n[1]
    c_n_err = torch.sqrt(eps + (c_n_len - gt_len) ** 2)
    c_n_mask = mask[..., :-1, c] * mask[..., 1:, n] * no_gap
    c_n_loss = F.relu(c_n_err - tolerance_factor_soft * gt_std)
    c_n_viol = c_n_mask * (c_n_err > tolerance_factor_hard * gt_std)

    ca_c_len = torch.sqrt(eps + ((this_ca - this_c) ** 2).sum(-1))
    n_ca_len = torch.sqrt(eps + ((next_n - next_ca) ** 2).sum(-1))
    c_ca_unit = (this_ca - this_c) / ca_c_len[..., None]
    c_n_unit = (next_n - this_c) / c_n_len[..., None]
    n_ca_unit = (next_ca - next_n) / n_ca_len[..., None]

    cos1 = (c_ca_unit * c_n_unit).sum(-1)  # cos(CA-C-N)
    # AF2's definition (``between_residue_bond_loss`` in alphafold/model/all_atom.py, reproduced by
    # OpenFold): the CA-C-N angle is judged against the C-N *bond length* standard deviation (0.014),
    # not the angle's own (0.0311). We follow AF2 so that the loss is AF2's number for number.
    mean1, std1 = rc.between_res_cos_angles_ca_c_n[0], rc.between_res_bond_length_stddev_c_n[0]
    err1 = torch.sqrt(eps + (cos1 - mean1) ** 2)
    mask1 = mask[..., :-1, ca] * mask[..., :-1, c] * mask[..., 1:, n] * no_gap
    loss1 = F.relu(err1 - tolerance_factor_soft * std1)
    viol1 = mask1 * (err1 > tolerance_factor_hard * std1)

    cos2 = (-c_n_unit * n_ca_unit).sum(-1)  # cos(C-N-CA)
    mean2, std2 = rc.between_res_cos_angles_c_n_ca
    err2 = torch.sqrt(eps + (cos2 - mean2) ** 2)
    mask2 = mask[..., :-1, c] * mask[..., 1:, n] * mask[..., 1:, ca] * no_gap
    loss2 = F.relu(err2 - tolerance_factor_soft * std2)
    viol2 = mask2 * (err2 > tolerance_factor_hard * std2)

    viol = torch.maximum(torch.maximum(c_n_viol, viol1), viol2)  # [*, N-1] bond (i, i+1)
    per_res_viol = torch.maximum(F.pad(viol, (0, 1)), F.pad(viol, (1, 0)))  # [*, N]
    return {
        "c_n_loss_mean": (c_n_mask * c_n_loss).sum(-1) / (c_n_mask.sum(-1) + eps),
        "ca_c_n_loss_mean": (mask1 * loss1).sum(-1) / (mask1.sum(-1) + eps),
        "c_n_ca_loss_mean": (mask2 * loss2).sum(-1) / (mask2.sum(-1) + eps),
        "per_residue_violation_mask": per_res_viol,
    }


def between_residue_clash_loss(
    pos: Tensor,
    mask: Tensor,
    residue_index: Tensor,
    aatype: Tensor,
    overlap_tolerance_soft: float = 1.5,
    overlap_tolerance_hard: float = 1.5,
    eps: float = 1e-10,
    asym_id: Tensor | None = None,
) -> dict[str, Tensor]:
    """Steric clashes between atoms of different residues (Suppl. 1.9.11, Eq. 46): a penalty
    relu(r_a + r_b - tolerance - d) for every non-bonded inter-residue atom pair. The peptide
    bond C(i)-N(i+1) and the disulfide pair are excluded. As in AF2 (and OpenFold), the disulfide
    exclusion removes the atom14 slot-5 pair (CYS SG) of *any* two residues, not only of two
    cysteines: that is AF2's definition, kept so the loss matches it number for number
    (``tests/test_loss_parity.py``).

    Args:
        pos: ``[*, N_res, 14, 3]`` (Å); mask: ``[*, N_res, 14]``; residue_index, aatype ``[*, N_res]``.
        asym_id: optional ``[*, N_res]``: the peptide-bond exclusion only within a chain. Pairs are
            still taken once by ``residue_index`` order, as AF2-Multimer and OpenFold do (with
            indices restarting per chain, two residues of equal index in different chains are
            not compared).

    Returns:
        ``per_atom_loss_sum`` ``[*, N_res, 14]`` (each pair's penalty given to both atoms),
        ``per_atom_clash_mask`` and ``per_atom_num_clash`` (number of clashing partners) ``[*, N_res, 14]``.
    """
    restype = _restype(aatype)
    radius = torch.as_tensor(_atom14_radius_table(), dtype=pos.dtype, device=pos.device)[restype] * mask  # [*, N, 14]
    d = torch.sqrt(
        eps + ((pos[..., :, None, :, None, :] - pos[..., None, :, None, :, :]) ** 2).sum(-1)
    )  # [*, N, N, 14, 14]
    ri = residue_index
    pair_mask = mask[..., :, None, :, None] * mask[..., None, :, None, :]
    pair_mask = pair_mask * (ri[..., :, None] < ri[..., None, :]).to(pos.dtype)[..., None, None]  # each pair once
    bonded = (ri[..., :, None] + 1) == ri[..., None, :]  # [*, N, N]
    if asym_id is not None:
        bonded = bonded & (asym_id[..., :, None] == asym_id[..., None, :])
    bonded = bonded.to(pos.dtype)
    c_n = torch.zeros(14, 14, dtype=pos.dtype, device=pos.device)
    c_n[2, 0] = 1.0  # C of residue i with N of residue i+1
    pair_mask = pair_mask * (1.0 - bonded[..., None, None] * c_n)
    sg = rc.restype_name_to_atom14_names["CYS"].index("SG")
    ss = torch.zeros(14, 14, dtype=pos.dtype, device=pos.device)
    ss[sg, sg] = 1.0
    pair_mask = pair_mask * (1.0 - ss)

    lower = pair_mask * (radius[..., :, None, :, None] + radius[..., None, :, None, :])
    err = pair_mask * F.relu(lower - overlap_tolerance_soft - d)  # [*, N, N, 14, 14]
    per_atom = err.sum((-4, -2)) + err.sum((-3, -1))  # [*, N, 14]
    clash = pair_mask * (d < lower - overlap_tolerance_hard)
    per_atom_clash = torch.maximum(clash.amax((-4, -2)), clash.amax((-3, -1)))
    num_clash = clash.sum((-4, -2)) + clash.sum((-3, -1))
    return {"per_atom_loss_sum": per_atom, "per_atom_clash_mask": per_atom_clash, "per_atom_num_clash": num_clash}


def within_residue_violations(
    pos: Tensor,
    mask: Tensor,
    aatype: Tensor,
    overlap_tolerance: float = 1.5,
    tolerance_factor: float = 12.0,
    eps: float = 1e-10,
) -> dict[str, Tensor]:
    """Intra-residue bond lengths, bond angles (as 1-3 distances) and clashes against the bounds
    of ``residue_constants.make_atom14_dists_bounds`` (Suppl. 1.9.11, Eq. 47).

    Returns:
        ``per_atom_loss_sum``, ``per_atom_violations`` and ``per_atom_num_clash`` ``[*, N_res, 14]``.
    """
    restype = _restype(aatype)
    bounds = _bounds(overlap_tolerance, tolerance_factor)
    lower = torch.as_tensor(bounds["lower_bound"], dtype=pos.dtype, device=pos.device)[restype]  # [*, N, 14, 14]
    upper = torch.as_tensor(bounds["upper_bound"], dtype=pos.dtype, device=pos.device)[restype]
    not_self = 1.0 - torch.eye(14, dtype=pos.dtype, device=pos.device)
    pair_mask = not_self * mask[..., :, None] * mask[..., None, :]
    d = torch.sqrt(eps + ((pos[..., :, None, :] - pos[..., None, :, :]) ** 2).sum(-1))  # [*, N, 14, 14]
    err = pair_mask * (F.relu(lower - d) + F.relu(d - upper))
    per_atom = err.sum(-2) + err.sum(-1)
    viol = pair_mask * ((d < lower) | (d > upper))
    return {
        "per_atom_loss_sum": per_atom,
        "per_atom_violations": torch.maximum(viol.amax(-2), viol.amax(-1)),
        "per_atom_num_clash": viol.sum(-2) + viol.sum(-1),
    }


def find_structural_violations(
    pos: Tensor,
    mask: Tensor,
    residue_index: Tensor,
    aatype: Tensor,
    tolerance_factor: float = 12.0,
    overlap_tolerance: float = 1.5,
    asym_id: Tensor | None = None,
) -> dict[str, Tensor]:
    """Run all three checks on atom14 coordinates ``[*, N_res, 14, 3]`` (Å) with mask ``[*, N_res, 14]``;
    ``asym_id [*, N_res]`` (optional) marks chain boundaries for the peptide-bond terms."""
    bonds = between_residue_bond_loss(
        pos, mask, residue_index, aatype, tolerance_factor, tolerance_factor, asym_id=asym_id
    )
    clashes = between_residue_clash_loss(
        pos, mask, residue_index, aatype, overlap_tolerance, overlap_tolerance, asym_id=asym_id
    )
    within = within_residue_violations(pos, mask, aatype, overlap_tolerance, tolerance_factor)
    per_res = torch.maximum(
        bonds["per_residue_violation_mask"],
        torch.maximum(clashes["per_atom_clash_mask"], within["per_atom_violations"]).amax(-1),
    )
    return {"bonds": bonds, "clashes": clashes, "within": within, "per_residue_violation_mask": per_res}


def violation_loss(violations: dict, mask: Tensor, eps: float = 1e-6, average_clashes: bool = False) -> Tensor:
    """Total violation loss (Suppl. 1.9.11, Eq. 44-47): the three bond/angle means plus the summed
    clash penalties per existing atom.

    Args:
        violations: :func:`find_structural_violations` output; mask: atom14 mask ``[*, N_res, 14]``.
        average_clashes: AF2-Multimer: each atom's clash penalty is divided by its number of
            clashes (+ ``eps``) before the sum over atoms.

    Returns:
        ``[*]``.
    """
    b = violations["bonds"]
    per_atom = violations["clashes"]["per_atom_loss_sum"] + violations["within"]["per_atom_loss_sum"]
    if average_clashes:
        num = violations["clashes"]["per_atom_num_clash"] + violations["within"]["per_atom_num_clash"]
        per_atom = per_atom / (num + eps)
    clash = per_atom.sum((-1, -2))
    return b["c_n_loss_mean"] + b["ca_c_n_loss_mean"] + b["c_n_ca_loss_mean"] + clash / (eps + mask.sum((-1, -2)))


def violation_fraction(violations: dict, seq_mask: Tensor, eps: float = 1e-6) -> Tensor:
    """Fraction of residues with any hard violation ``[*]`` (a metric, not a loss)."""
    v = violations["per_residue_violation_mask"]
    return (v * seq_mask).sum(-1) / (eps + seq_mask.sum(-1))
