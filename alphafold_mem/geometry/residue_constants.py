"""Residue, atom and stereochemistry tables (Jumper et al. 2021, Suppl. 1.2.1, 1.8, 1.9.11).

Tables only. The names and layouts follow AF2 / OpenFold so that features, checkpoints and losses
line up: residue types in AF2 order ``ARNDCQEGHILKMFPSTWYV`` (+ ``X`` = 20, ``-`` = 21), the 37
"atom37" atom types, the per-residue "atom14" compact layout, and the 8 rigid groups
(0 backbone, 1 pre-omega, 2 phi, 3 psi, 4-7 chi1-chi4).

Numeric sources (transcribed, not derived here):
* ideal rigid-group atom positions, chi-angle atom definitions, chi masks, pi-periodicity,
  ambiguous-atom swaps, van der Waals radii and the between-residue C-N / angle statistics:
  AlphaFold's ``alphafold/common/residue_constants.py`` (DeepMind, Apache-2.0); the positions
  are ideal geometry after Engh & Huber (1991, 2001).
* per-residue bond lengths and bond angles: Engh & Huber (2001), International Tables for
  Crystallography Vol. F, Ch. 18.3, as tabulated in AlphaFold's ``stereo_chemical_props.txt``.

The only code below turns these tables into numpy index / lookup arrays.
"""

from __future__ import annotations

import collections

import numpy as np

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

