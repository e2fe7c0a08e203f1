"""Loss terms that exist only for complexes (Evans et al. 2022, AlphaFold-Multimer): the backbone
FAPE split into intra-chain and interface pairs, and the chain centre-of-mass loss. The other
multimer terms are the monomer functions with ``asym_id`` passed (:mod:`alphafold_mem.losses.violations`)
or unchanged; :class:`alphafold_mem.losses.AlphaFoldLoss`
combines them under the weights of :data:`alphafold_mem.config.MULTIMER_FINETUNING_LOSS`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..geometry import residue_constants as rc
from .fape import backbone_fape

__all__ = ["multimer_backbone_fape", "chain_center_of_mass_loss"]


def multimer_backbone_fape(
    sm_frames: Tensor,
    backbone_rigid_tensor: Tensor,
    backbone_rigid_mask: Tensor,
    asym_id: Tensor,
    intra_clamp_distance: float = 10.0,
    intra_length_scale: float = 10.0,
    interface_clamp_distance: float = 30.0,
    interface_length_scale: float = 20.0,
    use_clamped_fape: Optional[Tensor] = None,
    eps: float = 1e-4,
) -> tuple[Tensor, Tensor]:
    """Backbone FAPE of a complex, AF2-Multimer: pairs (frame i, Cα j) of the same chain are clamped
    at 10 Å and scaled by 10 Å, pairs of different chains clamped at 30 Å and scaled by 20 Å; each
    part is the mean over its own valid pairs, averaged over the structure-module layers.

    Args:
        sm_frames: ``[L, *, N_res, 4, 4]`` (Å); backbone_rigid_tensor ``[*, N_res, 4, 4]``;
        backbone_rigid_mask ``[*, N_res]``; asym_id ``[*, N_res]``; use_clamped_fape ``[*]`` or None
        (see :func:`alphafold_mem.losses.fape.backbone_fape`).

    Returns:
        ``(intra_chain, interface)``, each ``[*]`` in units of its length scale. A crop of one chain
        has no interface pairs: its interface term is 0.
    """
    intra = (asym_id[..., :, None] == asym_id[..., None, :]).to(sm_frames.dtype)
    args = (sm_frames, backbone_rigid_tensor, backbone_rigid_mask)
    intra_fape = backbone_fape(*args, intra_clamp_distance, intra_length_scale, use_clamped_fape, eps, pair_mask=intra)
    interface_fape = backbone_fape(
        *args, interface_clamp_distance, interface_length_scale, use_clamped_fape, eps, pair_mask=1.0 - intra
    )
    return intra_fape, interface_fape


def chain_center_of_mass_loss(
    final_atom_positions: Tensor,
    all_atom_positions: Tensor,
    all_atom_mask: Tensor,
    asym_id: Tensor,
    clamp_distance: float = -4.0,
    length_scale: float = 20.0,
    eps: float = 1e-8,
    mean_eps: float = 1e-4,
) -> Tensor:
    """Chain centre-of-mass loss (AF2-Multimer section 2.5, Eq. 1): for every ordered pair of chains
    (i, j) present in the crop, i = j included, with Cα centres of mass ``c`` (over the Cα that are
    resolved in the ground truth)::

        min(0, (|c_i^pred - c_j^pred| - |c_i^true - c_j^true| - clamp_distance) / length_scale)^2

    averaged over the pairs: it penalises predicted chains closer together than in the ground truth
    by more than 4 Å. The 1/20 Å is part of the term; the loss weight applies on top of it once
    (OpenFold passes its weight 0.05 as this scale and multiplies by 0.05 again).

    Args:
        final_atom_positions, all_atom_positions: ``[*, N_res, 37, 3]`` (Å); all_atom_mask
        ``[*, N_res, 37]``; asym_id ``[*, N_res]`` (int; padding, whatever its id, has no resolved
        Cα and so counts as no chain). ``eps`` bounds the distances below (as OpenFold's
        ``Vec3Array.norm``, eps² under the square root) and regularises the centre denominators;
        ``mean_eps`` the mean over pairs (OpenFold's ``masked_mean``).

    Returns:
        ``[*]``.
    """
    ca = rc.atom_order["CA"]
    mask = all_atom_mask[..., ca]  # [*, N]
    # Residue-pair form (no chain dim, so no data-dependent shape: it also runs under FakeTensorMode):
    # each resolved residue n stands for its chain with weight 1 / (resolved residues of its chain),
    # so sums over residue pairs weighted w_n w_m are sums over chain pairs.
    same = (asym_id[..., :, None] == asym_id[..., None, :]).to(mask.dtype) * mask[..., None, :]  # [*, N, N]
    count = same.sum(-1)  # [*, N] resolved Cα of residue n's chain

    def centres(pos: Tensor) -> Tensor:  # [*, N, 3] -> centre of each residue's chain [*, N, 3]
        return (same @ pos) / (count[..., None] + eps)

    def dists(c: Tensor) -> Tensor:  # [*, N, 3] -> [*, N, N]
        d2 = ((c[..., None, :, :] - c[..., :, None, :]) ** 2).sum(-1)
        return torch.sqrt(torch.clamp(d2, min=eps**2))

    pred = dists(centres(final_atom_positions[..., ca, :]))
    true = dists(centres(all_atom_positions[..., ca, :]))
    losses = torch.clamp((pred - true - clamp_distance) / length_scale, max=0.0) ** 2
    w = mask / count.clamp(min=1.0)  # [*, N]
    pair_w = w[..., :, None] * w[..., None, :]
    return (losses * pair_w).sum((-1, -2)) / (mean_eps + pair_w.sum((-1, -2)))
