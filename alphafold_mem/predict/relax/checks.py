"""Structure checks used before and after relaxation: the project's own violation check
(:func:`alphafold_mem.losses.violations.find_structural_violations`, AF2 Suppl. 1.9.11 with AF2's
tolerances: 12 standard deviations for bonds and angles, 1.5 Å van der Waals overlap for clashes),
which AF2's relaxation uses the same way (``amber_minimize.get_violation_metrics``).
"""

from __future__ import annotations

import numpy as np
import torch

from ...geometry import all_atom
from ...geometry import residue_constants as rc
from ...losses.violations import find_structural_violations

__all__ = ["nonfinite_atoms", "violation_metrics"]


def nonfinite_atoms(chains) -> list[str]:
    """``"<chain>:<residue><number> <atom>"`` for each present atom (``atom37_mask``) whose coordinates
    are not finite (NaN or infinite), in chain order; ``chains`` are
    :class:`~alphafold_mem.data.structure.ProteinChain` (``atom37_positions`` ``[N_res, 37, 3]`` Å)."""
    bad = []
    for chain in chains:
        present = np.asarray(chain.atom37_mask) > 0
        broken = present & ~np.isfinite(np.asarray(chain.atom37_positions)).all(axis=-1)
        for i, j in zip(*np.nonzero(broken)):
            bad.append(f"{chain.chain_id}:{chain.sequence[i]}{i + 1} {rc.atom_types[j]}")
    return bad


def violation_metrics(aatype: np.ndarray, positions: np.ndarray, mask: np.ndarray, residue_index: np.ndarray) -> dict:
    """Violation counts of heavy atoms in atom37 layout.

    Args:
        aatype: ``[N_res]`` int (20 = X: no side chain, checked by its backbone only).
        positions: ``[N_res, 37, 3]`` Å; mask: ``[N_res, 37]``.
        residue_index: ``[N_res]``; consecutive numbers are bonded (peptide bond checks).

    Returns:
        ``clashing_atoms`` (atoms in an inter-residue clash), ``bond_violations`` (residues with a
        peptide bond length/angle outside tolerance), ``within_residue_violations`` (atoms with an
        intra-residue bond/angle/clash violation), ``violating_residues`` (any of these) and
        ``violating_residue_indices`` (0-based).
    """
    aa = torch.as_tensor(np.array(aatype), dtype=torch.long)
    pos37 = torch.as_tensor(np.array(positions), dtype=torch.float64)
    mask37 = torch.as_tensor(np.array(mask), dtype=torch.float64)
    pos14 = all_atom.atom37_to_atom14(pos37, aa)
    mask14 = all_atom.atom37_to_atom14(mask37, aa) * all_atom.make_atom14_masks(aa)["atom14_atom_exists"].to(pos37)
    v = find_structural_violations(pos14, mask14, torch.as_tensor(np.array(residue_index)), aa)
    per_res = v["per_residue_violation_mask"]
    return {
        "clashing_atoms": int(v["clashes"]["per_atom_clash_mask"].sum()),
        "bond_violations": int(v["bonds"]["per_residue_violation_mask"].sum()),
        "within_residue_violations": int(v["within"]["per_atom_violations"].sum()),
        "violating_residues": int(per_res.sum()),
        "violating_residue_indices": [int(i) for i in torch.nonzero(per_res > 0).flatten()],
    }
