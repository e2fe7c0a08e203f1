"""Torsion-angle and auxiliary-head losses (Jumper et al. 2021, Suppl. 1.9.1, 1.9.6-1.9.10).

Each returns a per-example loss ``[*]``; inputs are expected in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..geometry import residue_constants as rc
from ..geometry.rigid import Rigid
from ..metrics import lddt


def _masked_mean(x: Tensor, mask: Tensor, dims, eps: float = 1e-10) -> Tensor:
    mask = mask.expand_as(x)
    return (x * mask).sum(dims) / (eps + mask.sum(dims))


def supervised_chi_loss(
    sm_angles: Tensor,
    sm_unnormalized_angles: Tensor,
    aatype: Tensor,
    seq_mask: Tensor,
    chi_mask: Tensor,
    chi_angles_sin_cos: Tensor,
    chi_weight: float,
    angle_norm_weight: float,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Side-chain torsion loss and angle-norm loss (Suppl. 1.9.1, Alg. 27), over every
    structure-module layer.

    L_torsion = mean over layers and valid chis of min(|a - a_true|², |a - a_alt|²), where a_alt
    is a_true rotated by pi for the pi-periodic chis (ASP chi2, GLU chi3, PHE chi2, TYR chi2).
    L_anglenorm = mean over layers, residues and the 7 angles of | ||a_unnormalised|| - 1 |.

    Args:
        sm_angles, sm_unnormalized_angles: ``[L, *, N_res, 7, 2]`` (sin, cos).
        aatype: ``[*, N_res]``; seq_mask: ``[*, N_res]``.
        chi_mask: ``[*, N_res, 4]``; chi_angles_sin_cos: ``[*, N_res, 4, 2]``.

    Returns:
        ``(chi_weight * L_torsion, angle_norm_weight * L_anglenorm)``, each ``[*]``.
    """
    pred = sm_angles[..., 3:, :]  # [L, *, N, 4, 2] chi1-4
    periodic = torch.as_tensor(rc.chi_pi_periodic, dtype=pred.dtype, device=pred.device)[
        aatype.long().clamp(0, rc.restype_num)
    ]  # [*, N, 4]
    true = chi_angles_sin_cos[None]  # [1, *, N, 4, 2]
    true_alt = true * (1.0 - 2.0 * periodic)[None, ..., None]
    err = torch.minimum(((pred - true) ** 2).sum(-1), ((pred - true_alt) ** 2).sum(-1))  # [L, *, N, 4]
    num_layers = pred.shape[0]
    err = err.movedim(0, -3)  # [*, L, N, 4]
    chi = _masked_mean(err, chi_mask[..., None, :, :], (-1, -2, -3))  # [*]
    norm = torch.sqrt((sm_unnormalized_angles**2).sum(-1) + eps)  # [L, *, N, 7]
    norm_err = (norm - 1.0).abs().movedim(0, -3)  # [*, L, N, 7]
    mask = seq_mask[..., None, :, None].expand(*seq_mask.shape[:-1], num_layers, seq_mask.shape[-1], 7)
    angle_norm = _masked_mean(norm_err, mask, (-1, -2, -3))
    return chi_weight * chi, angle_norm_weight * angle_norm


def distogram_loss(
    logits: Tensor, pseudo_beta: Tensor, pseudo_beta_mask: Tensor, min_bin: float, max_bin: float, eps: float = 1e-6
) -> Tensor:
    """Distogram cross-entropy (Suppl. 1.9.8): pseudo-beta distances binned into ``num_bins`` bins
    with ``num_bins - 1`` equally spaced edges from ``min_bin`` to ``max_bin`` Å (2.3125-21.6875, 64
    bins in AF2); the last bin catches everything beyond.

    Args:
        logits: ``[*, N_res, N_res, num_bins]``; pseudo_beta: ``[*, N_res, 3]``; pseudo_beta_mask ``[*, N_res]``.

    Returns:
        ``[*]`` mean cross-entropy over valid pairs (i, j), i == j included as in AF2.
    """
    num_bins = logits.shape[-1]
    edges = torch.linspace(min_bin, max_bin, num_bins - 1, device=logits.device, dtype=logits.dtype)
    d2 = ((pseudo_beta[..., :, None, :] - pseudo_beta[..., None, :, :]) ** 2).sum(-1, keepdim=True)
    true_bins = (d2 > edges**2).sum(-1)  # [*, N, N]
    ce = _cross_entropy(logits, true_bins)  # [*, N, N]
    mask = pseudo_beta_mask[..., :, None] * pseudo_beta_mask[..., None, :]
    return (ce * mask).sum((-1, -2)) / (eps + mask.sum((-1, -2)))


