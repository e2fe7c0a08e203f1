"""Alignments of complexes from a search instead of ``--msa-dir``: :class:`ComplexSearch`, which
``predict_complexes`` asks once per complex for an alignment folder in the layout that
:func:`alphafold_mem.data.multimer_features.complex_msa_features` reads.

Each entity (identical chains share one) gets ``<out>/<complex>/msas/<complex>_<chain>/``
(``<chain>``: its first copy's id; AF2 writes ``msas/<chain>/`` likewise once per sequence) holding

* with ``msa_server`` (``--msa-server URL``): the server's unpaired A3Ms of the entity's sequence
  (:func:`~alphafold_mem.search.fetch_server_msa`, cached by sequence under ``<out>/msa_server/`` as for
  monomers; linked, or copied, into the folder) and, for a complex of two or more entities, the
  server's paired rows as ``prepaired.a3m`` (one paired-mode ticket for the complex's distinct
  sequences, :func:`~alphafold_mem.search.fetch_server_pairs`): the server pairs them by UniRef
  taxonomy, and the features take row ``k`` of every chain as one pair;
* with ``databases`` (``--db FASTA``): jackhmmer per database with AF2's settings
  (:func:`~alphafold_mem.search.search_target`, ``<db name>_hits.a3m``/``.sto`` and ``search.json``,
  reused by later runs) and, with ``uniprot_db`` (``--uniprot-db FASTA``), AF2's pairing search:
  jackhmmer against UniProt, at most :data:`UNIPROT_MAX_HITS` rows, kept as ``uniprot_hits.sto``
  (paired by species) with ``uniprot.json`` recording what was searched (reused when it matches).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..io import atomic_write
from ..search import (
    PUBLIC_SERVER,
    JackhmmerSettings,
    MsaServerOptions,
    SearchOptions,
    fetch_server_msa,
    fetch_server_pairs,
    search_target,
)
from ..search.alignments import write_stockholm
from ..search.jackhmmer import search_database
from ..search.msa_server import MODES, TERMS
from ..search.settings import SearchError

__all__ = ["ComplexSearch", "UNIPROT_MAX_HITS"]

#: Rows of the UniProt pairing search (AF2 ``uniprot_max_hits``).
UNIPROT_MAX_HITS = 50_000


@dataclass(frozen=True)
class ComplexSearch:
    """Where complexes without ``--msa-dir`` get their alignments (module docstring).

    Attributes:
        msa_server: the MSA server's base URL (``--msa-server``); msa_server_mode: ``env`` or ``all``;
            msa_server_pairing: the paired mode's strategy, ``greedy`` (ColabFold's default) or
            ``complete``; msa_server_options: further :class:`~alphafold_mem.search.MsaServerOptions` fields.
        databases: FASTA databases for the unpaired jackhmmer search (``--db``).
        uniprot_db: UniProt FASTA for the pairing search (``--uniprot-db``; needs ``databases``).
        cpus, iterations, max_sequences, z, progress: the search settings (as ``predict --db``).
        searched: the alignments were searched before this run (``predict --dap``'s launcher,
            :mod:`.complex_presearch`): :meth:`alignments` reads them and never searches.

    Raises:
        ValueError: both or neither of ``msa_server`` and ``databases``, ``uniprot_db`` without
            ``databases``, or a bad server URL, mode or pairing (one line).
    """

    msa_server: Optional[str] = None
    msa_server_mode: str = "env"
    msa_server_pairing: str = "greedy"
    msa_server_options: dict = field(default_factory=dict)
    databases: tuple = ()
    uniprot_db: Optional[str] = None
    cpus: int = 1
    iterations: int = 1
    max_sequences: int = 10_000
    z: Optional[float] = None
    progress: bool = True
    searched: bool = False

    def __post_init__(self):
        if self.uniprot_db is not None and not self.databases:
            raise ValueError("--uniprot-db is the pairing search of --db: give --db FASTA as well")
        if (self.msa_server is None) == (not self.databases):
            raise ValueError("a complex search needs --msa-server or --db (not both)")
        if self.msa_server is not None:
            self.server_options()  # a bad URL, mode or pairing is one line before any work

    def server_options(self) -> MsaServerOptions:
        return MsaServerOptions(
            self.msa_server, self.msa_server_mode, pairing=self.msa_server_pairing, **self.msa_server_options
        )

    def note_public_server(self, count: int, log: Callable[[str], None]) -> None:
        """One note naming ColabFold's terms when ``count`` complexes will ask its public server."""
        if count and self.msa_server is not None and self.msa_server.rstrip("/") == PUBLIC_SERVER:
            log(f"note: sending the sequences of {count} complex(es) to {PUBLIC_SERVER}: {TERMS}")

    def alignments(self, cx, out_dir, log: Callable[[str], None] = print) -> Path:
        """Search (or reuse) the alignments of complex ``cx``; returns its alignment root
        ``<out_dir>/<cx.name>/msas`` (one folder per entity, module docstring).

        Raises:
            SearchError: a failed ticket or search (one line; :class:`~alphafold_mem.search.MsaServerError`
                for the server).
            OSError: the folders cannot be written.
        """
        root = Path(out_dir) / cx.name / "msas"
        if self.searched:  # every rank of a DAP group reads what the launcher searched
            if not root.is_dir():
                raise SearchError(f"{root}: no alignments (the search before the DAP ranks did not write them)")
            return root
        folders = {eid: root / f"{cx.name}_{cx.chains_of(eid)[0].chain_id}" for eid in cx.entities}
        for folder in folders.values():  # what another route left there would be read too
            if self.msa_server is not None:
                shutil.rmtree(folder, ignore_errors=True)  # links to the cache only
            else:
                for name in ("prepaired.a3m", *{f for files in MODES.values() for f in files}):
                    (folder / name).unlink(missing_ok=True)
        if self.msa_server is not None:
            self._served(cx, folders, Path(out_dir) / "msa_server", log)
        else:
            self._searched(cx, folders, root, log)
        return root

    def _served(self, cx, folders: dict, cache: Path, log) -> None:
        options = self.server_options()
        for eid, folder in folders.items():
            name = f"{cx.name}_{cx.chains_of(eid)[0].chain_id}"
            files = fetch_server_msa(name, cx.entities[eid], cache, options, log=log)
            folder.mkdir(parents=True, exist_ok=True)
            for f in files:
                _link(f, folder / os.path.basename(f))
        if len(folders) > 1:  # homomers and monomers are not paired
            eids = list(folders)
            paired = fetch_server_pairs(cx.name, [cx.entities[e] for e in eids], cache, options, log=log)
            for eid, f in zip(eids, paired):
                _link(f, folders[eid] / "prepaired.a3m")

    def _searched(self, cx, folders: dict, root: Path, log) -> None:
        settings = JackhmmerSettings(iterations=self.iterations, max_sequences=self.max_sequences, z=self.z)
        options = SearchOptions(tuple(self.databases), None, settings, self.cpus, self.progress)
        if len(folders) > 1 and self.uniprot_db is None:
            log(f"note: {cx.name}: no --uniprot-db: no rows are paired across chains (AF2 pairs UniProt hits)")
        for eid, folder in folders.items():
            search_target(folder.name, cx.entities[eid], root, options, log=log)
            if self.uniprot_db is not None and len(folders) > 1:  # the pairing search: heteromers only
                self._uniprot(folder, cx.entities[eid], log)

    def _uniprot(self, folder: Path, sequence: str, log) -> None:
        """AF2's pairing search: jackhmmer against ``uniprot_db`` -> ``uniprot_hits.sto`` (reused when
        ``uniprot.json`` records the same query, database and settings)."""
        db = os.fspath(self.uniprot_db)
        if not os.path.isfile(db):
            raise SearchError(f"{db}: UniProt database (--uniprot-db) not found")
        settings = JackhmmerSettings(iterations=self.iterations, max_sequences=UNIPROT_MAX_HITS, z=self.z)
        st = os.stat(db)
        want = {
            "sequence": sequence.upper(),
            "database": {"path": os.path.abspath(db), "bytes": st.st_size, "mtime": int(st.st_mtime)},
            "settings": dataclasses.asdict(settings),
        }
        out, record = folder / "uniprot_hits.sto", folder / "uniprot.json"
        try:
            old = json.loads(record.read_text())
        except (OSError, ValueError):
            old = {}
        if out.is_file() and isinstance(old, dict) and all(old.get(k) == v for k, v in want.items()):
            log(f"search: {folder.name} vs UniProt: reusing {out} ({old.get('depth')} rows)")
            return
        label = f"{folder.name} vs {os.path.basename(db)}"
        hits = search_database(folder.name, sequence, db, settings, cpus=self.cpus, progress=self.progress, label=label)
        write_stockholm(out, hits.names, hits.rows, title=label)
        with atomic_write(record) as tmp, open(tmp, "w") as fh:
            json.dump({**want, "depth": hits.depth, "seconds": round(hits.seconds, 3)}, fh, indent=1)
        log(f"search: {label}: {hits.depth} rows (query included) in {hits.seconds:.1f} s -> {out} (pairing)")


def _link(source, dest: Path) -> None:
    """``dest`` the same file as ``source``: a hard link, or a copy across file systems."""
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, dest)
