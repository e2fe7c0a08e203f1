"""The search stage of one target: MSAs (jackhmmer per database) and template hits (hmmsearch against
a pdb_seqres file), written under ``<out>/<target>/`` in AF2/OpenFold's names and reused by later
runs.

Files per target::

    <out>/<id>/<db name>_hits.a3m   query first, best E-value first, deduplicated (what predict reads)
    <out>/<id>/<db name>_hits.sto   the same rows as Stockholm
    <out>/<id>/pdb_hits.sto         hmmsearch -A hits (AF2 v2.3 name), when a template database is given
    <out>/<id>/search.json          query, databases (size, mtime), settings, depth and seconds per search

``<db name>`` is the database file name without its suffixes (``uniref90.fasta`` -> ``uniref90``). A
search is reused when ``search.json`` records the same query, database file (path, size, mtime) and
settings and its outputs exist. The template profile is built from the first database's hits (AF2:
UniRef90's).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..data import parse_msa
from ..data.formats import FASTA, stem
from ..data.msa import Msa
from ..io import atomic_write
from .alignments import write_a3m, write_stockholm
from .hmmsearch import search_templates
from .jackhmmer import search_database
from .settings import JackhmmerSettings, SearchError

__all__ = ["SearchOptions", "SearchOutcome", "search_target", "database_name"]


@dataclass(frozen=True)
class SearchOptions:
    """What to search: ``databases`` (jackhmmer, FASTA), ``template_db`` (hmmsearch, pdb_seqres-style),
    ``settings`` (:class:`JackhmmerSettings`), ``cpus``, ``progress`` (tqdm bars)."""

    databases: tuple = ()
    template_db: Optional[str] = None
    settings: JackhmmerSettings = field(default_factory=JackhmmerSettings)
    cpus: int = 1
    progress: bool = True


@dataclass
class SearchOutcome:
    """``msa_files`` (A3M, in database order), ``template_hits`` (``.sto`` or None), ``reused`` (names of
    searches taken from an earlier run), ``record`` (the ``search.json`` content)."""

    msa_files: list
    template_hits: Optional[str]
    reused: list
    record: dict


def database_name(path) -> str:
    """``uniref90.fasta.gz`` -> ``uniref90``; ``pdb_seqres.txt`` -> ``pdb_seqres``: the file name without
    ``.gz`` and a FASTA suffix of :mod:`alphafold_mem.data.formats` or ``.txt`` (``pdb_seqres.txt``)."""
    base = stem(os.fspath(path), FASTA)
    if base.lower().endswith(".txt"):
        base = base[: -len(".txt")]
    return base or "db"


def _stamp(path: str) -> dict:
    st = os.stat(path)
    return {"path": os.path.abspath(path), "bytes": st.st_size, "mtime": int(st.st_mtime)}


def _load(path: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def search_target(
    name: str,
    sequence: str,
    out_dir,
    options: SearchOptions,
    *,
    log: Callable[[str], None] = print,
    overwrite: bool = False,
) -> SearchOutcome:
    """Run (or reuse) the searches of one target.

    Args:
        name: target id (names the folder); sequence: the query (``N_res``).
        out_dir: the run's output directory; files go to ``<out_dir>/<name>/``.
        options: :class:`SearchOptions`.
        log: receives one line per search (reused or run, depth, seconds).
        overwrite: search again even when ``search.json`` matches.

    Returns:
        :class:`SearchOutcome`.

    Raises:
        SearchError: pyhmmer missing, a database missing or unreadable.
    """
    folder = os.path.join(os.fspath(out_dir), name)
    os.makedirs(folder, exist_ok=True)
    record_path = os.path.join(folder, "search.json")
    old = {} if overwrite else _load(record_path)
    same_query = old.get("sequence") == sequence.upper()
    settings = dataclasses.asdict(options.settings)
    record = {"id": name, "sequence": sequence.upper(), "settings": settings, "msa": {}, "templates": None}
    names = [database_name(db) for db in options.databases]
    if len(set(names)) != len(names):
        raise SearchError(f"databases must have distinct file names (they name the outputs): {', '.join(names)}")
    msa_files, reused = [], []
    for db, db_name in zip(options.databases, names):
        db = os.fspath(db)
        if not os.path.isfile(db):
            raise SearchError(f"{db}: sequence database not found")
        a3m = os.path.join(folder, f"{db_name}_hits.a3m")
        sto = os.path.join(folder, f"{db_name}_hits.sto")
        prev = old.get("msa", {}).get(db_name) if same_query and old.get("settings") == settings else None
        if prev and prev.get("database") == _stamp(db) and os.path.isfile(a3m) and os.path.isfile(sto):
            record["msa"][db_name] = prev
            reused.append(db_name)
            log(f"search: {name} vs {db_name}: reusing {a3m} ({prev.get('depth')} rows)")
        else:
            hits = search_database(
                name,
                sequence,
                db,
                options.settings,
                cpus=options.cpus,
                progress=options.progress,
                label=f"{name} vs {db_name}",
            )
            write_a3m(a3m, hits.names, hits.rows)
            write_stockholm(sto, hits.names, hits.rows, title=f"{name} vs {db_name}")
            record["msa"][db_name] = {
                "database": _stamp(db),
                "depth": hits.depth,
                "searched": hits.searched,
                "z": hits.z,
                "seconds": round(hits.seconds, 3),
                "a3m": a3m,
                "sto": sto,
            }
            log(
                f"search: {name} vs {db_name}: {hits.depth} rows (query included) from {hits.searched} "
                f"sequences in {hits.seconds:.1f} s -> {a3m}"
            )
        msa_files.append(a3m)
    hits_path = None
    if options.template_db is not None:
        hits_path = _template_search(
            name, sequence, folder, msa_files, options, old if same_query else {}, record, reused, log
        )
    with atomic_write(record_path) as tmp, open(tmp, "w") as fh:
        json.dump(record, fh, indent=1)
    return SearchOutcome(msa_files, hits_path, reused, record)


def _template_search(name, sequence, folder, msa_files, options, old, record, reused, log) -> str:

    db = os.fspath(options.template_db)
    if not os.path.isfile(db):
        raise SearchError(f"{db}: template sequence database not found")
    out = os.path.join(folder, "pdb_hits.sto")
    source = msa_files[0] if msa_files else None
    prev = old.get("templates")
    want = {"database": _stamp(db), "profile_from": source}
    msa_unchanged = not (set(record["msa"]) - set(reused))  # the profile's MSA was not searched anew
    if prev and all(prev.get(k) == v for k, v in want.items()) and os.path.isfile(out) and msa_unchanged:
        record["templates"] = prev
        reused.append("templates")
        log(f"search: {name} templates: reusing {out} ({prev.get('hits')} hits)")
        return out
    msa = parse_msa(source, query=sequence) if source else _query_only(sequence)
    stats = search_templates(msa, db, out, cpus=options.cpus, name=name)
    record["templates"] = {**want, **stats, "hits_file": out}
    log(
        f"search: {name} templates: {stats['hits']} hits in {os.path.basename(db)} "
        f"({stats['searched']} chains, {stats['seconds']:.1f} s) -> {out}"
    )
    return out


def _query_only(sequence: str):

    return Msa((sequence.upper(),), np.zeros((1, len(sequence)), np.int32), ("query",))
