"""The input file formats by file-name suffix: the one table that prediction, training, search and
ablations look suffixes up in.

==============  =========  ===============================================  =============================
format          kind       suffixes                                         reader
==============  =========  ===============================================  =============================
FASTA           fasta      ``.fasta .fa .faa .fas .fsa .seq``               :func:`~.fasta.parse_fasta`
A3M             msa        ``.a3m``                                         :func:`~.msa.parse_a3m`
Stockholm       msa        ``.sto .stockholm .stk``                         :func:`~.msa.parse_stockholm`
aligned FASTA   aligned    ``.afa .aln``                                    :func:`~.msa.parse_a3m`
mmCIF           structure  ``.cif .mmcif``                                  :func:`~.mmcif.read_mmcif`
PDB             structure  ``.pdb .ent``                                    :func:`~.pdb.read_pdb`
==============  =========  ===============================================  =============================

Every suffix is also accepted with ``.gz`` after it (gzip-compressed); letter case is ignored
(``X.FASTA``, ``x.a3m.GZ``). Where an alignment is expected (:func:`~.msa.parse_msa`: ``--msa``, an
MSA directory) FASTA and aligned-FASTA files are read by the A3M rules. Aligned FASTA is not a
prediction input by suffix: there it is read as FASTA when named on the command line and by its
content in an input directory (:mod:`alphafold_mem.predict.inputs`).

The readers live in their own modules, which look their format up here (:func:`format_of`); the
``reader`` column names the function, so this module imports none of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from .errors import InputError

__all__ = [
    "Format",
    "FORMATS",
    "FASTA",
    "MSA",
    "ALIGNED",
    "STRUCTURE",
    "GZIP_SUFFIX",
    "format_of",
    "require_format",
    "suffixes",
    "is_gzip",
    "strip_gzip",
    "stem",
]

FASTA, MSA, ALIGNED, STRUCTURE = "fasta", "msa", "aligned", "structure"
GZIP_SUFFIX = ".gz"


@dataclass(frozen=True)
class Format:
    """One input format: ``name`` (as users call it), ``kind`` (``"fasta"``, ``"msa"``, ``"aligned"``
    or ``"structure"``), ``suffixes`` (lower case, without ``.gz``) and ``reader`` (the name of the
    function in :mod:`alphafold_mem.data` that reads it)."""

    name: str
    kind: str
    suffixes: tuple[str, ...]
    reader: str


#: The table of the module docstring, in lookup order.
FORMATS: tuple[Format, ...] = (
    Format("FASTA", FASTA, (".fasta", ".fa", ".faa", ".fas", ".fsa", ".seq"), "parse_fasta"),
    Format("A3M", MSA, (".a3m",), "parse_a3m"),
    Format("Stockholm", MSA, (".sto", ".stockholm", ".stk"), "parse_stockholm"),
    Format("aligned FASTA", ALIGNED, (".afa", ".aln"), "parse_a3m"),
    Format("mmCIF", STRUCTURE, (".cif", ".mmcif"), "read_mmcif"),
    Format("PDB", STRUCTURE, (".pdb", ".ent"), "read_pdb"),
)


def is_gzip(path) -> bool:
    """Whether ``path``'s name ends in ``.gz`` (any letter case)."""
    return os.fspath(path).lower().endswith(GZIP_SUFFIX)


def strip_gzip(name: str) -> str:
    """``name`` without a final ``.gz`` (any letter case)."""
    return name[: -len(GZIP_SUFFIX)] if is_gzip(name) else name


def suffixes(*kinds: str, gz: bool = False) -> tuple[str, ...]:
    """The suffixes of the formats of ``kinds`` (all formats when none is given), lower case, in table
    order; with ``gz`` each is followed by its ``.gz`` form."""
    out = [s for f in FORMATS if not kinds or f.kind in kinds for s in f.suffixes]
    return tuple(x for s in out for x in ((s, s + GZIP_SUFFIX) if gz else (s,)))


def format_of(path, *kinds: str) -> Optional[Format]:
    """The format of ``path`` by its suffix (after an optional ``.gz``; letter case ignored), among the
    formats of ``kinds`` (all when none is given); None when no suffix matches."""
    base = strip_gzip(os.path.basename(os.fspath(path))).lower()
    return next((f for f in FORMATS if (not kinds or f.kind in kinds) and base.endswith(f.suffixes)), None)


def require_format(path, *kinds: str, what: str = "input") -> Format:
    """:func:`format_of`, or :class:`InputError` naming the file, its suffix and the accepted ones.

    Raises:
        InputError: ``"<path>: unknown <what> format '.xyz' (expected .a3m, .sto, ..., optionally .gz)"``.
    """
    found = format_of(path, *kinds)
    if found is None:
        name = os.fspath(path)
        suffix = os.path.splitext(strip_gzip(os.path.basename(name)))[1] or "(no suffix)"
        shown = suffix if suffix.startswith("(") else repr(suffix)
        raise InputError(
            f"unknown {what} format {shown} (expected {', '.join(suffixes(*kinds))}, optionally .gz)", file=name
        )
    return found


def stem(name: str, *kinds: str) -> str:
    """``name`` (a file name) without ``.gz`` and the suffix of its format among ``kinds``
    (``"uniref90.fasta.gz"`` -> ``"uniref90"``); without ``.gz`` only when no format matches."""
    base = strip_gzip(os.path.basename(name))
    found = format_of(base, *kinds)
    if found is None:
        return base
    lower = base.lower()
    return base[: -len(next(s for s in found.suffixes if lower.endswith(s)))]
