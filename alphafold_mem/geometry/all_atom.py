"""Torsion angles <-> rigid-group frames <-> all-atom coordinates (Jumper et al. 2021, Suppl. 1.8).

Conventions: lengths in Å, angles as (sin, cos) pairs, batched over any leading dims ``*``.
Residue types follow ``residue_constants`` (20 amino acids, 20 = UNK); an index 21 (gap, as in
template features) is treated as UNK. The 7 torsions are (pre-omega, phi, psi, chi1, chi2, chi3,
chi4); the 8 rigid groups are (backbone, pre-omega, phi, psi, chi1, chi2, chi3, chi4).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from alphafold_mem.geometry import residue_constants as rc
from alphafold_mem.geometry.rigid import Rigid

_TABLE_CACHE: dict[tuple, Tensor] = {}


def _fake_mode_active() -> bool:
    """True inside torch's FakeTensorMode (memory estimation): tables made there must not be cached."""
    try:
        return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None
    except AttributeError:  # older torch without the mode-key API
        return False


def _table(name: str, like: Tensor, float_dtype: torch.dtype | None = None) -> Tensor:
    """A ``residue_constants`` array as a tensor on ``like.device`` (float tables in ``float_dtype``).

    Real tensors are cached per (name, device, dtype); under FakeTensorMode a fresh fake tensor is
    made each time, so estimation never leaves fake tensors in the cache.
    """
    if _fake_mode_active():
        return torch.as_tensor(np.asarray(getattr(rc, name)), device=like.device, dtype=float_dtype)
    key = (name, like.device, float_dtype)
    table = _TABLE_CACHE.get(key)
    if table is None:
        table = torch.as_tensor(np.asarray(getattr(rc, name)), device=like.device, dtype=float_dtype)
        _TABLE_CACHE[key] = table
    return table


