"""Residue, atom and stereochemistry tables (Jumper et al. 2021, Suppl. 1.2.1, 1.8, 1.9.11).

Tables only. The names and layouts follow AF2 / OpenFold so that features, checkpoints and losses
line up: residue types in AF2 order ``ARNDCQEGHILKMFPSTWYV`` (+ ``X`` = 20, ``-`` = 21), the 37
"atom37" atom types, the per-residue "atom14" compact layout, and the 8 rigid groups
(0 backbone, 1 pre-omega, 2 phi, 3 psi, 4-7 chi1-chi4).

Numeric sources (transcribed, not derived here):
* ideal rigid-group atom positions (:mod:`.ideal_positions`), chi-angle atom definitions, chi masks, pi-periodicity,
  ambiguous-atom swaps, van der Waals radii and the between-residue C-N / angle statistics:
  AlphaFold's ``alphafold/common/residue_constants.py`` (DeepMind, Apache-2.0); the positions
  are ideal geometry after Engh & Huber (1991, 2001).
* per-residue bond lengths and bond angles (:mod:`.stereo_chemistry`): Engh & Huber (2001), International Tables for
  Crystallography Vol. F, Ch. 18.3, as tabulated in AlphaFold's ``stereo_chemical_props.txt``.

The only code below turns these tables into numpy index / lookup arrays.
"""

from __future__ import annotations

import numpy as np

from .ideal_positions import rigid_group_atom_positions
from .stereo_chemistry import *  # noqa: F403 - its tables are read from here too (every name in its __all__)
from .stereo_chemistry import residue_bonds, residue_virtual_bonds

# ------------------------------------------------------------------------------------------------
# Residue types
# ------------------------------------------------------------------------------------------------
restypes = [
    "A",
    "R",
    "N",
    "D",
    "C",
    "Q",
    "E",
    "G",
    "H",
    "I",
    "L",
    "K",
    "M",
    "F",
    "P",
    "S",
    "T",
    "W",
    "Y",
    "V",
]
restype_order = {r: i for i, r in enumerate(restypes)}
restype_num = len(restypes)  # 20
unk_restype_index = restype_num  # 20: catch-all for unknown residues ('X')
restypes_with_x = restypes + ["X"]
restype_order_with_x = {r: i for i, r in enumerate(restypes_with_x)}
restypes_with_x_and_gap = restypes + ["X", "-"]

restype_1to3 = {
    "A": "ALA",
    "R": "ARG",
    "N": "ASN",
    "D": "ASP",
    "C": "CYS",
    "Q": "GLN",
    "E": "GLU",
    "G": "GLY",
    "H": "HIS",
    "I": "ILE",
    "L": "LEU",
    "K": "LYS",
    "M": "MET",
    "F": "PHE",
    "P": "PRO",
    "S": "SER",
    "T": "THR",
    "W": "TRP",
    "Y": "TYR",
    "V": "VAL",
}
restype_3to1 = {v: k for k, v in restype_1to3.items()}
unk_restype = "UNK"
resnames = [restype_1to3[r] for r in restypes] + [unk_restype]  # 21
resname_to_idx = {name: i for i, name in enumerate(resnames)}

# hhblits / a3m alphabet (AF2): B->D, Z->E, U->C, J and O -> X; X = 20, gap = 21.
HHBLITS_AA_TO_ID = {
    "A": 0,
    "B": 2,
    "C": 1,
    "D": 2,
    "E": 3,
    "F": 4,
    "G": 5,
    "H": 6,
    "I": 7,
    "J": 20,
    "K": 8,
    "L": 9,
    "M": 10,
    "N": 11,
    "O": 20,
    "P": 12,
    "Q": 13,
    "R": 14,
    "S": 15,
    "T": 16,
    "U": 1,
    "V": 17,
    "W": 18,
    "X": 20,
    "Y": 19,
    "Z": 3,
    "-": 21,
}
ID_TO_HHBLITS_AA = {
    0: "A",
    1: "C",
    2: "D",
    3: "E",
    4: "F",
    5: "G",
    6: "H",
    7: "I",
    8: "K",
    9: "L",
    10: "M",
    11: "N",
    12: "P",
    13: "Q",
    14: "R",
    15: "S",
    16: "T",
    17: "V",
    18: "W",
    19: "Y",
    20: "X",
    21: "-",
}
# hhblits id -> our id (restypes_with_x_and_gap order); 22 entries.
MAP_HHBLITS_AATYPE_TO_OUR_AATYPE = tuple(restypes_with_x_and_gap.index(ID_TO_HHBLITS_AA[i]) for i in range(22))

