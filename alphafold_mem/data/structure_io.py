"""Structure files by format: :data:`STRUCTURE_SUFFIXES` (the file names the chain index scans) and
:func:`read_structure`, which dispatches on the suffix to :func:`~.mmcif.read_mmcif` (``.cif``,
``.mmcif``) or :func:`~.pdb.read_pdb` (``.pdb``, ``.ent``), optionally ``.gz``. Kept apart from
:mod:`.structure` so that the records module does not import its own readers.
"""

from __future__ import annotations

import os

from .errors import InputError
from .mmcif import read_mmcif
from .pdb import read_pdb
from .structure import Structure

__all__ = ["STRUCTURE_SUFFIXES", "read_structure"]

STRUCTURE_SUFFIXES = (".cif", ".mmcif", ".pdb", ".ent", ".cif.gz", ".mmcif.gz", ".pdb.gz", ".ent.gz")


def read_structure(path, *, model: int | None = None) -> Structure:
    """All protein chains: :func:`read_mmcif` for ``.cif``/``.mmcif`` (``.gz``), :func:`read_pdb` for
    ``.pdb``/``.ent``."""
    name = os.fspath(path).lower()
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith((".cif", ".mmcif")):
        return read_mmcif(path, model=model)
    if base.endswith((".pdb", ".ent")):
        return read_pdb(path, model=model)
    raise InputError(
        "unknown structure format (expected .cif, .mmcif, .pdb or .ent, optionally .gz)", file=os.fspath(path)
    )