# ------------------------------------------------------------------------------------------------
# Ideal atom positions (Å) in their rigid group's local frame (Suppl. 1.8.1, Table 2).
# Group 0 backbone (origin CA, x towards C, N in the xy-plane), 3 psi (O), 4-7 chi1-chi4.
# Each position is relative to the axis-end atom of its group; the x-axis is along the rotation
# axis and the torsion-defining atom lies in the xy-plane with y > 0.
# Format: resname -> [(atom name, group index, (x, y, z))]. Source: AF2 residue_constants.py.
# ------------------------------------------------------------------------------------------------
# fmt: off
rigid_group_atom_positions = {
    "ALA": [
        ("N", 0, (-0.525, 1.363, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.526, -0.000, -0.000)), ("CB", 0, (-0.529, -0.774, -1.205)),
        ("O", 3, (0.627, 1.062, 0.000)),
    ],
    "ARG": [
        ("N", 0, (-0.524, 1.362, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.525, -0.000, -0.000)), ("CB", 0, (-0.524, -0.778, -1.209)),
        ("O", 3, (0.626, 1.062, 0.000)), ("CG", 4, (0.616, 1.390, -0.000)),
        ("CD", 5, (0.564, 1.414, 0.000)), ("NE", 6, (0.539, 1.357, -0.000)),
        ("NH1", 7, (0.206, 2.301, 0.000)), ("NH2", 7, (2.078, 0.978, -0.000)),
        ("CZ", 7, (0.758, 1.093, -0.000)),
    ],
    "ASN": [
        ("N", 0, (-0.536, 1.357, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.526, -0.000, -0.000)), ("CB", 0, (-0.531, -0.787, -1.200)),
        ("O", 3, (0.625, 1.062, 0.000)), ("CG", 4, (0.584, 1.399, 0.000)),
        ("ND2", 5, (0.593, -1.188, 0.001)), ("OD1", 5, (0.633, 1.059, 0.000)),
    ],
    "ASP": [
        ("N", 0, (-0.525, 1.362, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.527, 0.000, -0.000)), ("CB", 0, (-0.526, -0.778, -1.208)),
        ("O", 3, (0.626, 1.062, -0.000)), ("CG", 4, (0.593, 1.398, -0.000)),
        ("OD1", 5, (0.610, 1.091, 0.000)), ("OD2", 5, (0.592, -1.101, -0.003)),
    ],
    "CYS": [
        ("N", 0, (-0.522, 1.362, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.524, 0.000, 0.000)), ("CB", 0, (-0.519, -0.773, -1.212)),
        ("O", 3, (0.625, 1.062, -0.000)), ("SG", 4, (0.728, 1.653, 0.000)),
    ],
    "GLN": [
        ("N", 0, (-0.526, 1.361, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.526, 0.000, 0.000)), ("CB", 0, (-0.525, -0.779, -1.207)),
        ("O", 3, (0.626, 1.062, -0.000)), ("CG", 4, (0.615, 1.393, 0.000)),
        ("CD", 5, (0.587, 1.399, -0.000)), ("NE2", 6, (0.593, -1.189, -0.001)),
        ("OE1", 6, (0.634, 1.060, 0.000)),
    ],
    "GLU": [
        ("N", 0, (-0.528, 1.361, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.526, -0.000, -0.000)), ("CB", 0, (-0.526, -0.781, -1.207)),
        ("O", 3, (0.626, 1.062, 0.000)), ("CG", 4, (0.615, 1.392, 0.000)),
        ("CD", 5, (0.600, 1.397, 0.000)), ("OE1", 6, (0.607, 1.095, -0.000)),
        ("OE2", 6, (0.589, -1.104, -0.001)),
    ],
    "GLY": [
        ("N", 0, (-0.572, 1.337, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.517, -0.000, -0.000)), ("O", 3, (0.626, 1.062, -0.000)),
    ],
    "HIS": [
        ("N", 0, (-0.527, 1.360, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.525, 0.000, 0.000)), ("CB", 0, (-0.525, -0.778, -1.208)),
        ("O", 3, (0.625, 1.063, 0.000)), ("CG", 4, (0.600, 1.370, -0.000)),
        ("CD2", 5, (0.889, -1.021, 0.003)), ("ND1", 5, (0.744, 1.160, -0.000)),
        ("CE1", 5, (2.030, 0.851, 0.002)), ("NE2", 5, (2.145, -0.466, 0.004)),
    ],
    "ILE": [
        ("N", 0, (-0.493, 1.373, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.527, -0.000, -0.000)), ("CB", 0, (-0.536, -0.793, -1.213)),
        ("O", 3, (0.627, 1.062, -0.000)), ("CG1", 4, (0.534, 1.437, -0.000)),
        ("CG2", 4, (0.540, -0.785, -1.199)), ("CD1", 5, (0.619, 1.391, 0.000)),
    ],
    "LEU": [
        ("N", 0, (-0.520, 1.363, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.525, -0.000, -0.000)), ("CB", 0, (-0.522, -0.773, -1.214)),
        ("O", 3, (0.625, 1.063, -0.000)), ("CG", 4, (0.678, 1.371, 0.000)),
        ("CD1", 5, (0.530, 1.430, -0.000)), ("CD2", 5, (0.535, -0.774, 1.200)),
    ],
    "LYS": [
        ("N", 0, (-0.526, 1.362, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.526, 0.000, 0.000)), ("CB", 0, (-0.524, -0.778, -1.208)),
        ("O", 3, (0.626, 1.062, -0.000)), ("CG", 4, (0.619, 1.390, 0.000)),
        ("CD", 5, (0.559, 1.417, 0.000)), ("CE", 6, (0.560, 1.416, 0.000)),
        ("NZ", 7, (0.554, 1.387, 0.000)),
    ],
    "MET": [
        ("N", 0, (-0.521, 1.364, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.525, 0.000, 0.000)), ("CB", 0, (-0.523, -0.776, -1.210)),
        ("O", 3, (0.625, 1.062, -0.000)), ("CG", 4, (0.613, 1.391, -0.000)),
        ("SD", 5, (0.703, 1.695, 0.000)), ("CE", 6, (0.320, 1.786, -0.000)),
    ],
    "PHE": [
        ("N", 0, (-0.518, 1.363, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.524, 0.000, -0.000)), ("CB", 0, (-0.525, -0.776, -1.212)),
        ("O", 3, (0.626, 1.062, -0.000)), ("CG", 4, (0.607, 1.377, 0.000)),
        ("CD1", 5, (0.709, 1.195, -0.000)), ("CD2", 5, (0.706, -1.196, 0.000)),
        ("CE1", 5, (2.102, 1.198, -0.000)), ("CE2", 5, (2.098, -1.201, -0.000)),
        ("CZ", 5, (2.794, -0.003, -0.001)),
    ],
    "PRO": [
        ("N", 0, (-0.566, 1.351, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.527, -0.000, 0.000)), ("CB", 0, (-0.546, -0.611, -1.293)),
        ("O", 3, (0.621, 1.066, 0.000)), ("CG", 4, (0.382, 1.445, 0.0)),
        ("CD", 5, (0.477, 1.424, 0.0)),  # AF2: angle made 2 degrees larger than ideal
    ],
    "SER": [
        ("N", 0, (-0.529, 1.360, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.525, -0.000, -0.000)), ("CB", 0, (-0.518, -0.777, -1.211)),
        ("O", 3, (0.626, 1.062, -0.000)), ("OG", 4, (0.503, 1.325, 0.000)),
    ],
    "THR": [
        ("N", 0, (-0.517, 1.364, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.526, 0.000, -0.000)), ("CB", 0, (-0.516, -0.793, -1.215)),
        ("O", 3, (0.626, 1.062, 0.000)), ("CG2", 4, (0.550, -0.718, -1.228)),
        ("OG1", 4, (0.472, 1.353, 0.000)),
    ],
    "TRP": [
        ("N", 0, (-0.521, 1.363, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.525, -0.000, 0.000)), ("CB", 0, (-0.523, -0.776, -1.212)),
        ("O", 3, (0.627, 1.062, 0.000)), ("CG", 4, (0.609, 1.370, -0.000)),
        ("CD1", 5, (0.824, 1.091, 0.000)), ("CD2", 5, (0.854, -1.148, -0.005)),
        ("CE2", 5, (2.186, -0.678, -0.007)), ("CE3", 5, (0.622, -2.530, -0.007)),
        ("NE1", 5, (2.140, 0.690, -0.004)), ("CH2", 5, (3.028, -2.890, -0.013)),
        ("CZ2", 5, (3.283, -1.543, -0.011)), ("CZ3", 5, (1.715, -3.389, -0.011)),
    ],
    "TYR": [
        ("N", 0, (-0.522, 1.362, 0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.524, -0.000, -0.000)), ("CB", 0, (-0.522, -0.776, -1.213)),
        ("O", 3, (0.627, 1.062, -0.000)), ("CG", 4, (0.607, 1.382, -0.000)),
        ("CD1", 5, (0.716, 1.195, -0.000)), ("CD2", 5, (0.713, -1.194, -0.001)),
        ("CE1", 5, (2.107, 1.200, -0.002)), ("CE2", 5, (2.104, -1.201, -0.003)),
        ("OH", 5, (4.168, -0.002, -0.005)), ("CZ", 5, (2.791, -0.001, -0.003)),
    ],
    "VAL": [
        ("N", 0, (-0.494, 1.373, -0.000)), ("CA", 0, (0.000, 0.000, 0.000)),
        ("C", 0, (1.527, -0.000, -0.000)), ("CB", 0, (-0.533, -0.795, -1.213)),
        ("O", 3, (0.627, 1.062, -0.000)), ("CG1", 4, (0.540, 1.429, -0.000)),
        ("CG2", 4, (0.533, -0.776, 1.203)),
    ],
}
# fmt: on