# ------------------------------------------------------------------------------------------------
# Atoms
# ------------------------------------------------------------------------------------------------
atom_types = [
    "N",
    "CA",
    "C",
    "CB",
    "O",
    "CG",
    "CG1",
    "CG2",
    "OG",
    "OG1",
    "SG",
    "CD",
    "CD1",
    "CD2",
    "ND1",
    "ND2",
    "OD1",
    "OD2",
    "SD",
    "CE",
    "CE1",
    "CE2",
    "CE3",
    "NE",
    "NE1",
    "NE2",
    "OE1",
    "OE2",
    "CH2",
    "NH1",
    "NH2",
    "OH",
    "CZ",
    "CZ2",
    "CZ3",
    "NZ",
    "OXT",
]
atom_order = {a: i for i, a in enumerate(atom_types)}
atom_type_num = len(atom_types)  # 37

# Compact 14-slot layout per residue ('' = empty slot).
# fmt: off
restype_name_to_atom14_names = {
    "ALA": ["N", "CA", "C", "O", "CB", "", "", "", "", "", "", "", "", ""],
    "ARG": ["N", "CA", "C", "O", "CB", "CG", "CD", "NE", "CZ", "NH1", "NH2", "", "", ""],
    "ASN": ["N", "CA", "C", "O", "CB", "CG", "OD1", "ND2", "", "", "", "", "", ""],
    "ASP": ["N", "CA", "C", "O", "CB", "CG", "OD1", "OD2", "", "", "", "", "", ""],
    "CYS": ["N", "CA", "C", "O", "CB", "SG", "", "", "", "", "", "", "", ""],
    "GLN": ["N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "NE2", "", "", "", "", ""],
    "GLU": ["N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "OE2", "", "", "", "", ""],
    "GLY": ["N", "CA", "C", "O", "", "", "", "", "", "", "", "", "", ""],
    "HIS": ["N", "CA", "C", "O", "CB", "CG", "ND1", "CD2", "CE1", "NE2", "", "", "", ""],
    "ILE": ["N", "CA", "C", "O", "CB", "CG1", "CG2", "CD1", "", "", "", "", "", ""],
    "LEU": ["N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "", "", "", "", "", ""],
    "LYS": ["N", "CA", "C", "O", "CB", "CG", "CD", "CE", "NZ", "", "", "", "", ""],
    "MET": ["N", "CA", "C", "O", "CB", "CG", "SD", "CE", "", "", "", "", "", ""],
    "PHE": ["N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "", "", ""],
    "PRO": ["N", "CA", "C", "O", "CB", "CG", "CD", "", "", "", "", "", "", ""],
    "SER": ["N", "CA", "C", "O", "CB", "OG", "", "", "", "", "", "", "", ""],
    "THR": ["N", "CA", "C", "O", "CB", "OG1", "CG2", "", "", "", "", "", "", ""],
    "TRP": ["N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "NE1", "CE2", "CE3", "CZ2", "CZ3", "CH2"],
    "TYR": ["N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH", "", ""],
    "VAL": ["N", "CA", "C", "O", "CB", "CG1", "CG2", "", "", "", "", "", "", ""],
    "UNK": ["", "", "", "", "", "", "", "", "", "", "", "", "", ""],
}
# fmt: on

# Heavy atoms per residue (PDB names).
residue_atoms = {
    "ALA": ["C", "CA", "CB", "N", "O"],
    "ARG": ["C", "CA", "CB", "CG", "CD", "CZ", "N", "NE", "O", "NH1", "NH2"],
    "ASP": ["C", "CA", "CB", "CG", "N", "O", "OD1", "OD2"],
    "ASN": ["C", "CA", "CB", "CG", "N", "ND2", "O", "OD1"],
    "CYS": ["C", "CA", "CB", "N", "O", "SG"],
    "GLU": ["C", "CA", "CB", "CG", "CD", "N", "O", "OE1", "OE2"],
    "GLN": ["C", "CA", "CB", "CG", "CD", "N", "NE2", "O", "OE1"],
    "GLY": ["C", "CA", "N", "O"],
    "HIS": ["C", "CA", "CB", "CG", "CD2", "CE1", "N", "ND1", "NE2", "O"],
    "ILE": ["C", "CA", "CB", "CG1", "CG2", "CD1", "N", "O"],
    "LEU": ["C", "CA", "CB", "CG", "CD1", "CD2", "N", "O"],
    "LYS": ["C", "CA", "CB", "CG", "CD", "CE", "N", "NZ", "O"],
    "MET": ["C", "CA", "CB", "CG", "CE", "N", "O", "SD"],
    "PHE": ["C", "CA", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "N", "O"],
    "PRO": ["C", "CA", "CB", "CG", "CD", "N", "O"],
    "SER": ["C", "CA", "CB", "N", "O", "OG"],
    "THR": ["C", "CA", "CB", "CG2", "N", "O", "OG1"],
    "TRP": ["C", "CA", "CB", "CG", "CD1", "CD2", "CE2", "CE3", "CZ2", "CZ3", "CH2", "N", "NE1", "O"],
    "TYR": ["C", "CA", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "N", "O", "OH"],
    "VAL": ["C", "CA", "CB", "CG1", "CG2", "N", "O"],
}

# Symmetric side chains whose atom names are ambiguous (Suppl. 1.8.2, Table 3).
residue_atom_renaming_swaps = {
    "ASP": {"OD1": "OD2"},
    "GLU": {"OE1": "OE2"},
    "PHE": {"CD1": "CD2", "CE1": "CE2"},
    "TYR": {"CD1": "CD2", "CE1": "CE2"},
}

# Van der Waals radii (Å) by element (AF2's table, from Wikipedia / Bondi).
van_der_waals_radius = {"C": 1.7, "N": 1.55, "O": 1.52, "S": 1.8}

# Distance CA(i) - CA(i+1) in Å for a trans peptide (omega = 180).
ca_ca = 3.80209737096

# ------------------------------------------------------------------------------------------------
# Torsions
# ------------------------------------------------------------------------------------------------
# Four atoms defining chi1..chi4 (subset from chi1). ARG chi5 is ~0 and ignored.
chi_angles_atoms = {
    "ALA": [],
    "ARG": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD"], ["CB", "CG", "CD", "NE"], ["CG", "CD", "NE", "CZ"]],
    "ASN": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "OD1"]],
    "ASP": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "OD1"]],
    "CYS": [["N", "CA", "CB", "SG"]],
    "GLN": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD"], ["CB", "CG", "CD", "OE1"]],
    "GLU": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD"], ["CB", "CG", "CD", "OE1"]],
    "GLY": [],
    "HIS": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "ND1"]],
    "ILE": [["N", "CA", "CB", "CG1"], ["CA", "CB", "CG1", "CD1"]],
    "LEU": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD1"]],
    "LYS": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD"], ["CB", "CG", "CD", "CE"], ["CG", "CD", "CE", "NZ"]],
    "MET": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "SD"], ["CB", "CG", "SD", "CE"]],
    "PHE": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD1"]],
    "PRO": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD"]],
    "SER": [["N", "CA", "CB", "OG"]],
    "THR": [["N", "CA", "CB", "OG1"]],
    "TRP": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD1"]],
    "TYR": [["N", "CA", "CB", "CG"], ["CA", "CB", "CG", "CD1"]],
    "VAL": [["N", "CA", "CB", "CG1"]],
}

