"""Sequence search with pyhmmer (HMMER3 in Python): MSAs by jackhmmer (:mod:`.jackhmmer`), template
hits by hmmsearch against a pdb_seqres file (:mod:`.hmmsearch`), both with AF2's settings
(:mod:`.settings`), the per-target search stage with its cache (:mod:`.stage`) that
``alphafold-mem search`` and ``alphafold-mem predict --db`` run, and MSAs from an MMseqs2 MSA server
(ColabFold's protocol, :mod:`.msa_server`) for ``predict --msa-server``. Sits above :mod:`alphafold_mem.data`
(it writes what the data readers read) and below :mod:`alphafold_mem.predict`.

The public names below load on first use (:mod:`alphafold_mem.lazy`): :mod:`.settings` (the settings
and the MSA server's constants) loads neither numpy nor pyhmmer, for the command line's parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # the names below, for type checkers and documentation tools
    from .msa_server import MsaServerError, MsaServerOptions, fetch_server_msa, fetch_server_pairs
    from .settings import HMMSEARCH_OPTIONS, PUBLIC_SERVER, JackhmmerSettings, SearchError
    from .stage import SearchOptions, SearchOutcome, database_name, search_target

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MsaServerError": ".msa_server",
        "MsaServerOptions": ".msa_server",
        "fetch_server_msa": ".msa_server",
        "fetch_server_pairs": ".msa_server",
        "HMMSEARCH_OPTIONS": ".settings",
        "PUBLIC_SERVER": ".settings",
        "JackhmmerSettings": ".settings",
        "SearchError": ".settings",
        "SearchOptions": ".stage",
        "SearchOutcome": ".stage",
        "database_name": ".stage",
        "search_target": ".stage",
    },
)

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
    "fetch_server_pairs",
]