# ------------------------------------------------------------------------------------------------
# Stereochemistry for the violation losses (Suppl. 1.9.11)
# ------------------------------------------------------------------------------------------------
# Between-residue peptide bond C(i)-N(i+1), Å: [general, before proline].
between_res_bond_length_c_n = [1.329, 1.341]
between_res_bond_length_stddev_c_n = [0.014, 0.016]
# Between-residue cosines [mean, stddev]: C-N-CA 121.352 +- 2.315 deg, CA-C-N 116.568 +- 1.995 deg.
between_res_cos_angles_c_n_ca = [-0.5203, 0.0353]
between_res_cos_angles_ca_c_n = [-0.4473, 0.0311]

Bond = collections.namedtuple("Bond", ["atom1_name", "atom2_name", "length", "stddev"])
BondAngle = collections.namedtuple("BondAngle", ["atom1_name", "atom2_name", "atom3name", "angle_rad", "stddev"])

# Engh & Huber (2001) intra-residue bond lengths: "ATOM1-ATOM2 mean(Å) stddev(Å)" per residue.
# fmt: off
_BACKBONE_BONDS = "N-CA 1.459 0.020, CA-C 1.525 0.026, C-O 1.229 0.019"
_ENGH_HUBER_BONDS = {
    "ALA": "CA-CB 1.520 0.021, N-CA 1.459 0.020, CA-C 1.525 0.026, C-O 1.229 0.019",
    "ARG": "CA-CB 1.535 0.022, CB-CG 1.521 0.027, CG-CD 1.515 0.025, CD-NE 1.460 0.017, "
           "NE-CZ 1.326 0.013, CZ-NH1 1.326 0.013, CZ-NH2 1.326 0.013, " + _BACKBONE_BONDS,
    "ASN": "CA-CB 1.527 0.026, CB-CG 1.506 0.023, CG-OD1 1.235 0.022, CG-ND2 1.324 0.025, "
           + _BACKBONE_BONDS,
    "ASP": "CA-CB 1.535 0.022, CB-CG 1.513 0.021, CG-OD1 1.249 0.023, CG-OD2 1.249 0.023, "
           + _BACKBONE_BONDS,
    "CYS": "CA-CB 1.526 0.013, CB-SG 1.812 0.016, " + _BACKBONE_BONDS,
    "GLU": "CA-CB 1.535 0.022, CB-CG 1.517 0.019, CG-CD 1.515 0.015, CD-OE1 1.252 0.011, "
           "CD-OE2 1.252 0.011, " + _BACKBONE_BONDS,
    "GLN": "CA-CB 1.535 0.022, CB-CG 1.521 0.027, CG-CD 1.506 0.023, CD-OE1 1.235 0.022, "
           "CD-NE2 1.324 0.025, " + _BACKBONE_BONDS,
    "GLY": "N-CA 1.456 0.015, CA-C 1.514 0.016, C-O 1.232 0.016",
    "HIS": "CA-CB 1.535 0.022, CB-CG 1.492 0.016, CG-ND1 1.369 0.015, CG-CD2 1.353 0.017, "
           "ND1-CE1 1.343 0.025, CD2-NE2 1.415 0.021, CE1-NE2 1.322 0.023, " + _BACKBONE_BONDS,
    "ILE": "CA-CB 1.544 0.023, CB-CG1 1.536 0.028, CB-CG2 1.524 0.031, CG1-CD1 1.500 0.069, "
           + _BACKBONE_BONDS,
    "LEU": "CA-CB 1.533 0.023, CB-CG 1.521 0.029, CG-CD1 1.514 0.037, CG-CD2 1.514 0.037, "
           + _BACKBONE_BONDS,
    "LYS": "CA-CB 1.535 0.022, CB-CG 1.521 0.027, CG-CD 1.520 0.034, CD-CE 1.508 0.025, "
           "CE-NZ 1.486 0.025, " + _BACKBONE_BONDS,
    "MET": "CA-CB 1.535 0.022, CB-CG 1.509 0.032, CG-SD 1.807 0.026, SD-CE 1.774 0.056, "
           + _BACKBONE_BONDS,
    "PHE": "CA-CB 1.535 0.022, CB-CG 1.509 0.017, CG-CD1 1.383 0.015, CG-CD2 1.383 0.015, "
           "CD1-CE1 1.388 0.020, CD2-CE2 1.388 0.020, CE1-CZ 1.369 0.019, CE2-CZ 1.369 0.019, "
           + _BACKBONE_BONDS,
    "PRO": "CA-CB 1.531 0.020, CB-CG 1.495 0.050, CG-CD 1.502 0.033, CD-N 1.474 0.014, "
           "N-CA 1.468 0.017, CA-C 1.524 0.020, C-O 1.228 0.020",
    "SER": "CA-CB 1.525 0.015, CB-OG 1.418 0.013, " + _BACKBONE_BONDS,
    "THR": "CA-CB 1.529 0.026, CB-OG1 1.428 0.020, CB-CG2 1.519 0.033, " + _BACKBONE_BONDS,
    "TRP": "CA-CB 1.535 0.022, CB-CG 1.498 0.018, CG-CD1 1.363 0.014, CG-CD2 1.432 0.017, "
           "CD1-NE1 1.375 0.017, NE1-CE2 1.371 0.013, CD2-CE2 1.409 0.012, CD2-CE3 1.399 0.015, "
           "CE2-CZ2 1.393 0.017, CE3-CZ3 1.380 0.017, CZ2-CH2 1.369 0.019, CZ3-CH2 1.396 0.016, "
           + _BACKBONE_BONDS,
    "TYR": "CA-CB 1.535 0.022, CB-CG 1.512 0.015, CG-CD1 1.387 0.013, CG-CD2 1.387 0.013, "
           "CD1-CE1 1.389 0.015, CD2-CE2 1.389 0.015, CE1-CZ 1.381 0.013, CE2-CZ 1.381 0.013, "
           "CZ-OH 1.374 0.017, " + _BACKBONE_BONDS,
    "VAL": "CA-CB 1.543 0.021, CB-CG1 1.524 0.021, CB-CG2 1.524 0.021, " + _BACKBONE_BONDS,
}

