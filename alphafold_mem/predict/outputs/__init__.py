"""Prediction outputs: PDB (pLDDT in the B-factor column), ModelCIF, scores / PAE JSON, plots.

Every writer takes plain numpy arrays (atom37 layout, Å; pLDDT on 0-100) and writes one file
atomically (:func:`alphafold_mem.io.atomic_write`), so an interrupted run never leaves a half-written
output; :func:`write_target_outputs` writes all files of one target.
"""

from __future__ import annotations

import os

from ...version import __version__
from ..targets import Target
from .modelcif import write_modelcif
from .pdb import write_pdb
from .plots import plot_pae, plot_plddt
from .scores import pae_json, write_json


def output_paths(out_dir: str, name: str, with_pae: bool) -> dict[str, str]:
    """The output files of target ``name``: PDB, ModelCIF, pLDDT plot, scores JSON and, with a PAE
    head, PAE JSON and plot."""
    p = {"pdb": f"{name}.pdb", "cif": f"{name}.cif", "plddt_png": f"{name}_plddt.png", "scores": f"{name}_scores.json"}
    if with_pae:
        p.update({"pae_json": f"{name}_pae.json", "pae_png": f"{name}_pae.png"})
    return {k: os.path.join(out_dir, v) for k, v in p.items()}


def write_target_outputs(paths: dict[str, str], t: Target, out: dict, scores: dict, method: str) -> None:
    """Write every output file of one target (paths from :func:`output_paths`); the scores JSON is
    written last, so its presence marks the target as finished."""
    aatype, mask = out["aatype"], out["final_atom_mask"]
    pos, plddt = out["final_atom_positions"], out["plddt"]
    remarks = [f"target {t.name}: {t.description[:200]}", method]
    write_pdb(paths["pdb"], t.name, aatype, pos, mask, plddt, remarks=remarks)
    write_modelcif(
        paths["cif"],
        t.name,
        aatype,
        pos,
        mask,
        plddt,
        ptm=out.get("ptm"),
        description=t.description,
        software_version=__version__,
        method_details=method,
    )
    plot_plddt(paths["plddt_png"], plddt, title=t.name)
    if "pae_json" in paths:
        pae, max_pae = out["predicted_aligned_error"], out["max_predicted_aligned_error"]
        write_json(paths["pae_json"], pae_json(pae, max_pae), indent=None)
        plot_pae(paths["pae_png"], pae, max_pae, title=t.name)
    write_json(paths["scores"], scores, flat=True)  # last: its presence marks the target as finished


__all__ = [
    "output_paths",
    "pae_json",
    "plot_pae",
    "plot_plddt",
    "write_json",
    "write_modelcif",
    "write_pdb",
    "write_target_outputs",
]
