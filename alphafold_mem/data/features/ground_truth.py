"""Ground-truth features for training and evaluation: from an experimental chain's atom37 positions
and mask, the ``all_atom_*``, ``atom14_gt_*`` / ``atom14_alt_gt_*``, ``rigidgroups_*``, backbone
frame, chi-angle and pseudo-beta targets that the AF2 losses read (Jumper et al. 2021; table in
:mod:`.spec`), computed with :mod:`alphafold_mem.geometry.all_atom`.
"""

from __future__ import annotations

from torch import Tensor

from ...geometry import all_atom

__all__ = ["make_ground_truth_features"]


def make_ground_truth_features(aatype: Tensor, pos: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Training targets for one chain.

    Args:
        aatype: ``[N_res]`` int64 residue types.
        pos: ``[N_res, 37, 3]`` atom37 positions, Å.
        mask: ``[N_res, 37]`` 1 where the atom was resolved.

    Returns:
        The ``ground_truth`` group of :data:`~.spec.FEATURES` except ``true_msa``, ``bert_mask`` and
        ``resolution`` (pseudo-beta positions zeroed where undefined).
    """
    out = {"all_atom_positions": pos, "all_atom_mask": mask}
    out.update(all_atom.make_atom14_gt(aatype, pos, mask))
    out.update(all_atom.atom37_to_frames(aatype, pos, mask))
    tors = all_atom.atom37_to_torsion_angles(aatype, pos, mask)
    out["backbone_rigid_tensor"] = out["rigidgroups_gt_frames"][..., 0, :, :]
    out["backbone_rigid_mask"] = out["rigidgroups_gt_exists"][..., 0]
    out["chi_angles_sin_cos"] = tors["torsion_angles_sin_cos"][..., 3:, :]
    out["chi_mask"] = tors["torsion_angles_mask"][..., 3:]
    pb, pb_mask = all_atom.pseudo_beta(aatype, pos, mask)
    out["pseudo_beta"] = pb * pb_mask[..., None]
    out["pseudo_beta_mask"] = pb_mask
    return out
