"""Files of a predicted complex that know its chains: PDB (one chain per complex chain, residue
numbers restarting at 1 in every chain, pLDDT in the B-factor column), ModelCIF (one entity per
distinct sequence, one asym unit per chain, pLDDT as local QA metric, pTM and ipTM as global ones)
and the processed features as ``.npz`` (AF2's names).

The PDB format holds one-character chain ids only: a complex with a longer id (more than 62 chains,
or ids such as ``AA`` from the input) gets the mmCIF file alone (:func:`pdb_chain_ids_fit`).
"""

from __future__ import annotations

import io
import textwrap
from typing import Mapping, Optional, Sequence

import ihm
import modelcif
import modelcif.dumper
import modelcif.model
import modelcif.protocol
import numpy as np
from Bio.PDB.PDBIO import PDBIO
from Bio.PDB.StructureBuilder import StructureBuilder

from ...data.complex import Complex
from ...geometry import residue_constants as rc
from ...io import atomic_write
from .qa_metrics import LocalPLDDT, qa_metric
from .qa_metrics import ascii_text as _ascii

__all__ = ["pdb_chain_ids_fit", "write_complex_pdb", "write_complex_modelcif", "write_features_npz"]


def pdb_chain_ids_fit(cx: Complex) -> bool:
    """Every chain id is one character (the PDB format's chain column)."""
    return all(len(c.chain_id) == 1 for c in cx.chains)


def _chain_slices(cx: Complex):
    for chain, offset in zip(cx.chains, cx.offsets):
        yield chain, slice(offset, offset + len(chain))


def write_complex_pdb(
    path, cx: Complex, atom_positions: np.ndarray, atom_mask: np.ndarray, plddt: np.ndarray, remarks: Sequence[str] = ()
) -> None:
    """Write the complex as PDB (atomically), written with Biopython's ``PDBIO``.

    Args:
        path: output ``.pdb``.
        cx: the complex (chain ids, sequences; ``N_res`` = ``cx.num_res``).
        atom_positions: ``[N_res, 37, 3]`` Å; atom_mask ``[N_res, 37]`` (0 = not written).
        plddt: ``[N_res]`` 0-100, every atom's B-factor.
        remarks: ``REMARK 250`` lines written first.

    Raises:
        ValueError: arrays of another length than the complex, or a chain id longer than one character.
    """
    pos, mask, plddt = (
        np.asarray(atom_positions, np.float64),
        np.asarray(atom_mask) > 0.5,
        np.asarray(plddt, np.float64),
    )
    if pos.shape != (cx.num_res, rc.atom_type_num, 3) or mask.shape != pos.shape[:2] or plddt.shape != (cx.num_res,):
        raise ValueError(f"expected atom37 arrays for {cx.num_res} residues, got positions {pos.shape}")
    if not pdb_chain_ids_fit(cx):
        raise ValueError("chain ids longer than one character do not fit the PDB format: write mmCIF")
    sb = StructureBuilder()
    sb.init_structure(cx.name)
    sb.init_model(0)
    aatype = np.concatenate([_aatype(c.sequence) for c in cx.chains])
    for chain, cols in _chain_slices(cx):
        sb.init_chain(chain.chain_id)
        sb.init_seg("    ")
        for k, i in enumerate(range(cols.start, cols.stop)):
            a = aatype[i]
            sb.init_residue(rc.resnames[a] if a < len(rc.resnames) else rc.unk_restype, " ", k + 1, " ")
            for j, atom_name in enumerate(rc.atom_types):
                if mask[i, j]:
                    fullname = atom_name if len(atom_name) == 4 else f" {atom_name:<3}"
                    sb.init_atom(atom_name, pos[i, j], float(plddt[i]), 1.0, " ", fullname, element=atom_name[0])
    pdbio = PDBIO()
    pdbio.set_structure(sb.get_structure())
    with atomic_write(path) as tmp, open(tmp, "w") as fh:
        fh.write("REMARK 250 alphafold-mem complex prediction; B-factor column = pLDDT (0-100)\n")
        for line in remarks:
            text = _ascii(line)
            for part in textwrap.wrap(text, width=69) or [""]:
                fh.write(f"REMARK 250 {part}\n")
        pdbio.save(fh)


def _aatype(sequence: str) -> np.ndarray:
    return np.array([rc.restype_order.get(ch, rc.restype_num) for ch in sequence], np.int64)


_GlobalPLDDT = qa_metric("global", "pLDDT", "Mean predicted lDDT-CA over the complex (0-100).")
_GlobalPTM = qa_metric("global", "pTM", "Predicted TM-score of the complex (0-1).")
_GlobalIPTM = qa_metric("global", "ipTM", "Interface predicted TM-score (0-1, AF2-Multimer).")


