"""Sequence search with pyhmmer (HMMER3 in Python): MSAs by jackhmmer (:mod:`.jackhmmer`), template
hits by hmmsearch against a pdb_seqres file (:mod:`.hmmsearch`), both with AF2's settings
(:mod:`.settings`), the per-target search stage with its cache (:mod:`.stage`) that
``alphafold-mem search`` and ``alphafold-mem predict --db`` run, and MSAs from an MMseqs2 MSA server
(ColabFold's protocol, :mod:`.msa_server`) for ``predict --msa-server``. Sits above :mod:`alphafold_mem.data`
(it writes what the data readers read) and below :mod:`alphafold_mem.predict`.
"""

from .msa_server import PUBLIC_SERVER, MsaServerError, MsaServerOptions, fetch_server_msa
from .settings import HMMSEARCH_OPTIONS, JackhmmerSettings, SearchError
from .stage import SearchOptions, SearchOutcome, database_name, search_target

__all__ = [
    "JackhmmerSettings",
    "HMMSEARCH_OPTIONS",
    "SearchError",
    "SearchOptions",
    "SearchOutcome",
    "search_target",
    "database_name",
    "MsaServerError",
    "MsaServerOptions",
    "PUBLIC_SERVER",
    "fetch_server_msa",
]
