"""Prediction outputs: PDB (pLDDT in the B-factor column), ModelCIF, scores / PAE JSON, plots.

Every writer takes plain numpy arrays (atom37 layout, Å; pLDDT on 0-100) and writes one file
atomically (temporary name, then rename), so an interrupted run never leaves a half-written output.
"""

from .modelcif_writer import write_modelcif
from .pdb import write_pdb
from .plots import plot_pae, plot_plddt
from .scores import pae_json, write_json

__all__ = ["write_pdb", "write_modelcif", "plot_plddt", "plot_pae", "pae_json", "write_json"]
