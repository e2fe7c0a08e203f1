"""PDB output of a predicted chain, written with Biopython's ``PDBIO``.

The B-factor column holds the per-residue pLDDT (0-100) on every atom of the residue, as in
AlphaFold2 and the AlphaFold DB.
"""

from __future__ import annotations

import textwrap
from typing import Optional, Sequence

import numpy as np
from Bio.PDB.PDBIO import PDBIO
from Bio.PDB.StructureBuilder import StructureBuilder

from ...geometry import residue_constants as rc
from ...io import atomic_write

__all__ = ["build_structure", "write_pdb"]


def _element(atom_name: str) -> str:
    """Element of a protein atom37 name (``CA`` -> C, ``SD`` -> S, ``OXT`` -> O)."""
    return atom_name[0]


def build_structure(
    name: str,
    aatype: np.ndarray,
    atom_positions: np.ndarray,
    atom_mask: np.ndarray,
    plddt: np.ndarray,
    residue_index: Optional[np.ndarray] = None,
    chain_id: str = "A",
):
    """A Biopython ``Structure`` (one model, one chain) from atom37 arrays.

    Args:
        name: structure id.
        aatype: ``[N_res]`` int, 0-19 ``restypes``, 20 = UNK.
        atom_positions: ``[N_res, 37, 3]`` Å.
        atom_mask: ``[N_res, 37]``; atoms with mask 0 are not written.
        plddt: ``[N_res]`` 0-100, written as every atom's B-factor.
        residue_index: ``[N_res]`` 0-based residue numbers (default ``0..N_res-1``); written 1-based.
        chain_id: the chain letter.
    """
    aatype = np.asarray(aatype, dtype=np.int64)
    pos = np.asarray(atom_positions, dtype=np.float64)
    mask = np.asarray(atom_mask) > 0.5
    plddt = np.asarray(plddt, dtype=np.float64)
    n = aatype.shape[0]
    if pos.shape != (n, rc.atom_type_num, 3) or mask.shape != (n, rc.atom_type_num) or plddt.shape != (n,):
        raise ValueError(
            f"expected atom37 arrays for {n} residues, got positions {pos.shape}, "
            f"mask {mask.shape}, plddt {plddt.shape}"
        )
    if residue_index is None:
        residue_index = np.arange(n)
    sb = StructureBuilder()
    sb.init_structure(name)
    sb.init_model(0)
    sb.init_chain(chain_id)
    sb.init_seg("    ")
    for i in range(n):
        resname = rc.resnames[aatype[i]] if aatype[i] < len(rc.resnames) else rc.unk_restype
        sb.init_residue(resname, " ", int(residue_index[i]) + 1, " ")
        for j, atom_name in enumerate(rc.atom_types):
            if not mask[i, j]:
                continue
            fullname = atom_name if len(atom_name) == 4 else f" {atom_name:<3}"
            sb.init_atom(atom_name, pos[i, j], float(plddt[i]), 1.0, " ", fullname, element=_element(atom_name))
    return sb.get_structure()


def write_pdb(
    path,
    name: str,
    aatype: np.ndarray,
    atom_positions: np.ndarray,
    atom_mask: np.ndarray,
    plddt: np.ndarray,
    residue_index: Optional[np.ndarray] = None,
    chain_id: str = "A",
    remarks: Sequence[str] = (),
) -> None:
    """Write a PDB file (atomically) with pLDDT (0-100) in the B-factor column.

    Args: as :func:`build_structure`; ``remarks`` are written as ``REMARK 250`` lines first.
    """
    structure = build_structure(name, aatype, atom_positions, atom_mask, plddt, residue_index, chain_id)
    io = PDBIO()
    io.set_structure(structure)
    with atomic_write(path) as tmp:
        with open(tmp, "w") as fh:
            fh.write("REMARK 250 alphafold-mem prediction; B-factor column = pLDDT (0-100)\n")
            for line in remarks:
                text = " ".join(str(line).split()).encode("ascii", "replace").decode("ascii")
                for part in textwrap.wrap(text, width=69) or [""]:
                    fh.write(f"REMARK 250 {part}\n")
            io.save(fh)
