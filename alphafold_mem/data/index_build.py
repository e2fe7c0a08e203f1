"""The per-item work of :func:`~.chain_index.build_chain_index`, run in worker processes.

:func:`parse_structure` reads one structure file (notes and warnings captured, chains' coordinates
written to ``.npz`` caches) and returns a picklable record; :func:`first_row` reads the first row of
one alignment (a file, or a span of an alignment database) and returns its query or why it cannot be
read. :func:`mapper` runs either over a process pool (``workers > 1``) or in this process, in input
order, so the index does not depend on the number of workers. :class:`BuildState` keeps both kinds of
result between builds, keyed by path + size + mtime, so that a rebuild re-reads only what changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..io import atomic_write
from .errors import InputError, InputNote
from .msa import parse_msa
from .structure_io import read_structure

__all__ = ["BuildState", "first_row", "mapper", "parse_structure", "file_key"]

STATE_VERSION = 1


def file_key(path: str | os.PathLike) -> list:
    """``[size, mtime_ns]`` of a file (the incremental build's change test)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _cache_folder(path: Path, cache_dir: Path) -> Path:
    """One cache folder per structure file: its name plus a hash of its absolute path."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return cache_dir / f"{path.name}-{digest}"


def parse_structure(job: tuple[str, str | None]) -> dict:
    """Read one structure file; ``job`` = ``(path, cache_dir or None)``.

    Returns ``{"path", "key", "time", "worker": [pid, CPU s of that process so far], "notes":
    [{"message", "kind"}], "error", "reason", "dropped": [[chain, reason]], "chains": [{...chain
    fields, "cache": absolute .npz path or None}]}``.
    """
    path, cache_dir = Path(job[0]), job[1]
    t0 = time.perf_counter()
    structure = error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            structure = read_structure(path)
        except (InputError, OSError, ValueError) as exc:
            error = exc
    notes = [
        {"message": str(w.message), "kind": "note" if issubclass(w.category, InputNote) else "warning"} for w in caught
    ]
    record = {"path": str(path), "key": file_key(path), "notes": notes, "dropped": [], "chains": []}
    if structure is None:
        record.update(error=str(error), reason=getattr(error, "reason", str(error)))
        record["time"] = time.perf_counter() - t0
        record["worker"] = [os.getpid(), time.process_time()]
        return record
    record["dropped"] = [[c, r] for c, r in structure.dropped]
    folder = None if cache_dir is None else _cache_folder(path, Path(cache_dir))
    for chain in structure.chains.values():
        cache = None
        if folder is not None:
            cache = folder / f"{chain.chain_id}.npz"
            with atomic_write(cache) as tmp, open(tmp, "wb") as fh:
                np.savez(
                    fh, aatype=chain.aatype, atom37_positions=chain.atom37_positions, atom37_mask=chain.atom37_mask
                )
        record["chains"].append(
            {
                "name": chain.name,
                "pdb_id": chain.pdb_id,
                "chain_id": chain.chain_id,
                "cache": None if cache is None else str(cache),
                "sequence": chain.sequence,
                "length": len(chain),
                "num_resolved": chain.num_resolved,
                "resolution": chain.resolution,
                "release_date": chain.release_date,
                "method": chain.method,
                "modified": [list(m) for m in chain.modified],
            }
        )
    record["time"] = time.perf_counter() - t0
    record["worker"] = [os.getpid(), time.process_time()]
    return record


def first_row(job: tuple) -> tuple[str | None, str | None]:
    """``(query, None)`` or ``(None, reason)`` for one alignment: ``job`` = ``(path,)`` or ``(db, name,
    start, size)``. The query is the first row's match columns ('' for an empty file); only that row
    is read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file is a query-only MSA, fine
            if len(job) == 1:
                msa = parse_msa(job[0], max_sequences=1)
            else:
                msa = parse_msa(job[0], span=(job[2], job[3]), name=job[1], max_sequences=1)
    except InputError as exc:
        return None, exc.reason
    return msa.query, None


@contextlib.contextmanager
def mapper(workers: int) -> Iterator[Callable]:
    """``map(fn, items)`` in input order: over ``workers`` processes (fork where available) when
    ``workers > 1``, else in this process."""
    if workers <= 1:
        yield lambda fn, items: list(map(fn, items))
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(workers) as pool:

        def run(fn, items):
            items = list(items)
            if len(items) < 2:
                return list(map(fn, items))
            return pool.map(fn, items, chunksize=max(1, min(16, len(items) // (workers * 8))))

        yield run


class BuildState:
    """What a previous build read: structure records and alignment first rows, each with the
    ``[size, mtime_ns]`` it was read at. Stored beside the index as ``<index>.build.json``; start-up
    from the index never reads it."""

    def __init__(self, path: Path, cache_dir: str | None):
        self.path, self.cache_dir = path, cache_dir
        self.structures: dict[str, dict] = {}
        self.rows: dict[str, list] = {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if data.get("version") == STATE_VERSION and data.get("cache_dir") == cache_dir:
            self.structures = data.get("structures", {})
            self.rows = data.get("rows", {})

    def structure(self, path: Path) -> dict | None:
        """The stored record of ``path`` when the file and its caches are unchanged, else None."""
        rec = self.structures.get(str(path))
        try:
            if rec is None or rec["key"] != file_key(path):
                return None
        except OSError:
            return None
        if any(c["cache"] is not None and not os.path.isfile(c["cache"]) for c in rec["chains"]):
            return None
        return rec

    def row(self, key: str, stat: list) -> tuple | None:
        got = self.rows.get(key)
        return None if got is None or got[0] != stat else (got[1], got[2])

    def save(self, structures: dict, rows: dict) -> None:
        with atomic_write(self.path) as tmp:
            Path(tmp).write_text(
                json.dumps(
                    {"version": STATE_VERSION, "cache_dir": self.cache_dir, "structures": structures, "rows": rows}
                )
            )
