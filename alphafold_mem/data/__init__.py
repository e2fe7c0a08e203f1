"""Data pipeline: parsers (FASTA, A3M, Stockholm, mmCIF, PDB), AF2 features, dataset.

Modules, one format or concern each: :mod:`.fasta`, :mod:`.msa` (A3M, Stockholm), :mod:`.names`
and :mod:`.text` (shared by both); :mod:`.structure` (chain records), :mod:`.mmcif`, :mod:`.pdb`,
:mod:`.structure_io` (dispatch by suffix); the :mod:`.features` package; :mod:`.chain_index`, :mod:`.dataset`;
:mod:`.errors`.

Entry points:

* :func:`parse_fasta`, :func:`parse_msa` (``.a3m`` / ``.sto``), :func:`parse_mmcif` (one chain),
  :func:`read_structure` (all protein chains of an mmCIF or PDB file);
* :func:`make_features` -> the model batch (table: :data:`FEATURES`);
* :class:`ProteinChainDataset` over a chain index built once by ``scripts/build_chain_index.py``;
  :func:`collate` stacks padded samples.

Bad input raises :class:`InputError` (file, record, 1-based line:column); recoverable oddities emit
an :class:`InputWarning`, harmless changes an :class:`InputNote`. Modules added for the input rules:
:mod:`.molecule` (record kind), :mod:`.neff` (effective MSA depth), :mod:`.drops` (what the
training data left out, by reason), :mod:`.features.values` (value checks before the model).
"""

from .chain_index import ChainIndex, build_chain_index
from .dataset import ProteinChainDataset
from .errors import InputError, InputNote, InputWarning
from .fasta import FastaRecord, parse_fasta, parse_fasta_string
from .features import (
    FEATURES,
    Batch,
    FeatureSpec,
    Sample,
    check_features,
    collate,
    make_features,
    make_template_features,
    pad_features,
)
from .mmcif import parse_mmcif
from .msa import Msa, parse_a3m, parse_msa, parse_stockholm
from .pdb import parse_pdb
from .structure import ProteinChain, Structure
from .structure_io import read_structure

__all__ = [
    "parse_fasta",
    "parse_fasta_string",
    "parse_msa",
    "parse_a3m",
    "parse_stockholm",
    "parse_mmcif",
    "parse_pdb",
    "read_structure",
    "make_features",
    "make_template_features",
    "FEATURES",
    "FeatureSpec",
    "check_features",
    "ProteinChainDataset",
    "ChainIndex",
    "build_chain_index",
    "collate",
    "pad_features",
    "Sample",
    "Batch",
    "FastaRecord",
    "Msa",
    "ProteinChain",
    "Structure",
    "InputError",
    "InputWarning",
    "InputNote",
]
