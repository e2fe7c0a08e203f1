"""Stereochemistry for the violation losses (Jumper et al. 2021, Suppl. 1.9.11): between-residue
peptide-bond statistics (AlphaFold's ``residue_constants.py``) and Engh & Huber (2001) intra-residue
bond lengths and angles (International Tables for Crystallography Vol. F, Ch. 18.3, as tabulated in
AlphaFold's ``stereo_chemical_props.txt``), with bond angles also as 1-3 distances. Read through
:mod:`.residue_constants`."""

from __future__ import annotations

import collections

import numpy as np

__all__ = [
    "Bond",
    "BondAngle",
    "between_res_bond_length_c_n",
    "between_res_bond_length_stddev_c_n",
    "between_res_cos_angles_c_n_ca",
    "between_res_cos_angles_ca_c_n",
    "load_stereo_chemical_props",
    "residue_bond_angles",
    "residue_bonds",
    "residue_virtual_bonds",
]

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