def _restype(aatype: Tensor) -> Tensor:
    """Residue-type indices clamped into the 21-row tables (gap 21 -> UNK 20)."""
    return aatype.long().clamp(0, rc.restype_num)


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """``torch.broadcast_shapes(a, b)`` written out (torch's runs its Python reference, whose first
    call imports sympy, ~0.5 s CPU per process); raises RuntimeError when the shapes do not broadcast."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
        raise RuntimeError(f"shapes {a} and {b} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _gather_atoms(x: Tensor, idx: Tensor, n_trailing: int) -> Tensor:
    """Select atoms along the atom axis: ``x [*, N, A, <n_trailing dims>]``, ``idx [*, N, B]``
    -> ``[*, N, B, <trailing>]``; the leading dims of ``x`` and ``idx`` broadcast."""
    atom_dim = x.dim() - n_trailing - 1
    trailing = x.shape[atom_dim + 1 :]
    batch = broadcast_shapes(x.shape[:atom_dim], idx.shape[:-1])
    x = x.expand(*batch, *x.shape[atom_dim:])
    idx = idx.expand(*batch, idx.shape[-1])
    index = idx.reshape(idx.shape + (1,) * n_trailing).expand(*idx.shape, *trailing)
    return torch.gather(x, len(batch), index)


def _frames_from_axis(axis_start: Tensor, origin: Tensor, xy_point: Tensor, eps: float = 1e-8) -> Rigid:
    """Frames with origin ``origin``, x-axis along ``axis_start -> origin`` and ``xy_point`` in the
    xy-plane (y > 0); Gram-Schmidt as in Suppl. Alg. 21. Inputs ``[*, 3]`` (Å)."""
    e0 = origin - axis_start
    e0 = e0 / torch.sqrt((e0 * e0).sum(-1, keepdim=True) + eps)
    e1 = xy_point - origin
    e1 = e1 - e0 * (e0 * e1).sum(-1, keepdim=True)
    e1 = e1 / torch.sqrt((e1 * e1).sum(-1, keepdim=True) + eps)
    e2 = torch.cross(e0, e1, dim=-1)
    return Rigid(torch.stack([e0, e1, e2], dim=-1), origin)  # rots [*, 3, 3], columns = axes


# ------------------------------------------------------------------------------------------------
# Forward: torsions -> frames -> atoms (structure module)
# ------------------------------------------------------------------------------------------------
def torsion_angles_to_frames(backb: Rigid, angles_sin_cos: Tensor, aatype: Tensor) -> Rigid:
    """Global frames of the 8 rigid groups (Suppl. Alg. 24 lines 1-10).

    Args:
        backb: backbone frames, shape ``[*, N_res]`` (translations in Å).
        angles_sin_cos: ``[*, N_res, 7, 2]`` (sin, cos) of pre-omega, phi, psi, chi1-4; expected
            normalised (a non-unit pair scales the rotation matrix, as in AF2).
        aatype: ``[*, N_res]`` residue types.

    Returns:
        Rigid of shape ``[*, N_res, 8]``: backbone, pre-omega, phi, psi, chi1..chi4 in the global
        frame; chi2-4 are composed on the previous chi frame. As in AF2, absent groups (and all
        groups of UNK) have an all-zero default frame, so their rotation is zero and their origin
        is that of the parent frame; they carry no atoms and must be masked downstream.
    """
    aatype = _restype(aatype)
    dtype = angles_sin_cos.dtype
    default = Rigid.from_tensor_4x4(_table("restype_rigid_group_default_frame", aatype, dtype)[aatype])  # [*, N, 8]

    # Backbone group gets angle 0: (sin, cos) = (0, 1).
    bb = angles_sin_cos.new_zeros(angles_sin_cos.shape[:-2] + (1, 2))
    bb[..., 1] = 1.0
    sin_cos = torch.cat([bb, angles_sin_cos], dim=-2)  # [*, N, 8, 2]
    sin, cos = sin_cos.unbind(-1)
    zero, one = torch.zeros_like(sin), torch.ones_like(sin)
    rot_x = torch.stack([one, zero, zero, zero, cos, -sin, zero, sin, cos], dim=-1).reshape(
        sin.shape + (3, 3)
    )  # [*, N, 8, 3, 3] rotation about the local x-axis
    local = default.compose(Rigid(rot_x, torch.zeros_like(default.trans)))  # group -> parent, [*, N, 8]

    chi1 = local[..., 4]
    chi2 = chi1.compose(local[..., 5])
    chi3 = chi2.compose(local[..., 6])
    chi4 = chi3.compose(local[..., 7])
    to_backbone = Rigid.cat(
        [local[..., 0:5], chi2.unsqueeze(-1), chi3.unsqueeze(-1), chi4.unsqueeze(-1)], dim=-1
    )  # [*, N, 8]
    return backb.unsqueeze(-1).compose(to_backbone)


def frames_to_atom14_positions(frames: Rigid, aatype: Tensor) -> Tensor:
    """Atom coordinates from rigid-group frames and ideal local positions (Suppl. Alg. 24 line 11).

    Args:
        frames: global rigid-group frames ``[*, N_res, 8]``.
        aatype: ``[*, N_res]``.

    Returns:
        ``[*, N_res, 14, 3]`` atom14 coordinates in Å, zero where the atom does not exist.
    """
    aatype = _restype(aatype)
    dtype = frames.dtype
    group = _table("restype_atom14_to_rigid_group", aatype)[aatype]  # [*, N, 14]
    rots = _gather_atoms(frames.rots, group, 2)  # [*, N, 14, 3, 3]
    trans = _gather_atoms(frames.trans, group, 1)  # [*, N, 14, 3]
    local = _table("restype_atom14_rigid_group_positions", aatype, dtype)[aatype]  # [*, N, 14, 3]
    mask = _table("restype_atom14_mask", aatype, dtype)[aatype]  # [*, N, 14]
    pos = Rigid(rots, trans).apply(local)
    return pos * mask[..., None]


# ------------------------------------------------------------------------------------------------
# atom14 <-> atom37 layout
# ------------------------------------------------------------------------------------------------
def make_atom14_masks(aatype: Tensor) -> dict[str, Tensor]:
    """Per-residue atom layout maps (same names/semantics as OpenFold's data transform).

    Returns a dict with ``atom14_atom_exists`` ``[*, N_res, 14]`` (float), ``residx_atom14_to_atom37``
    ``[*, N_res, 14]`` (long, 0 for empty slots), ``residx_atom37_to_atom14`` ``[*, N_res, 37]``
    (long, 0 where absent) and ``atom37_atom_exists`` ``[*, N_res, 37]`` (float).
    """
    aatype = _restype(aatype)
    return {
        "atom14_atom_exists": _table("restype_atom14_mask", aatype, torch.float32)[aatype],
        "residx_atom14_to_atom37": _table("restype_atom14_to_atom37", aatype)[aatype],
        "residx_atom37_to_atom14": _table("restype_atom37_to_atom14", aatype)[aatype],
        "atom37_atom_exists": _table("restype_atom37_mask", aatype, torch.float32)[aatype],
    }


def atom14_to_atom37(x: Tensor, aatype: Tensor) -> Tensor:
    """Scatter atom14 data ``[*, N_res, 14, ...]`` into the atom37 layout ``[*, N_res, 37, ...]``,
    zero where the atom does not exist for the residue type."""
    aatype = _restype(aatype)
    idx = _table("restype_atom37_to_atom14", aatype)[aatype]  # [*, N, 37]
    exists = _table("restype_atom37_mask", aatype, x.dtype)[aatype]  # [*, N, 37]
    out = _gather_atoms(x, idx, x.dim() - aatype.dim() - 1)  # [*, N, 37, ...]
    return out * exists.reshape(exists.shape + (1,) * (out.dim() - exists.dim()))


def atom37_to_atom14(x: Tensor, aatype: Tensor) -> Tensor:
    """Gather atom37 data ``[*, N_res, 37, ...]`` into the atom14 layout ``[*, N_res, 14, ...]``,
    zero in empty slots."""
    aatype = _restype(aatype)
    idx = _table("restype_atom14_to_atom37", aatype)[aatype]  # [*, N, 14]
    exists = _table("restype_atom14_mask", aatype, x.dtype)[aatype]  # [*, N, 14]
    out = _gather_atoms(x, idx, x.dim() - aatype.dim() - 1)  # [*, N, 14, ...]
    return out * exists.reshape(exists.shape + (1,) * (out.dim() - exists.dim()))


def pseudo_beta(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Pseudo-beta atom: CB, or CA for glycine (Suppl. 1.9.8 / template features).

    Args:
        aatype: ``[*, N_res]``; all_atom_positions: ``[*, N_res, 37, 3]`` (Å);
        all_atom_mask: ``[*, N_res, 37]``.

    Returns:
        positions ``[*, N_res, 3]`` (Å) and mask ``[*, N_res]``.
    """
    is_gly = aatype == rc.restype_order["G"]
    ca, cb = rc.atom_order["CA"], rc.atom_order["CB"]
    pos = torch.where(is_gly[..., None], all_atom_positions[..., ca, :], all_atom_positions[..., cb, :])
    mask = torch.where(is_gly, all_atom_mask[..., ca], all_atom_mask[..., cb])
    return pos, mask


# ------------------------------------------------------------------------------------------------
# Inverse: atoms -> torsions / frames (features and training targets)
# ------------------------------------------------------------------------------------------------
def atom37_to_torsion_angles(
    aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor, eps: float = 1e-8
) -> dict[str, Tensor]:
    """The 7 torsion angles of each residue from its atoms (Suppl. 1.8, inverse of Alg. 24).

    pre-omega: CA(i-1), C(i-1), N, CA; phi: C(i-1), N, CA, C; psi: N, CA, C, O (reported
    rotated by pi so that it matches the psi-group rotation of Alg. 24); chi1-4: the atoms of
    ``residue_constants.chi_angles_atoms``. Each angle is read off as the (z, y) coordinates of
    the 4th atom in the frame with origin atom 3, x-axis atom 2 -> atom 3, atom 1 in the xy-plane.

    Args:
        aatype: ``[*, N_res]`` (21 = gap treated as UNK).
        all_atom_positions: ``[*, N_res, 37, 3]`` (Å).
        all_atom_mask: ``[*, N_res, 37]``.
        eps: added to the squared norm when normalising (sin, cos).

    Returns:
        ``torsion_angles_sin_cos`` ``[*, N_res, 7, 2]`` (sin, cos), ``alt_torsion_angles_sin_cos``
        (pi-periodic chis rotated by pi) and ``torsion_angles_mask`` ``[*, N_res, 7]``. Values where
        the mask is 0 are meaningless.
    """
    aatype = _restype(aatype)
    pos = all_atom_positions
    mask = all_atom_mask.to(pos.dtype)
    prev_pos = torch.cat([torch.zeros_like(pos[..., :1, :, :]), pos[..., :-1, :, :]], dim=-3)
    prev_mask = torch.cat([torch.zeros_like(mask[..., :1, :]), mask[..., :-1, :]], dim=-2)

    # [*, N, 4, 3] atoms of the three backbone torsions.
    pre_omega_pos = torch.cat([prev_pos[..., 1:3, :], pos[..., 0:2, :]], dim=-2)  # CA-, C-, N, CA
    phi_pos = torch.cat([prev_pos[..., 2:3, :], pos[..., 0:3, :]], dim=-2)  # C-, N, CA, C
    psi_pos = torch.cat([pos[..., 0:3, :], pos[..., 4:5, :]], dim=-2)  # N, CA, C, O
    pre_omega_mask = prev_mask[..., 1:3].prod(-1) * mask[..., 0:2].prod(-1)
    phi_mask = prev_mask[..., 2] * mask[..., 0:3].prod(-1)
    psi_mask = mask[..., 0:3].prod(-1) * mask[..., 4]

    chi_idx = torch.cat([_table("chi_angles_atom_indices", aatype), aatype.new_zeros(1, 4, 4)], dim=0)[
        aatype
    ]  # [*, N, 4 chis, 4 atoms]
    chi_idx_flat = chi_idx.flatten(-2)  # [*, N, 16]
    chi_pos = _gather_atoms(pos, chi_idx_flat, 1).unflatten(-2, (4, 4))  # [*, N, 4, 4, 3]
    chi_atom_mask = _gather_atoms(mask, chi_idx_flat, 0).unflatten(-1, (4, 4))  # [*, N, 4, 4]
    chi_exists = torch.cat([_table("chi_angles_mask", aatype, pos.dtype), pos.new_zeros(1, 4)], dim=0)[
        aatype
    ]  # [*, N, 4]
    chi_mask = chi_exists * chi_atom_mask.prod(-1)

    torsion_pos = torch.cat(
        [pre_omega_pos[..., None, :, :], phi_pos[..., None, :, :], psi_pos[..., None, :, :], chi_pos],
        dim=-3,
    )  # [*, N, 7, 4, 3]
    torsion_mask = torch.cat(
        [pre_omega_mask[..., None], phi_mask[..., None], psi_mask[..., None], chi_mask], dim=-1
    )  # [*, N, 7]

    frames = _frames_from_axis(
        axis_start=torsion_pos[..., 1, :], origin=torsion_pos[..., 2, :], xy_point=torsion_pos[..., 0, :]
    )  # [*, N, 7]
    fourth = frames.invert_apply(torsion_pos[..., 3, :])  # [*, N, 7, 3]
    sin_cos = torch.stack([fourth[..., 2], fourth[..., 1]], dim=-1)  # [*, N, 7, 2]
    sin_cos = sin_cos / torch.sqrt((sin_cos * sin_cos).sum(-1, keepdim=True) + eps)

    # psi is measured to O, which sits opposite the psi-group's reference direction: rotate by pi.
    flip = sin_cos.new_tensor([1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0])
    sin_cos = sin_cos * flip[:, None]

    chi_periodic = _table("chi_pi_periodic", aatype, pos.dtype)[aatype]  # [*, N, 4]
    mirror = torch.cat([torch.ones_like(chi_periodic[..., :3]), 1.0 - 2.0 * chi_periodic], dim=-1)  # [*, N, 7]
    return {
        "torsion_angles_sin_cos": sin_cos,
        "alt_torsion_angles_sin_cos": sin_cos * mirror[..., None],
        "torsion_angles_mask": torsion_mask,
    }


def chi_angles(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> tuple[Tensor, Tensor]:
    """The chi angles of each residue as dihedral angles (AF2-Multimer ``compute_chi_angles``).

    Each chi is the dihedral of its four atoms (``residue_constants.chi_angles_atoms``): the angle
    between the planes (a, b, c) and (b, c, d), ``atan2`` of the two projections, in (-pi, pi].

    Args:
        aatype: ``[*, N_res]`` (0-21; the gap 21 is read as UNK, which has no chi angles).
        all_atom_positions: ``[*, N_res, 37, 3]`` (Å).
        all_atom_mask: ``[*, N_res, 37]``.

    Returns:
        chi angles ``[*, N_res, 4]`` (radians) and their mask ``[*, N_res, 4]`` (the residue type
        has the angle and its four atoms are present); angles where the mask is 0 are meaningless.
    """
    aatype = _restype(aatype)
    pos = all_atom_positions
    idx = torch.cat([_table("chi_angles_atom_indices", aatype), aatype.new_zeros(1, 4, 4)], dim=0)[aatype]
    atoms = _gather_atoms(pos, idx.flatten(-2), 1).unflatten(-2, (4, 4))  # [*, N, 4 chis, 4 atoms, 3]
    a, b, c, d = atoms.unbind(-2)
    v1, v2, v3 = a - b, b - c, d - c
    c1 = torch.cross(v1, v2, dim=-1)
    c2 = torch.cross(v3, v2, dim=-1)
    c3 = torch.cross(c2, c1, dim=-1)
    v2_norm = torch.sqrt(torch.clamp((v2 * v2).sum(-1), min=1e-12))
    angles = torch.atan2((c3 * v2).sum(-1), v2_norm * (c1 * c2).sum(-1))
    exists = torch.cat([_table("chi_angles_mask", aatype, pos.dtype), pos.new_zeros(1, 4)], dim=0)[aatype]
    atom_mask = _gather_atoms(all_atom_mask.to(pos.dtype), idx.flatten(-2), 0).unflatten(-1, (4, 4))
    return angles, exists * atom_mask.prod(-1)


def atom37_to_frames(
    aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor, eps: float = 1e-8
) -> dict[str, Tensor]:
    """Ground-truth rigid-group frames from atoms (Suppl. 1.8.3 / 1.9.3, targets of the FAPE and
    side-chain losses).

    Args:
        aatype: ``[*, N_res]``; all_atom_positions: ``[*, N_res, 37, 3]`` (Å);
        all_atom_mask: ``[*, N_res, 37]``.

    Returns:
        ``rigidgroups_gt_frames`` ``[*, N_res, 8, 4, 4]``, ``rigidgroups_gt_exists`` ``[*, N_res, 8]``
        (group defined and its three atoms present), ``rigidgroups_group_exists`` ``[*, N_res, 8]``,
        ``rigidgroups_group_is_ambiguous`` ``[*, N_res, 8]`` and ``rigidgroups_alt_gt_frames``
        (ambiguous chi frames rotated by pi about their x-axis).
    """
    aatype = _restype(aatype)
    pos = all_atom_positions
    dtype = pos.dtype
    base_idx = _table("restype_rigidgroup_base_atom37_idx", aatype)[aatype]  # [*, N, 8, 3]
    base_flat = base_idx.flatten(-2)  # [*, N, 24]
    base_pos = _gather_atoms(pos, base_flat, 1).unflatten(-2, (8, 3))  # [*, N, 8, 3, 3]
    base_mask = _gather_atoms(all_atom_mask.to(dtype), base_flat, 0).unflatten(-1, (8, 3))  # [*, N, 8, 3]

    frames = _frames_from_axis(
        axis_start=base_pos[..., 0, :], origin=base_pos[..., 1, :], xy_point=base_pos[..., 2, :], eps=eps
    )  # [*, N, 8]
    group_exists = _table("restype_rigidgroup_mask", aatype, dtype)[aatype]  # [*, N, 8]
    gt_exists = base_mask.prod(-1) * group_exists

    # Backbone was built with x-axis C -> CA; turn it to CA -> C (rotate by pi about y).
    flip = torch.ones(8, 3, dtype=dtype, device=pos.device)
    flip[0, 0] = -1.0
    flip[0, 2] = -1.0
    frames = frames.compose(Rigid(torch.diag_embed(flip), torch.zeros_like(frames.trans)))

    ambiguous = _table("restype_rigidgroup_is_ambiguous", aatype, dtype)[aatype]  # [*, N, 8]
    alt_diag = torch.stack([torch.ones_like(ambiguous), 1 - 2 * ambiguous, 1 - 2 * ambiguous], dim=-1)
    alt_frames = frames.compose(Rigid(torch.diag_embed(alt_diag), torch.zeros_like(frames.trans)))
    return {
        "rigidgroups_gt_frames": frames.to_tensor_4x4(),
        "rigidgroups_gt_exists": gt_exists,
        "rigidgroups_group_exists": group_exists,
        "rigidgroups_group_is_ambiguous": ambiguous,
        "rigidgroups_alt_gt_frames": alt_frames.to_tensor_4x4(),
    }


def make_atom14_gt(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> dict[str, Tensor]:
    """Ground-truth atoms in the atom14 layout plus the renamed alternative (Suppl. 1.8.5).

    Args:
        aatype: ``[*, N_res]``; all_atom_positions: ``[*, N_res, 37, 3]`` (Å);
        all_atom_mask: ``[*, N_res, 37]``.

    Returns:
        ``atom14_gt_positions`` ``[*, N_res, 14, 3]``, ``atom14_gt_exists`` ``[*, N_res, 14]``,
        ``atom14_alt_gt_positions``, ``atom14_alt_gt_exists`` (symmetric atoms of ASP, GLU, PHE,
        TYR swapped), ``atom14_atom_is_ambiguous`` ``[*, N_res, 14]`` and ``atom14_atom_exists``.
    """
    aatype = _restype(aatype)
    dtype = all_atom_positions.dtype
    exists = _table("restype_atom14_mask", aatype, dtype)[aatype]  # [*, N, 14]
    gt_exists = atom37_to_atom14(all_atom_mask.to(dtype), aatype) * exists
    gt_pos = atom37_to_atom14(all_atom_positions, aatype) * gt_exists[..., None]
    swap = _table("restype_atom14_ambiguous_atoms_swap_idx", aatype)[aatype]  # [*, N, 14]
    return {
        "atom14_gt_positions": gt_pos,
        "atom14_gt_exists": gt_exists,
        "atom14_alt_gt_positions": _gather_atoms(gt_pos, swap, 1),
        "atom14_alt_gt_exists": _gather_atoms(gt_exists, swap, 0),
        "atom14_atom_is_ambiguous": _table("restype_atom14_ambiguous_atoms", aatype, dtype)[aatype],
        "atom14_atom_exists": exists,
    }
