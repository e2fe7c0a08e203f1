"""ModelCIF output of a predicted chain, written with the ``modelcif`` package (python-modelcif).

The file holds the target entity, the model coordinates (``_atom_site``, with pLDDT also in
``B_iso_or_equiv``), the per-residue pLDDT (0-100) as the local QA metric (``_ma_qa_metric_local``),
the mean pLDDT and, for PAE presets, pTM as global QA metrics (``_ma_qa_metric_global``), and the
modelling protocol (software, inputs). The PAE matrix goes to the separate ``<id>_pae.json``.
"""

from __future__ import annotations

from typing import Optional

import ihm
import modelcif
import modelcif.dumper
import modelcif.model
import modelcif.protocol
import numpy as np

from ...geometry import residue_constants as rc
from ...io import atomic_write
from .qa_metrics import LocalPLDDT, qa_metric
from .qa_metrics import ascii_text as _ascii

__all__ = ["write_modelcif"]


_GlobalPLDDT = qa_metric("global", "pLDDT", "Mean predicted lDDT-CA over the chain (0-100).")
_GlobalPTM = qa_metric("global", "pTM", "Predicted TM-score (0-1).")


class _Model(modelcif.model.AbInitioModel):
    """Atoms generated on the fly from the atom37 arrays."""

    def __init__(self, assembly, asym, aatype, positions, mask, plddt, name):
        super().__init__(assembly, name=name)
        self._asym, self._aatype, self._pos, self._mask, self._plddt = asym, aatype, positions, mask, plddt

    def get_atoms(self):
        for i in range(self._aatype.shape[0]):
            for j, atom_name in enumerate(rc.atom_types):
                if self._mask[i, j]:
                    x, y, z = (round(float(v), 3) for v in self._pos[i, j])
                    yield modelcif.model.Atom(
                        asym_unit=self._asym,
                        seq_id=i + 1,
                        atom_id=atom_name,
                        type_symbol=atom_name[0],
                        x=x,
                        y=y,
                        z=z,
                        het=False,
                        biso=round(float(self._plddt[i]), 2),
                        occupancy=1.0,
                    )


def _entity_sequence(aatype: np.ndarray) -> list:
    unk = ihm.LPeptideChemComp(id="UNK", code="UNK", code_canonical="X", name="UNKNOWN")
    return [rc.restypes[a] if a < rc.restype_num else unk for a in aatype]


def write_modelcif(
    path,
    name: str,
    aatype: np.ndarray,
    atom_positions: np.ndarray,
    atom_mask: np.ndarray,
    plddt: np.ndarray,
    *,
    ptm: Optional[float] = None,
    description: str = "",
    software_version: str = "",
    method_details: str = "",
) -> None:
    """Write a ModelCIF file (atomically).

    Args:
        path: output ``.cif``.
        name: target id (data block name).
        aatype: ``[N_res]`` int, 0-19 ``restypes``, 20 = UNK.
        atom_positions: ``[N_res, 37, 3]`` Å; atom_mask ``[N_res, 37]`` (0 = not written).
        plddt: ``[N_res]`` 0-100: local QA metric and ``B_iso_or_equiv``; its mean is the global one.
        ptm: pTM (0-1) for PAE presets, written as a global QA metric.
        description: entity description (e.g. the FASTA header).
        software_version: alphafold-mem version for the software record.
        method_details: free text for the modelling step (weights, MSA, recycles).
    """
    aatype = np.asarray(aatype, dtype=np.int64)
    pos = np.asarray(atom_positions, dtype=np.float64)
    mask = np.asarray(atom_mask) > 0.5
    plddt = np.asarray(plddt, dtype=np.float64)

    system = modelcif.System(title=f"alphafold-mem prediction for {name}", id=_ascii(name).upper())
    software = modelcif.Software(
        name="alphafold-mem",
        classification="model building",
        description="AlphaFold2 (monomer) re-implementation in PyTorch",
        location=None,
        type="package",
        version=software_version or None,
    )
    system.software.append(software)
    entity = modelcif.Entity(_entity_sequence(aatype), description=_ascii(description or name)[:80])
    asym = modelcif.AsymUnit(entity, details=f"Model subunit {name}", id="A")
    assembly = modelcif.Assembly([asym], name="Modeled assembly")
    model = _Model(assembly, asym, aatype, pos, mask, plddt, name=f"{name} model")
    for i, value in enumerate(plddt):
        model.qa_metrics.append(LocalPLDDT(asym.residue(i + 1), round(float(value), 2)))
    model.qa_metrics.append(_GlobalPLDDT(round(float(plddt.mean()), 2)))
    if ptm is not None:
        model.qa_metrics.append(_GlobalPTM(round(float(ptm), 4)))
    group = modelcif.model.ModelGroup([model], name="alphafold-mem predictions")
    system.model_groups.append(group)
    protocol = modelcif.protocol.Protocol()
    protocol.steps.append(
        modelcif.protocol.ModelingStep(
            input_data=modelcif.data.DataGroup([entity]),
            output_data=model,
            software=software,
            name="structure prediction",
            details=_ascii(method_details) or None,
        )
    )
    system.protocols.append(protocol)
    with atomic_write(path) as tmp:
        with open(tmp, "w") as fh:
            modelcif.dumper.write(fh, [system])