# [20][4] in restypes order: which chi angles exist (those chi_angles_atoms lists).
chi_angles_mask = [[1.0 if k < len(chi_angles_atoms[restype_1to3[r]]) else 0.0 for k in range(4)] for r in restypes]

# [21][4]: chi angles that are symmetric under a rotation by pi (ASP chi2, GLU chi3, PHE chi2, TYR chi2;
# every other entry 0, UNK included).
_CHI_PI_PERIODIC = {"ASP": 1, "GLU": 2, "PHE": 1, "TYR": 1}
chi_pi_periodic = [[1.0 if _CHI_PI_PERIODIC.get(name) == k else 0.0 for k in range(4)] for name in resnames]

# Ideal atom positions per rigid group: .ideal_positions; stereochemistry: .stereo_chemistry.


# ------------------------------------------------------------------------------------------------
# Derived numpy index arrays (21 residue types: 20 + UNK, UNK has no atoms)
# ------------------------------------------------------------------------------------------------
def _atom14_names(restype_idx: int) -> list[str]:
    return restype_name_to_atom14_names[resnames[restype_idx]]


# atom14 slot -> atom37 index (0 for empty slots), and atom37 -> atom14 slot (0 where absent).
restype_atom14_to_atom37 = np.zeros([21, 14], dtype=np.int64)
restype_atom37_to_atom14 = np.zeros([21, 37], dtype=np.int64)
restype_atom14_mask = np.zeros([21, 14], dtype=np.float32)
restype_atom37_mask = np.zeros([21, 37], dtype=np.float32)
for _r in range(21):
    for _i, _name in enumerate(_atom14_names(_r)):
        if _name:
            restype_atom14_to_atom37[_r, _i] = atom_order[_name]
            restype_atom37_to_atom14[_r, atom_order[_name]] = _i
            restype_atom14_mask[_r, _i] = 1.0
            restype_atom37_mask[_r, atom_order[_name]] = 1.0

