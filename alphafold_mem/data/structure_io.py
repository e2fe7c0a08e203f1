"""Structure files by format: :data:`STRUCTURE_SUFFIXES` (the file names the chain index scans) and
:func:`read_structure`, which looks the file's suffix up in :mod:`.formats` and calls
:func:`~.mmcif.read_mmcif` (``.cif``, ``.mmcif``) or :func:`~.pdb.read_pdb` (``.pdb``, ``.ent``),
optionally ``.gz``. Kept apart from :mod:`.structure` so that the records module does not import its
own readers.
"""

from __future__ import annotations

import os

from .formats import STRUCTURE, require_format, suffixes
from .mmcif import read_mmcif
from .pdb import read_pdb
from .structure import Structure

__all__ = ["STRUCTURE_SUFFIXES", "read_structure"]

#: The structure suffixes of :mod:`.formats`, each also with ``.gz`` (lower case: compare with ``name.lower()``).
STRUCTURE_SUFFIXES = suffixes(STRUCTURE, gz=True)
_READERS = {"read_mmcif": read_mmcif, "read_pdb": read_pdb}


def read_structure(path, *, model: int | None = None) -> Structure:
    """All protein chains of an mmCIF or PDB file (by suffix, :mod:`.formats`).

    Raises:
        InputError: an unknown suffix (one line listing the accepted ones), or any error of the reader.
    """
    found = require_format(path, STRUCTURE, what="structure")
    return _READERS[found.reader](os.fspath(path), model=model)
