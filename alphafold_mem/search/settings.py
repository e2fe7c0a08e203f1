"""Search settings transcribed from AlphaFold2 (v2.3.2), and the one place that imports pyhmmer.

Jackhmmer (AF2 ``alphafold/data/tools/jackhmmer.py`` defaults, used unchanged by
``alphafold/data/pipeline.py`` for UniRef90 and MGnify; AF2 Suppl. 1.2.2): ``-N 1 -E 0.0001 --incE
0.0001 --F1 0.0005 --F2 0.00005 --F3 0.0000005``; ``--domE``/``--incdomE`` are not passed, so HMMER's
jackhmmer defaults (10 and 0.001) apply; ``-Z`` is passed only by AF2's streamed search in its
Colab notebook, as the database size in sequences (UniRef90 135,301,051; MGnify 304,820,129;
small BFD 65,984,053). AF2 keeps the first 10,000 UniRef90 and 501 MGnify hits
(``uniref_max_hits``, ``mgnify_max_hits``).

Hmmsearch template search (AF2 ``alphafold/data/tools/hmmsearch.py`` and ``hmmbuild.py``): the
profile is built with ``hmmbuild --hand --amino`` from the query's MSA, so its match states are the
query's residues, and searched with ``--F1 0.1 --F2 0.1 --F3 0.1 --incE 100 -E 100 --domE 100
--incdomE 100`` against ``pdb_seqres.txt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: The MMseqs2 MSA server of ColabFold (``predict --msa-server``; :mod:`.msa_server`).
PUBLIC_SERVER = "https://api.colabfold.com"
MODES = {  # ColabFold's mode names -> the A3M files kept from the result
    "env": ("uniref.a3m", "bfd.mgnify30.metaeuk30.smag30.a3m"),  # UniRef30 + ColabFoldDB (environmental)
    "all": ("uniref.a3m",),  # UniRef30 only
}
TERMS = (
    "ColabFold's public server is free but rate-limited; its authors ask for moderate use: no large-scale "
    "predictions, no requests from several IPs at once; sequences are sent to a third-party server "
    "(github.com/sokrypton/ColabFold/wiki)"
)

__all__ = [
    "JackhmmerSettings",
    "HMMSEARCH_OPTIONS",
    "MAX_HITS_BY_DATABASE",
    "MODES",
    "PUBLIC_SERVER",
    "TERMS",
    "require_pyhmmer",
    "SearchError",
]


class SearchError(RuntimeError):
    """A search cannot run (missing package, unreadable database): one line."""


@dataclass(frozen=True)
class JackhmmerSettings:
    """jackhmmer options (AF2 defaults, see the module docstring).

    Attributes:
        iterations: ``-N``.
        e_value, inc_e, dom_e, incdom_e: ``-E``, ``--incE``, ``--domE``, ``--incdomE``.
        f1, f2, f3: the MSV / Viterbi / Forward filter thresholds.
        z: ``-Z``, the database size in sequences for E-values; ``None`` = count the database.
        max_sequences: rows kept per database, query included (best E-value first).
        chunk_sequences: sequences held in memory at once; each chunk is searched on its own with the
            whole database's ``Z`` and the hits are merged, as AF2's streamed search does.
    """

    iterations: int = 1
    e_value: float = 1e-4
    inc_e: float = 1e-4
    dom_e: float = 10.0
    incdom_e: float = 1e-3
    f1: float = 5e-4
    f2: float = 5e-5
    f3: float = 5e-7
    z: Optional[float] = None
    max_sequences: int = 10_000
    chunk_sequences: int = 200_000

    def pipeline_options(self, z: float) -> dict:
        return {
            "E": self.e_value,
            "incE": self.inc_e,
            "domE": self.dom_e,
            "incdomE": self.incdom_e,
            "F1": self.f1,
            "F2": self.f2,
            "F3": self.f3,
            "Z": float(z),
        }


HMMSEARCH_OPTIONS = {"F1": 0.1, "F2": 0.1, "F3": 0.1, "incE": 100.0, "E": 100.0, "domE": 100.0, "incdomE": 100.0}
MAX_HITS_BY_DATABASE = {"uniref90": 10_000, "mgnify": 501}


def require_pyhmmer():
    """The ``pyhmmer`` module, or :class:`SearchError` with the install command."""
    try:
        import pyhmmer  # optional: pyhmmer is not installed on Windows
    except ImportError:
        raise SearchError(
            "MSA/template search needs the 'pyhmmer' package (HMMER3 in Python): "
            "pip install pyhmmer  (it is a dependency of alphafold_mem on Linux and macOS)"
        ) from None
    return pyhmmer