# AF2's name for the [21, 37] heavy-atom mask (int).
STANDARD_ATOM_MASK = restype_atom37_mask.astype(np.int32)

# Per-atom rigid group and local ideal position.
restype_atom37_to_rigid_group = np.zeros([21, 37], dtype=np.int64)
restype_atom37_rigid_group_positions = np.zeros([21, 37, 3], dtype=np.float32)
restype_atom14_to_rigid_group = np.zeros([21, 14], dtype=np.int64)
restype_atom14_rigid_group_positions = np.zeros([21, 14, 3], dtype=np.float32)
for _r, _letter in enumerate(restypes):
    _res = restype_1to3[_letter]
    for _name, _group, _pos in rigid_group_atom_positions[_res]:
        _a37 = atom_order[_name]
        _a14 = restype_name_to_atom14_names[_res].index(_name)
        restype_atom37_to_rigid_group[_r, _a37] = _group
        restype_atom37_rigid_group_positions[_r, _a37] = _pos
        restype_atom14_to_rigid_group[_r, _a14] = _group
        restype_atom14_rigid_group_positions[_r, _a14] = _pos


def _frame_4x4(ex: np.ndarray, ey: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """4x4 frame with x-axis along ``ex``, ``ey`` (Gram-Schmidt) in the xy-plane, at ``origin``."""
    e1 = ex / np.linalg.norm(ex)
    e2 = ey - np.dot(ey, e1) * e1
    e2 = e2 / np.linalg.norm(e2)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = e1, e2, np.cross(e1, e2), origin
    return m


# Default frame of each rigid group in its parent's frame (Suppl. 1.8.1): groups 1-4 relative to
# the backbone frame, chi2-chi4 relative to the previous chi frame. As in AF2, absent groups (and
# every group of UNK) are all-zero 4x4 matrices, so their frames have a zero rotation; they carry
# no atoms and are masked by the losses.
restype_rigid_group_default_frame = np.zeros([21, 8, 4, 4], dtype=np.float32)
for _r, _letter in enumerate(restypes):
    _res = restype_1to3[_letter]
    _p = {n: np.array(x, dtype=np.float64) for n, _, x in rigid_group_atom_positions[_res]}
    restype_rigid_group_default_frame[_r, 0] = np.eye(4)  # backbone: identity
    restype_rigid_group_default_frame[_r, 1] = np.eye(4)  # pre-omega: identity (no atoms)
    # 2: phi, rotation axis CA->N; 3: psi, rotation axis CA->C.
    restype_rigid_group_default_frame[_r, 2] = _frame_4x4(_p["N"] - _p["CA"], np.array([1.0, 0, 0]), _p["N"])
    restype_rigid_group_default_frame[_r, 3] = _frame_4x4(_p["C"] - _p["CA"], _p["CA"] - _p["N"], _p["C"])
    if chi_angles_mask[_r][0]:
        _a = [_p[n] for n in chi_angles_atoms[_res][0]]
        restype_rigid_group_default_frame[_r, 4] = _frame_4x4(_a[2] - _a[1], _a[0] - _a[1], _a[2])
    for _chi in range(1, 4):
        if chi_angles_mask[_r][_chi]:
            # The axis-end atom is in the previous chi frame, whose origin is the axis start.
            _end = _p[chi_angles_atoms[_res][_chi][2]]
            restype_rigid_group_default_frame[_r, 4 + _chi] = _frame_4x4(_end, np.array([-1.0, 0, 0]), _end)

# Rigid groups that have ground-truth atoms (AF2 atom37_to_frames): backbone and psi for every
# residue type (UNK included), chi groups per chi_angles_mask; pre-omega and phi never.
restype_rigidgroup_mask = np.zeros([21, 8], dtype=np.float32)
restype_rigidgroup_mask[:, 0] = 1.0
restype_rigidgroup_mask[:, 3] = 1.0
restype_rigidgroup_mask[:20, 4:] = np.asarray(chi_angles_mask, dtype=np.float32)

# Three atom37 indices (a, b, c) that define each ground-truth rigid group frame as in AF2: origin
# b, x-axis along a -> b, c in the xy-plane with y > 0. Backbone (C, CA, N) then has its x-axis
# pointing away from C and is flipped by diag(-1, 1, -1) afterwards; psi: (CA, C, O); chi_k: the
# last three chi atoms. The pre-omega and phi groups have no ground-truth atoms (rows stay 0).
restype_rigidgroup_base_atom37_idx = np.zeros([21, 8, 3], dtype=np.int64)
for _r in range(21):
    restype_rigidgroup_base_atom37_idx[_r, 0] = [atom_order[a] for a in ("C", "CA", "N")]
    restype_rigidgroup_base_atom37_idx[_r, 3] = [atom_order[a] for a in ("CA", "C", "O")]
for _r, _letter in enumerate(restypes):
    for _chi, _atoms in enumerate(chi_angles_atoms[restype_1to3[_letter]]):
        restype_rigidgroup_base_atom37_idx[_r, 4 + _chi] = [atom_order[a] for a in _atoms[1:]]

# Chi groups whose frame is ambiguous by a 180-degree rotation (the pi-periodic chi angles).
restype_rigidgroup_is_ambiguous = np.concatenate(
    [np.zeros([21, 4], dtype=np.float32), np.asarray(chi_pi_periodic, dtype=np.float32)], axis=-1
)  # [21, 8]

# Chi angle atoms as atom37 indices [20, 4, 4] (0-padded) and their masks.
chi_angles_atom_indices = np.zeros([20, 4, 4], dtype=np.int64)
for _r, _letter in enumerate(restypes):
    for _chi, _atoms in enumerate(chi_angles_atoms[restype_1to3[_letter]]):
        chi_angles_atom_indices[_r, _chi] = [atom_order[a] for a in _atoms]

# Ambiguous atoms in atom14 layout: a flag and the index of the swap partner (identity elsewhere),
# and the equivalent [21, 14, 14] permutation matrices (Suppl. 1.8.5).
restype_atom14_ambiguous_atoms = np.zeros([21, 14], dtype=np.float32)
restype_atom14_ambiguous_atoms_swap_idx = np.tile(np.arange(14, dtype=np.int64), (21, 1))
for _res, _swaps in residue_atom_renaming_swaps.items():
    _r = resname_to_idx[_res]
    _names = restype_name_to_atom14_names[_res]
    for _a, _b in _swaps.items():
        _i, _j = _names.index(_a), _names.index(_b)
        restype_atom14_ambiguous_atoms[_r, [_i, _j]] = 1.0
        restype_atom14_ambiguous_atoms_swap_idx[_r, _i] = _j
        restype_atom14_ambiguous_atoms_swap_idx[_r, _j] = _i
# renaming_matrices[r] @ x14 swaps the ambiguous atoms of residue type r.
restype_atom14_renaming_matrices = np.eye(14, dtype=np.float32)[restype_atom14_ambiguous_atoms_swap_idx]


def make_atom14_dists_bounds(overlap_tolerance: float = 1.5, bond_length_tolerance_factor: float = 15):
    """Intra-residue distance bounds in the atom14 layout for the violation loss (Suppl. 1.9.11).

    Non-bonded pairs: lower = r_vdw(a) + r_vdw(b) - overlap_tolerance, upper = 1e10. Bonds and
    angle (1-3) pairs: mean +- bond_length_tolerance_factor * stddev. Returns a dict of ``[21, 14,
    14]`` float32 arrays ``lower_bound``, ``upper_bound``, ``stddev`` (Å).
    """
    lower = np.zeros([21, 14, 14], np.float32)
    upper = np.zeros([21, 14, 14], np.float32)
    stddev = np.zeros([21, 14, 14], np.float32)
    for r, letter in enumerate(restypes):
        res = restype_1to3[letter]
        names = restype_name_to_atom14_names[res]
        for i, a in enumerate(names):
            for j, b in enumerate(names):
                if a and b and i != j:
                    lower[r, i, j] = van_der_waals_radius[a[0]] + van_der_waals_radius[b[0]] - overlap_tolerance
                    upper[r, i, j] = 1e10
        for bond in residue_bonds[res] + residue_virtual_bonds[res]:
            i, j = names.index(bond.atom1_name), names.index(bond.atom2_name)
            for u, v in ((i, j), (j, i)):
                lower[r, u, v] = bond.length - bond_length_tolerance_factor * bond.stddev
                upper[r, u, v] = bond.length + bond_length_tolerance_factor * bond.stddev
                stddev[r, u, v] = bond.stddev
    return {"lower_bound": lower, "upper_bound": upper, "stddev": stddev}


del _r, _i, _name, _letter, _res, _group, _pos, _a37, _a14, _p, _a, _chi, _end, _atoms, _swaps, _names, _b, _j
