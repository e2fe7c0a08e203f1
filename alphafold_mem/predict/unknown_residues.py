"""Backbone atoms for unknown residues (``X``, aatype 20) in the written model.

AF2's atom tables give UNK no atoms (OpenFold and this model agree: ``final_atom_mask`` is 0 for
every atom of an X), yet the structure module predicts a backbone frame and torsions for it. For
the PDB/ModelCIF output the residue gets N, CA, C and O: the backbone group's atoms placed by the
final frame (Suppl. Alg. 24 line 11, ideal positions) and O by the predicted psi torsion, using
glycine's literature positions (the side-chain-free residue), so the chain stays continuous and
an X is not written as a lone Cα.
"""

from __future__ import annotations

import numpy as np
import torch

from ..geometry import all_atom
from ..geometry import residue_constants as rc
from ..geometry.rigid import Rigid

__all__ = ["fill_unknown_backbone"]

_BACKBONE = [rc.atom_order[a] for a in ("N", "CA", "C", "O")]


def fill_unknown_backbone(arrays: dict, out: dict) -> int:
    """Give every X residue of ``arrays`` its backbone atoms N, CA, C, O (in place).

    Args:
        arrays: numpy outputs of one target: ``aatype [N_res]``, ``final_atom_positions
            [N_res, 37, 3]`` (Å) and ``final_atom_mask [N_res, 37]``.
        out: the model outputs, with ``sm_frames [L, N_res, 4, 4]`` (Å) and ``sm_angles
            [L, N_res, 7, 2]`` (the last structure-module layer is used).

    Returns:
        The number of residues filled.
    """
    aatype = np.asarray(arrays["aatype"])
    unknown = aatype >= rc.restype_num
    if not unknown.any():
        return 0
    frames = Rigid.from_tensor_4x4(out["sm_frames"][-1].detach().float().cpu())
    angles = out["sm_angles"][-1].detach().float().cpu()
    gly = torch.full(aatype.shape, rc.restype_order["G"], dtype=torch.int64)
    groups = all_atom.torsion_angles_to_frames(frames, angles, gly)
    atom37 = all_atom.atom14_to_atom37(all_atom.frames_to_atom14_positions(groups, gly), gly).numpy()
    pos, mask = arrays["final_atom_positions"], arrays["final_atom_mask"]
    for atom in _BACKBONE:
        pos[unknown, atom] = atom37[unknown, atom]
        mask[unknown, atom] = 1.0
    return int(unknown.sum())