# Engh & Huber (2001) intra-residue bond angles: "A1-A2-A3 mean(deg) stddev(deg)" per residue.
_BACKBONE_ANGLES = "N-CA-C 111.0 2.7, CA-C-O 120.1 2.1"
_ENGH_HUBER_ANGLES = {
    "ALA": "N-CA-CB 110.1 1.4, CB-CA-C 110.1 1.5, " + _BACKBONE_ANGLES,
    "ARG": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 2.2, CB-CG-CD 111.6 2.6, "
           "CG-CD-NE 111.8 2.1, CD-NE-CZ 123.6 1.4, NE-CZ-NH1 120.3 0.5, NE-CZ-NH2 120.3 0.5, "
           "NH1-CZ-NH2 119.4 1.1, " + _BACKBONE_ANGLES,
    "ASN": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 2.2, CB-CG-ND2 116.7 2.4, "
           "CB-CG-OD1 121.6 2.0, ND2-CG-OD1 121.9 2.3, " + _BACKBONE_ANGLES,
    "ASP": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 2.2, CB-CG-OD1 118.3 0.9, "
           "CB-CG-OD2 118.3 0.9, OD1-CG-OD2 123.3 1.9, " + _BACKBONE_ANGLES,
    "CYS": "N-CA-CB 110.8 1.5, CB-CA-C 111.5 1.2, CA-CB-SG 114.2 1.1, " + _BACKBONE_ANGLES,
    "GLU": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 2.2, CB-CG-CD 114.2 2.7, "
           "CG-CD-OE1 118.3 2.0, CG-CD-OE2 118.3 2.0, OE1-CD-OE2 123.3 1.2, " + _BACKBONE_ANGLES,
    "GLN": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 2.2, CB-CG-CD 111.6 2.6, "
           "CG-CD-OE1 121.6 2.0, CG-CD-NE2 116.7 2.4, OE1-CD-NE2 121.9 2.3, " + _BACKBONE_ANGLES,
    "GLY": "N-CA-C 113.1 2.5, CA-C-O 120.6 1.8",
    "HIS": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.6 1.7, CB-CG-ND1 123.2 2.5, "
           "CB-CG-CD2 130.8 3.1, CG-ND1-CE1 108.2 1.4, ND1-CE1-NE2 109.9 2.2, "
           "CE1-NE2-CD2 106.6 2.5, NE2-CD2-CG 109.2 1.9, CD2-CG-ND1 106.0 1.4, " + _BACKBONE_ANGLES,
    "ILE": "N-CA-CB 110.8 2.3, CB-CA-C 111.6 2.0, CA-CB-CG1 111.0 1.9, CB-CG1-CD1 113.9 2.8, "
           "CA-CB-CG2 110.9 2.0, CG1-CB-CG2 111.4 2.2, " + _BACKBONE_ANGLES,
    "LEU": "N-CA-CB 110.4 2.0, CB-CA-C 110.2 1.9, CA-CB-CG 115.3 2.3, CB-CG-CD1 111.0 1.7, "
           "CB-CG-CD2 111.0 1.7, CD1-CG-CD2 110.5 3.0, " + _BACKBONE_ANGLES,
    "LYS": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 2.2, CB-CG-CD 111.6 2.6, "
           "CG-CD-CE 111.9 3.0, CD-CE-NZ 111.7 2.3, " + _BACKBONE_ANGLES,
    "MET": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.3 1.7, CB-CG-SD 112.4 3.0, "
           "CG-SD-CE 100.2 1.6, " + _BACKBONE_ANGLES,
    "PHE": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.9 2.4, CB-CG-CD1 120.8 0.7, "
           "CB-CG-CD2 120.8 0.7, CD1-CG-CD2 118.3 1.3, CG-CD1-CE1 120.8 1.1, "
           "CG-CD2-CE2 120.8 1.1, CD1-CE1-CZ 120.1 1.2, CD2-CE2-CZ 120.1 1.2, "
           "CE1-CZ-CE2 120.0 1.8, " + _BACKBONE_ANGLES,
    "PRO": "N-CA-CB 103.3 1.2, CB-CA-C 111.7 2.1, CA-CB-CG 104.8 1.9, CB-CG-CD 106.5 3.9, "
           "CG-CD-N 103.2 1.5, CA-N-CD 111.7 1.4, N-CA-C 112.1 2.6, CA-C-O 120.2 2.4",
    "SER": "N-CA-CB 110.5 1.5, CB-CA-C 110.1 1.9, CA-CB-OG 111.2 2.7, " + _BACKBONE_ANGLES,
    "THR": "N-CA-CB 110.3 1.9, CB-CA-C 111.6 2.7, CA-CB-OG1 109.0 2.1, CA-CB-CG2 112.4 1.4, "
           "OG1-CB-CG2 110.0 2.3, " + _BACKBONE_ANGLES,
    "TRP": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.7 1.9, CB-CG-CD1 127.0 1.3, "
           "CB-CG-CD2 126.6 1.3, CD1-CG-CD2 106.3 0.8, CG-CD1-NE1 110.1 1.0, "
           "CD1-NE1-CE2 109.0 0.9, NE1-CE2-CD2 107.3 1.0, CE2-CD2-CG 107.3 0.8, "
           "CG-CD2-CE3 133.9 0.9, NE1-CE2-CZ2 130.4 1.1, CE3-CD2-CE2 118.7 1.2, "
           "CD2-CE2-CZ2 122.3 1.2, CE2-CZ2-CH2 117.4 1.0, CZ2-CH2-CZ3 121.6 1.2, "
           "CH2-CZ3-CE3 121.2 1.1, CZ3-CE3-CD2 118.8 1.3, " + _BACKBONE_ANGLES,
    "TYR": "N-CA-CB 110.6 1.8, CB-CA-C 110.4 2.0, CA-CB-CG 113.4 1.9, CB-CG-CD1 121.0 0.6, "
           "CB-CG-CD2 121.0 0.6, CD1-CG-CD2 117.9 1.1, CG-CD1-CE1 121.3 0.8, "
           "CG-CD2-CE2 121.3 0.8, CD1-CE1-CZ 119.8 0.9, CD2-CE2-CZ 119.8 0.9, "
           "CE1-CZ-CE2 119.8 1.6, CE1-CZ-OH 120.1 2.7, CE2-CZ-OH 120.1 2.7, " + _BACKBONE_ANGLES,
    "VAL": "N-CA-CB 111.5 2.2, CB-CA-C 111.4 1.9, CA-CB-CG1 110.9 1.5, CA-CB-CG2 110.9 1.5, "
           "CG1-CB-CG2 110.9 1.6, " + _BACKBONE_ANGLES,
}
# fmt: on