class _Model(modelcif.model.AbInitioModel):
    """Atoms generated from the atom37 arrays, chain by chain."""

    def __init__(self, assembly, asyms, spans, aatype, positions, mask, plddt, name):
        super().__init__(assembly, name=name)
        self._asyms, self._spans = asyms, spans
        self._aatype, self._pos, self._mask, self._plddt = aatype, positions, mask, plddt

    def get_atoms(self):
        for asym, cols in zip(self._asyms, self._spans):
            for k, i in enumerate(range(cols.start, cols.stop)):
                for j, atom_name in enumerate(rc.atom_types):
                    if self._mask[i, j]:
                        x, y, z = (round(float(v), 3) for v in self._pos[i, j])
                        yield modelcif.model.Atom(
                            asym_unit=asym,
                            seq_id=k + 1,
                            atom_id=atom_name,
                            type_symbol=atom_name[0],
                            x=x,
                            y=y,
                            z=z,
                            het=False,
                            biso=round(float(self._plddt[i]), 2),
                            occupancy=1.0,
                        )


def write_complex_modelcif(
    path,
    cx: Complex,
    atom_positions: np.ndarray,
    atom_mask: np.ndarray,
    plddt: np.ndarray,
    *,
    ptm: Optional[float] = None,
    iptm: Optional[float] = None,
    software_version: str = "",
    method_details: str = "",
) -> None:
    """Write the complex as ModelCIF (atomically): one entity per distinct sequence, one asym unit
    per chain (its id), residues numbered from 1 in every chain; pLDDT ``[N_res]`` (0-100) as local
    QA metric and ``B_iso_or_equiv``, mean pLDDT, pTM and ipTM (0-1) as global QA metrics."""
    pos, mask, plddt = (
        np.asarray(atom_positions, np.float64),
        np.asarray(atom_mask) > 0.5,
        np.asarray(plddt, np.float64),
    )
    aatype = np.concatenate([_aatype(c.sequence) for c in cx.chains])
    system = modelcif.System(title=f"alphafold-mem prediction for {_ascii(cx.name)}", id=_ascii(cx.name).upper())
    software = modelcif.Software(
        name="alphafold-mem",
        classification="model building",
        description="AlphaFold2 / AlphaFold-Multimer re-implementation in PyTorch",
        location=None,
        type="package",
        version=software_version or None,
    )
    system.software.append(software)
    unk = ihm.LPeptideChemComp(id="UNK", code="UNK", code_canonical="X", name="UNKNOWN")
    entities = {}
    for eid, seq in cx.entities.items():
        ids = ", ".join(c.chain_id for c in cx.chains_of(eid))
        residues = [rc.restypes[a] if a < rc.restype_num else unk for a in _aatype(seq)]
        entities[eid] = modelcif.Entity(residues, description=f"{_ascii(cx.name)} entity {eid} (chains {ids})"[:80])
    asyms = [modelcif.AsymUnit(entities[c.entity_id], details=f"chain {c.chain_id}", id=c.chain_id) for c in cx.chains]
    spans = [cols for _, cols in _chain_slices(cx)]
    assembly = modelcif.Assembly(asyms, name="Modeled assembly")
    model = _Model(assembly, asyms, spans, aatype, pos, mask, plddt, name=f"{_ascii(cx.name)} model")
    for asym, cols in zip(asyms, spans):
        for k, i in enumerate(range(cols.start, cols.stop)):
            model.qa_metrics.append(LocalPLDDT(asym.residue(k + 1), round(float(plddt[i]), 2)))
    model.qa_metrics.append(_GlobalPLDDT(round(float(plddt.mean()), 2)))
    if ptm is not None:
        model.qa_metrics.append(_GlobalPTM(round(float(ptm), 4)))
    if iptm is not None:
        model.qa_metrics.append(_GlobalIPTM(round(float(iptm), 4)))
    system.model_groups.append(modelcif.model.ModelGroup([model], name="alphafold-mem predictions"))
    protocol = modelcif.protocol.Protocol()
    protocol.steps.append(
        modelcif.protocol.ModelingStep(
            input_data=modelcif.data.DataGroup(list(entities.values())),
            output_data=model,
            software=software,
            name="structure prediction",
            details=_ascii(method_details) or None,
        )
    )
    system.protocols.append(protocol)
    with atomic_write(path) as tmp, open(tmp, "w") as fh:
        modelcif.dumper.write(fh, [system])


def write_features_npz(path, features: Mapping[str, np.ndarray]) -> None:
    """Write processed features (AF2 names: ``msa``, ``deletion_matrix``, ``residue_index``,
    ``asym_id``, ``entity_id``, ``sym_id``, ``num_paired_rows``...) as an uncompressed ``.npz`` (atomically)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{k: np.asarray(v) for k, v in features.items()})
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        fh.write(buffer.getvalue())
