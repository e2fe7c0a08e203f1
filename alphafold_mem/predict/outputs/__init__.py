"""Prediction outputs: PDB (pLDDT in the B-factor column), ModelCIF, scores / PAE JSON, plots.

Every writer takes plain numpy arrays (atom37 layout, Å; pLDDT on 0-100) and writes one file
atomically (:func:`alphafold_mem.io.atomic_write`), so an interrupted run never leaves a half-written
output; :func:`write_target_outputs` writes all files of one target, all or none: a signal is
held until they are all in place (:func:`alphafold_mem.predict.signals.deferred`), and a failed write
(no space, read-only) removes the files of the target already written, so a target is either complete
under its final names or absent.
"""

from __future__ import annotations

import contextlib
import os

from ...version import __version__
from .. import signals
from ..provenance import check_still_ours
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
    """Write every output file of one target (paths from :func:`output_paths`), all or none (module
    docstring); the scores JSON is written last, so its presence marks the target as finished.

    Raises:
        alphafold_mem.io.WriteError: a file could not be written (the target's new files are removed).
        alphafold_mem.predict.targets.PredictError: another run wrote this target with other inputs or
            options since this run started (:func:`~alphafold_mem.predict.provenance.check_still_ours`).
    """
    check_still_ours(t, paths["scores"])
    written: list[str] = []
    with signals.deferred():
        try:
            _write_all(paths, t, out, scores, method, written)
        except BaseException:
            for path in written:
                with contextlib.suppress(OSError):
                    os.remove(path)
            raise


def _write_all(paths: dict[str, str], t: Target, out: dict, scores: dict, method: str, written: list) -> None:
    aatype, mask = out["aatype"], out["final_atom_mask"]
    pos, plddt = out["final_atom_positions"], out["plddt"]
    remarks = [f"target {t.name}: {t.description[:200]}", method]
    written.append(paths["pdb"])  # listed before each write: a failed one leaves the old file or none
    write_pdb(paths["pdb"], t.name, aatype, pos, mask, plddt, remarks=remarks)
    written.append(paths["cif"])
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
    written.append(paths["plddt_png"])
    plot_plddt(paths["plddt_png"], plddt, title=t.name)
    if "pae_json" in paths:
        pae, max_pae = out["predicted_aligned_error"], out["max_predicted_aligned_error"]
        written.append(paths["pae_json"])
        write_json(paths["pae_json"], pae_json(pae, max_pae), indent=None)
        written.append(paths["pae_png"])
        plot_pae(paths["pae_png"], pae, max_pae, title=t.name)
    written.append(paths["scores"])
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