def _split_entries(text: str) -> list[tuple[list[str], float, float]]:
    out = []
    for entry in text.split(","):
        names, mean, std = entry.split()
        out.append((names.split("-"), float(mean), float(std)))
    return out


# resname -> [Bond] (Å) and resname -> [BondAngle] (radians); 'UNK' has none.
residue_bonds = {
    res: [Bond(a[0], a[1], m, s) for a, m, s in _split_entries(txt)] for res, txt in _ENGH_HUBER_BONDS.items()
}
residue_bonds["UNK"] = []
residue_bond_angles = {
    res: [BondAngle(a[0], a[1], a[2], np.deg2rad(m), np.deg2rad(s)) for a, m, s in _split_entries(txt)]
    for res, txt in _ENGH_HUBER_ANGLES.items()
}
residue_bond_angles["UNK"] = []


def _virtual_bond(b1: Bond, b2: Bond, angle: BondAngle) -> Bond:
    """Bond angle a1-a2-a3 as the length of the opposite edge a1-a3 (law of cosines), with the
    standard deviation by first-order propagation of the three independent uncertainties."""
    gamma = angle.angle_rad
    length = np.sqrt(b1.length**2 + b2.length**2 - 2 * b1.length * b2.length * np.cos(gamma))
    d_gamma = b1.length * b2.length * np.sin(gamma) / length
    d_b1 = (b1.length - b2.length * np.cos(gamma)) / length
    d_b2 = (b2.length - b1.length * np.cos(gamma)) / length
    std = np.sqrt((d_gamma * angle.stddev) ** 2 + (d_b1 * b1.stddev) ** 2 + (d_b2 * b2.stddev) ** 2)
    return Bond(angle.atom1_name, angle.atom3name, float(length), float(std))


def _bond_lookup(resname: str) -> dict[frozenset, Bond]:
    return {frozenset((b.atom1_name, b.atom2_name)): b for b in residue_bonds[resname]}


# resname -> [Bond]: bond angles expressed as 1-3 distances (Å).
residue_virtual_bonds = {
    res: [
        _virtual_bond(
            _bond_lookup(res)[frozenset((a.atom1_name, a.atom2_name))],
            _bond_lookup(res)[frozenset((a.atom2_name, a.atom3name))],
            a,
        )
        for a in angles
    ]
    for res, angles in residue_bond_angles.items()
}


def load_stereo_chemical_props():
    """``(residue_bonds, residue_virtual_bonds, residue_bond_angles)`` (AF2's accessor name)."""
    return residue_bonds, residue_virtual_bonds, residue_bond_angles


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
