"""Frame aligned point error and the symmetric-ground-truth renaming (Jumper et al. 2021,
Suppl. 1.9.2-1.9.3, Alg. 26 and Alg. 28).

All lengths are in Å. Every function is batched over leading dims ``*`` and runs in fp32 (the
caller, :class:`alphafold_mem.losses.AlphaFoldLoss`, casts its inputs).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..geometry import residue_constants as rc
from ..geometry.rigid import Rigid

#: The atom14 slots that hold an ambiguous atom in some residue type (ASP OD1/OD2, GLU OE1/OE2, PHE and
#: TYR CD1/CD2/CE1/CE2): the only rows of the renaming's distance comparison that the ambiguity mask keeps.
AMBIGUOUS_SLOTS = tuple(i for i in range(14) if any(row[i] for row in rc.restype_atom14_ambiguous_atoms))


def compute_fape(
    pred_frames: Rigid,
    target_frames: Rigid,
    frames_mask: Tensor,
    pred_positions: Tensor,
    target_positions: Tensor,
    positions_mask: Tensor,
    length_scale: float,
    clamp_distance: Optional[float] = None,
    eps: float = 1e-4,
    pair_mask: Optional[Tensor] = None,
) -> Tensor:
    """Frame aligned point error (Suppl. Alg. 28).

    Every point is expressed in the local coordinates of every frame, in the prediction and in the
    ground truth; the error is the distance between the two, ``sqrt(d^2 + eps)`` (``eps`` in Å²,
    1e-4 in AF2), optionally clamped at ``clamp_distance`` Å, divided by ``length_scale`` (Z = 10 Å)
    and averaged over the valid (frame, point) pairs.

    Note: because of ``eps`` the FAPE of a structure with itself is ``sqrt(eps) / length_scale``
    (1e-3 with the AF2 constants), not exactly 0; pass ``eps=0`` for an exact 0 (no backward then).

    Args:
        pred_frames, target_frames: Rigid ``[*, N_frames]`` (Å).
        frames_mask: ``[*, N_frames]``.
        pred_positions, target_positions: ``[*, N_pts, 3]`` (Å).
        positions_mask: ``[*, N_pts]``.
        pair_mask: optional ``[*, N_frames, N_pts]``: only these (frame, point) pairs count, and the
            mean is over them (AF2-Multimer's intra-chain / interface split, Evans et al. 2022).

    Returns:
        ``[*]`` the mean (clamped) error in units of ``length_scale``.
    """
    local_pred = pred_frames.invert()[..., None].apply(pred_positions[..., None, :, :])  # [*, F, P, 3]
    local_true = target_frames.invert()[..., None].apply(target_positions[..., None, :, :])  # [*, F, P, 3]
    dist = torch.sqrt(((local_pred - local_true) ** 2).sum(-1) + eps)  # [*, F, P]
    if clamp_distance is not None:
        dist = torch.clamp(dist, max=clamp_distance)
    err = dist / length_scale * frames_mask[..., :, None] * positions_mask[..., None, :]
    if pair_mask is not None:
        mask = frames_mask[..., :, None] * positions_mask[..., None, :] * pair_mask
        return (err * pair_mask).sum((-1, -2)) / (eps + mask.sum((-1, -2)))
    # Normalise by frames then by points (as AF2), which equals the mean over valid pairs.
    err = err.sum(-1) / (eps + frames_mask.sum(-1))[..., None]  # [*, F]
    return err.sum(-1) / (eps + positions_mask.sum(-1))  # [*]


def backbone_fape(
    sm_frames: Tensor,
    backbone_rigid_tensor: Tensor,
    backbone_rigid_mask: Tensor,
    clamp_distance: float,
    length_scale: float,
    use_clamped_fape: Optional[Tensor] = None,
    eps: float = 1e-4,
    pair_mask: Optional[Tensor] = None,
) -> Tensor:
    """Backbone FAPE over the Cα of every structure-module layer, averaged over layers
    (Suppl. 1.9.2, Alg. 20 line 17 and Eq. 7's L_aux / final FAPE).

    Args:
        sm_frames: predicted backbone frames per layer ``[L, *, N_res, 4, 4]`` (Å).
        backbone_rigid_tensor: true backbone frames ``[*, N_res, 4, 4]``.
        backbone_rigid_mask: ``[*, N_res]``.
        use_clamped_fape: ``[*]`` in {0, 1} or None. AF2 clamps the backbone FAPE at 10 Å in a
            fraction 0.9 of the training samples and leaves it unclamped in the rest (Suppl. 1.11.5).
            None: always clamped.
        pair_mask: optional ``[*, N_res, N_res]`` (frame i, Cα j) pairs that count (see
            :func:`compute_fape`).

    Returns:
        ``[*]`` backbone FAPE (units of ``length_scale``), mean over the L layers.
    """
    pred = Rigid.from_tensor_4x4(sm_frames)  # [L, *, N]
    true = Rigid.from_tensor_4x4(backbone_rigid_tensor[None])  # [1, *, N]
    mask = backbone_rigid_mask[None]
    pm = None if pair_mask is None else pair_mask[None]
    fape = compute_fape(pred, true, mask, pred.trans, true.trans, mask, length_scale, clamp_distance, eps, pm)  # [L, *]
    if use_clamped_fape is not None:
        unclamped = compute_fape(pred, true, mask, pred.trans, true.trans, mask, length_scale, None, eps, pm)
        w = use_clamped_fape.to(fape.dtype)
        fape = fape * w + unclamped * (1.0 - w)
    return fape.mean(0)


def rename_symmetric_ground_truth(
    atom14_pred_positions: Tensor,
    atom14_gt_positions: Tensor,
    atom14_alt_gt_positions: Tensor,
    atom14_gt_exists: Tensor,
    atom14_alt_gt_exists: Tensor,
    atom14_atom_is_ambiguous: Tensor,
    eps: float = 1e-10,
) -> dict[str, Tensor]:
    """Pick, per residue, the naming of symmetric atoms (ASP, GLU, PHE, TYR) that best matches the
    prediction (Suppl. 1.8.5, Alg. 26).

    For each residue the distances from its ambiguous atoms to all non-ambiguous atoms are compared
    with the predicted ones under both namings; the naming with the smaller summed deviation wins.
    Only the :data:`AMBIGUOUS_SLOTS` rows of the ``[*, N_res, N_res, 14, 14]`` comparison can count
    (the others are masked out), so only they are computed (4 of 14, the same sums), and without
    autograd: the choice is 0/1, no gradient flows through it.

    Args:
        atom14_pred_positions: ``[*, N_res, 14, 3]`` (Å).
        atom14_gt_positions, atom14_alt_gt_positions: ``[*, N_res, 14, 3]``.
        atom14_gt_exists, atom14_alt_gt_exists, atom14_atom_is_ambiguous: ``[*, N_res, 14]``
            (``atom14_atom_is_ambiguous`` as :func:`alphafold_mem.geometry.all_atom.make_atom14_gt`
            makes it: zero outside :data:`AMBIGUOUS_SLOTS`).

    Returns:
        ``alt_naming_is_better [*, N_res]`` (0/1), ``renamed_atom14_gt_positions [*, N_res, 14, 3]``
        and ``renamed_atom14_gt_exists [*, N_res, 14]``.
    """

    rows = list(AMBIGUOUS_SLOTS)

    def pair_dists(x: Tensor) -> Tensor:  # [*, N, 14, 3] -> [*, N, N, S, 14], S = len(rows)
        d = x[..., rows, :][..., :, None, :, None, :] - x[..., None, :, None, :, :]
        return torch.sqrt((d**2).sum(-1) + eps)

    with torch.no_grad():
        pred_d = pair_dists(atom14_pred_positions)
        gt_d = pair_dists(atom14_gt_positions)
        alt_d = pair_dists(atom14_alt_gt_positions)
        err = torch.sqrt((pred_d - gt_d) ** 2 + eps)
        alt_err = torch.sqrt((pred_d - alt_d) ** 2 + eps)
        amb = atom14_atom_is_ambiguous
        mask = (
            atom14_gt_exists[..., rows][..., :, None, :, None]
            * amb[..., rows][..., :, None, :, None]
            * atom14_gt_exists[..., None, :, None, :]
            * (1.0 - amb[..., None, :, None, :])
        )  # [*, N, N, S, 14]
        per_res = (mask * err).sum((-1, -2, -3))  # [*, N]
        alt_per_res = (mask * alt_err).sum((-1, -2, -3))
        alt_better = (alt_per_res < per_res).to(atom14_gt_positions.dtype)  # [*, N]
    a = alt_better[..., None]
    return {
        "alt_naming_is_better": alt_better,
        "renamed_atom14_gt_positions": (1.0 - a[..., None]) * atom14_gt_positions
        + a[..., None] * atom14_alt_gt_positions,
        "renamed_atom14_gt_exists": (1.0 - a) * atom14_gt_exists + a * atom14_alt_gt_exists,
    }


def sidechain_fape(
    sidechain_frames: Tensor,
    atom14_pred_positions: Tensor,
    rigidgroups_gt_frames: Tensor,
    rigidgroups_alt_gt_frames: Tensor,
    rigidgroups_gt_exists: Tensor,
    renamed: dict[str, Tensor],
    clamp_distance: float,
    length_scale: float,
    eps: float = 1e-4,
) -> Tensor:
    """All-atom (side-chain) FAPE of the final structure-module layer (Suppl. 1.9.3, Alg. 20
    line 28): all 8 rigid-group frames against all 14 atom slots, with the renamed ground truth.

    Args:
        sidechain_frames: final-layer rigid-group frames ``[*, N_res, 8, 4, 4]`` (Å).
        atom14_pred_positions: final-layer atoms ``[*, N_res, 14, 3]``.
        rigidgroups_gt_frames, rigidgroups_alt_gt_frames: ``[*, N_res, 8, 4, 4]``.
        rigidgroups_gt_exists: ``[*, N_res, 8]``.
        renamed: the output of :func:`rename_symmetric_ground_truth`.

    Returns:
        ``[*]`` side-chain FAPE in units of ``length_scale``.
    """
    alt = renamed["alt_naming_is_better"][..., None, None, None]  # [*, N, 1, 1, 1]
    gt_frames = (1.0 - alt) * rigidgroups_gt_frames + alt * rigidgroups_alt_gt_frames  # [*, N, 8, 4, 4]
    pred = Rigid.from_tensor_4x4(sidechain_frames.flatten(-4, -3))  # [*, N*8]
    true = Rigid.from_tensor_4x4(gt_frames.flatten(-4, -3))  # [*, N*8]
    frames_mask = rigidgroups_gt_exists.flatten(-2)  # [*, N*8]
    pred_pos = atom14_pred_positions.flatten(-3, -2)  # [*, N*14, 3]
    true_pos = renamed["renamed_atom14_gt_positions"].flatten(-3, -2)
    pos_mask = renamed["renamed_atom14_gt_exists"].flatten(-2)  # [*, N*14]
    return compute_fape(pred, true, frames_mask, pred_pos, true_pos, pos_mask, length_scale, clamp_distance, eps)