def _cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Categorical cross-entropy over the last dim, any leading dims: ``[*, C]``, ``[*]`` -> ``[*]``."""
    return -torch.log_softmax(logits, -1).gather(-1, labels.long()[..., None]).squeeze(-1)


def masked_msa_loss(logits: Tensor, true_msa: Tensor, bert_mask: Tensor, eps: float = 1e-8) -> Tensor:
    """BERT-style masked-MSA cross-entropy (Suppl. 1.9.9) over the 23 classes (20 aa, X, gap,
    mask) at the corrupted positions; AF2-Multimer's head has 22 (no mask class): the class count
    is the logits' last dim.

    Args:
        logits: ``[*, N_seq, N_res, 23 or 22]``; true_msa: ``[*, N_seq, N_res]`` (int);
        bert_mask: ``[*, N_seq, N_res]``.

    Returns:
        ``[*]`` mean cross-entropy over the masked positions.
    """
    ce = _cross_entropy(logits, true_msa)
    return (ce * bert_mask).sum((-1, -2)) / (eps + bert_mask.sum((-1, -2)))


def _resolution_ok(resolution: Tensor, min_resolution: float, max_resolution: float) -> Tensor:
    return ((resolution >= min_resolution) & (resolution <= max_resolution)).to(torch.float32)


def plddt_loss(
    lddt_logits: Tensor,
    final_atom_positions: Tensor,
    all_atom_positions: Tensor,
    all_atom_mask: Tensor,
    resolution: Tensor,
    cutoff: float = 15.0,
    min_resolution: float = 0.1,
    max_resolution: float = 3.0,
    eps: float = 1e-8,
) -> Tensor:
    """pLDDT head loss (Suppl. 1.9.6, Alg. 29): cross-entropy between the head's ``B`` bins and the
    per-residue lDDT-Cα of the (detached) final prediction binned into ``B`` equal bins on [0, 1].

    Only structures with ``min_resolution <= resolution <= max_resolution`` Å contribute (AF2:
    0.1-3.0 Å).

    Args:
        lddt_logits: ``[*, N_res, B]``; final_atom_positions, all_atom_positions ``[*, N_res, 37, 3]``;
        all_atom_mask ``[*, N_res, 37]``; resolution ``[*]`` (Å).

    Returns:
        ``[*]``.
    """
    ca = rc.atom_order["CA"]
    num_bins = lddt_logits.shape[-1]
    mask = all_atom_mask[..., ca]
    with torch.no_grad():
        score = lddt(
            final_atom_positions[..., ca, :].detach(),
            all_atom_positions[..., ca, :],
            mask,
            cutoff=cutoff,
            per_residue=True,
            no_pairs=1.0,
        )  # [*, N] (1.0 without pairs: AF2)
        bins = torch.clamp(torch.floor(score * num_bins), max=num_bins - 1).long()
    ce = _cross_entropy(lddt_logits, bins)
    loss = (ce * mask).sum(-1) / (eps + mask.sum(-1))
    return loss * _resolution_ok(resolution, min_resolution, max_resolution)


def experimentally_resolved_loss(
    logits: Tensor,
    all_atom_mask: Tensor,
    atom37_atom_exists: Tensor,
    resolution: Tensor,
    min_resolution: float = 0.1,
    max_resolution: float = 3.0,
    eps: float = 1e-8,
) -> Tensor:
    """Experimentally-resolved head loss (Suppl. 1.9.10): per-atom sigmoid cross-entropy of
    whether each atom that exists in the residue type was resolved, for 0.1-3.0 Å structures.

    Args:
        logits: ``[*, N_res, 37]``; all_atom_mask, atom37_atom_exists: ``[*, N_res, 37]``; resolution ``[*]``.

    Returns:
        ``[*]``.
    """
    err = F.binary_cross_entropy_with_logits(logits, all_atom_mask, reduction="none")
    loss = (err * atom37_atom_exists).sum((-1, -2)) / (eps + atom37_atom_exists.sum((-1, -2)))
    return loss * _resolution_ok(resolution, min_resolution, max_resolution)


def tm_loss(
    pae_logits: Tensor,
    sm_final_frames: Tensor,
    backbone_rigid_tensor: Tensor,
    backbone_rigid_mask: Tensor,
    resolution: Tensor,
    max_bin: float = 31.0,
    min_resolution: float = 0.1,
    max_resolution: float = 3.0,
    eps: float = 1e-8,
) -> Tensor:
    """Predicted-aligned-error (TM) head loss (Suppl. 1.9.7): the error of Cα j in the frame of
    residue i, prediction vs truth, binned with ``num_bins - 1`` edges on [0, ``max_bin``] Å (31 Å,
    64 bins in AF2); cross-entropy averaged over valid pairs, for 0.1-3.0 Å structures.

    Args:
        pae_logits: ``[*, N_res, N_res, B]``; sm_final_frames: ``[*, N_res, 4, 4]`` (last structure
        module layer, Å, detached here); backbone_rigid_tensor ``[*, N_res, 4, 4]``; backbone_rigid_mask
        ``[*, N_res]``; resolution ``[*]``.

    Returns:
        ``[*]``.
    """
    pred = Rigid.from_tensor_4x4(sm_final_frames.detach())
    true = Rigid.from_tensor_4x4(backbone_rigid_tensor)
    with torch.no_grad():
        # R_i^T (t_j - t_i), as AF2's QuatAffine.invert_point: exactly 0 on the diagonal, so i == j
        # falls in bin 0 (the first edge is 0 Å; a rounding residue would move it to bin 1)
        local_pred = pred[..., None].invert_apply(pred.trans[..., None, :, :])  # [*, I, J, 3]
        local_true = true[..., None].invert_apply(true.trans[..., None, :, :])
        err2 = ((local_pred - local_true) ** 2).sum(-1, keepdim=True)  # [*, I, J, 1]
        num_bins = pae_logits.shape[-1]
        edges = torch.linspace(0.0, max_bin, num_bins - 1, device=pae_logits.device, dtype=err2.dtype)
        bins = (err2 > edges**2).sum(-1)  # [*, I, J]
    ce = _cross_entropy(pae_logits, bins)
    mask = backbone_rigid_mask[..., :, None] * backbone_rigid_mask[..., None, :]
    loss = (ce * mask).sum((-1, -2)) / (eps + mask.sum((-1, -2)))
    return loss * _resolution_ok(resolution, min_resolution, max_resolution)
