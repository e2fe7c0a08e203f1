"""Data pipeline: parsers (FASTA, A3M, Stockholm, mmCIF, PDB), AF2 features, transforms, dataset.

Entry points:

* :func:`parse_fasta`, :func:`parse_msa` (``.a3m`` / ``.sto``), :func:`parse_mmcif` (one chain),
  :func:`read_structure` (all protein chains of an mmCIF or PDB file);
* :func:`make_features` -> the model batch (table: :data:`FEATURES`);
* :class:`ProteinChainDataset` over a chain index built once by ``scripts/build_chain_index.py``;
  :func:`collate` stacks padded samples.

Bad input raises :class:`InputError` (file, record, 1-based line:column); recoverable oddities emit
an :class:`InputWarning`.
"""

from .dataset import ChainIndex, ProteinChainDataset, build_chain_index
from .errors import InputError, InputWarning
from .features import FEATURES, FeatureSpec, check_features, make_features, make_template_features
from .mmcif import ProteinChain, Structure, parse_mmcif, parse_pdb, read_structure
from .parsers import FastaRecord, Msa, parse_a3m, parse_fasta, parse_fasta_string, parse_msa, parse_stockholm
from .transforms import Batch, Sample, collate, pad_features

__all__ = [
    "parse_fasta", "parse_fasta_string", "parse_msa", "parse_a3m", "parse_stockholm", "parse_mmcif",
    "parse_pdb", "read_structure", "make_features", "make_template_features", "FEATURES", "FeatureSpec",
    "check_features", "ProteinChainDataset", "ChainIndex", "build_chain_index", "collate", "pad_features",
    "Sample", "Batch", "FastaRecord", "Msa", "ProteinChain", "Structure", "InputError", "InputWarning",
]
