"""Per-chain alignment folders in AF2 / OpenFold / OpenProteinSet layout::

    <alignments>/<pdbid>_<chain>/
        uniref90_hits.sto | uniref90_hits.a3m     jackhmmer, UniRef90 (first 10,000 rows used)
        bfd_uniclust_hits.a3m | bfd_uniref_hits.a3m | small_bfd_hits.sto   HHblits / jackhmmer
        mgnify_hits.sto | mgnify_hits.a3m         jackhmmer, MGnify (first 501 rows used)
        pdb70_hits.hhr | hmm_output.sto | pdb_hits.sto   template hits (HHsearch / hmmsearch)
        uniprot_hits.sto, pairing.a3m             multimer pairing only: not used by the monomer pipeline
        prepaired.a3m                             multimer rows paired already (an MSA server's paired mode)

:func:`alignment_files` lists a folder's MSAs in AF2's merge order (``DataPipeline.process``:
UniRef90, BFD, MGnify; other alignments after them in name order) and :func:`msa_row_cap` gives
AF2's row caps (``uniref_max_hits`` 10,000, ``mgnify_max_hits`` 501); the merged MSA drops rows that
repeat an earlier one (:func:`alphafold_mem.data.features.msa.make_msa_features`). OpenFold leaves
``uniprot_hits.sto`` out of monomer MSAs (``data_pipeline._parse_msa_data``), as we do.
:func:`template_hits_file` finds the folder's template hits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .formats import MSA, format_of

__all__ = [
    "alignment_files",
    "alignment_names",
    "msa_row_cap",
    "template_hits_file",
    "MSA_ROW_CAPS",
    "TEMPLATE_HIT_NAMES",
]

MSA_ROW_CAPS = {"uniref90": 10_000, "mgnify": 501}
TEMPLATE_HIT_NAMES = ("pdb70_hits.hhr", "hmm_output.sto", "pdb_hits.sto")
_PAIRING_ONLY = ("pairing.", "uniprot_hits.", "prepaired.")


def msa_row_cap(path) -> Optional[int]:
    """AF2's row cap for an alignment file by its name (``uniref90*``: 10,000, ``mgnify*``: 501), else None."""
    name = os.path.basename(os.fspath(path)).lower()
    return next((c for k, c in MSA_ROW_CAPS.items() if name.startswith(k)), None)


def alignment_names(names) -> list[tuple[str, Optional[int]]]:
    """The MSA file names among ``names`` (alignment suffixes of :mod:`.formats`, optionally ``.gz``) in
    AF2 merge order, with their row caps. Template hit files and multimer-only files (``pairing.a3m``,
    ``uniprot_hits.sto``, ``prepaired.a3m``) are left out."""
    files = [
        n
        for n in sorted(names)
        if format_of(n, MSA) is not None and not n.lower().startswith(_PAIRING_ONLY) and n not in TEMPLATE_HIT_NAMES
    ]

    def rank(name: str) -> int:
        n = name.lower()
        if n.startswith("uniref90"):
            return 0
        if n.startswith("mgnify"):
            return 2
        if n.startswith(("bfd", "small_bfd")) or format_of(n, MSA).name == "A3M":
            return 1
        return 3

    return [(n, msa_row_cap(n)) for n in sorted(files, key=lambda n: (rank(n), n))]


def alignment_files(folder) -> list[tuple[Path, Optional[int]]]:
    """The MSA files of a chain folder in AF2 merge order, with their row caps (:func:`alignment_names`)."""
    folder = Path(folder)
    return [(folder / n, cap) for n, cap in alignment_names(p.name for p in folder.iterdir())]


def template_hits_file(folder) -> Optional[Path]:
    """``pdb70_hits.hhr``, ``hmm_output.sto`` or ``pdb_hits.sto`` in ``folder`` (first found), or None."""
    for name in TEMPLATE_HIT_NAMES:
        p = Path(folder) / name
        if p.is_file():
            return p
    return None
