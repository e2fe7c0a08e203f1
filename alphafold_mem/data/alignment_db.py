"""OpenFold's alignment database: per-chain alignment folders concatenated into ``.db`` shards.

Layout (OpenFold ``scripts/alignment_db_scripts/create_alignment_db_sharded.py``)::

    <out>/<name>_0.db, <name>_1.db, ...    the bytes of every file of every chain folder, back to back
    <out>/<name>.index                     JSON {chain: {"db": "<name>_k.db",
                                                         "files": [[file name, start, size], ...]}}

``db`` names a shard in the index's folder. With a ``duplicate_pdb_chains.txt`` (one line per group
of chains with identical sequences, space separated) every chain of a group without its own folder
points at the entry of the group's first chain that has one (OpenFold's "super index"). A file is
read by seek (:func:`alphafold_mem.data.msa.parse_msa` with ``span``), so training opens one shard
instead of 3-4 files among millions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from ..io import atomic_write
from .alignment_layout import alignment_names
from .errors import InputError
from .msa import Msa, parse_msa

__all__ = ["AlignmentDb", "db_alignments", "read_db_msa", "read_duplicate_chains", "write_alignment_db"]


def read_duplicate_chains(path: str | os.PathLike) -> list[list[str]]:
    """Groups of chain names from an OpenFold ``duplicate_pdb_chains.txt`` (one group per line).

    Raises:
        InputError: the file cannot be read.
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read duplicate chains file: {exc}", file=path) from exc
    return [line.split() for line in text.splitlines() if line.strip()]


def write_alignment_db(
    alignment_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    name: str = "alignment_db",
    shards: int = 1,
    duplicate_chains: str | os.PathLike | None = None,
) -> Path:
    """Concatenate every chain folder of ``alignment_dir`` into ``shards`` ``.db`` files plus an index.

    Folders are taken in name order and dealt to shards in turn; a folder's files in name order.
    Each shard and the index are written to a temporary name and renamed when complete.

    Args:
        alignment_dir: ``<alignment_dir>/<pdbid>_<chain>/`` folders (any files in them are stored).
        out_dir: where ``<name>_<k>.db`` and ``<name>.index`` go (created).
        name: the database name.
        shards: number of ``.db`` files (>= 1).
        duplicate_chains: OpenFold's ``duplicate_pdb_chains.txt``: chains of a group without their own
            folder are added to the index with the entry of the group's first chain that has one.

    Returns:
        The index path.

    Raises:
        InputError: ``alignment_dir`` is not a directory or holds no chain folder, ``shards`` < 1,
            ``duplicate_chains`` or a file cannot be read (the duplicates file is read before any shard
            is written).
    """
    src, out = Path(alignment_dir), Path(out_dir)
    if not src.is_dir():
        raise InputError("alignment directory not found", file=src)
    if shards < 1:
        raise InputError(f"--shards {shards}: expected at least 1")
    groups = read_duplicate_chains(duplicate_chains) if duplicate_chains is not None else []  # before any work
    folders = sorted(p for p in src.iterdir() if p.is_dir())
    if not folders:
        raise InputError("no alignment folders (<pdbid>_<chain>/) in this directory", file=src)
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, dict] = {}
    for k in range(shards):
        db_name = f"{name}_{k}.db"
        with atomic_write(out / db_name) as tmp, open(tmp, "wb") as fh:
            offset = 0
            for folder in folders[k::shards]:
                files = []
                for f in sorted(p for p in folder.iterdir() if p.is_file()):
                    try:
                        data = f.read_bytes()
                    except OSError as exc:
                        raise InputError(f"cannot read alignment file: {exc.strerror or exc}", file=f) from exc
                    fh.write(data)
                    files.append([f.name, offset, len(data)])
                    offset += len(data)
                index[folder.name] = {"db": db_name, "files": files}
    for group in groups:
        rep = next((c for c in group if c in index), None)
        if rep is not None:
            for c in group:
                index.setdefault(c, index[rep])
    index_path = out / f"{name}.index"
    with atomic_write(index_path) as tmp:
        Path(tmp).write_text(json.dumps(index, indent=1, sort_keys=True))
    return index_path


class AlignmentDb:
    """An OpenFold alignment database index, read once; shards are resolved beside the index file.

    Args:
        index_path: the index JSON (``<name>.index``).
        db_dir: the folder of the ``.db`` shards (default: the index's folder).

    Raises:
        InputError: the index cannot be read or is not ``{chain: {"db", "files"}}``, or a shard it
            names is not in ``db_dir``.
    """

    def __init__(self, index_path: str | os.PathLike, db_dir: str | os.PathLike | None = None):
        self.path = Path(index_path)
        self.db_dir = Path(db_dir) if db_dir is not None else self.path.parent
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read alignment database index: {exc}", file=self.path) from exc
        if not isinstance(data, dict) or any(
            not isinstance(v, dict) or "db" not in v or "files" not in v for v in data.values()
        ):
            raise InputError(
                'not an OpenFold alignment database index ({chain: {"db": ..., "files": [...]}})', file=self.path
            )
        self.chains: dict[str, dict] = data
        missing = sorted(db for db in {v["db"] for v in data.values()} if not (self.db_dir / db).is_file())
        if missing:
            raise InputError(
                f"alignment database shard(s) named by the index not found in {self.db_dir}: "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; copy them beside the index "
                "or give their folder",
                file=self.path,
            )

    def __contains__(self, chain: str) -> bool:
        return chain in self.chains

    def __len__(self) -> int:
        return len(self.chains)

    def shard(self, chain: str) -> Path:
        """The ``.db`` file holding ``chain``'s alignments."""
        return self.db_dir / self.chains[chain]["db"]


def db_alignments(files) -> list[tuple[str, int, int, Optional[int]]]:
    """``(name, start, size, row cap)`` of the MSA files among a chain's ``files`` (``[[name, start,
    size], ...]``), in AF2 merge order (:func:`~.alignment_layout.alignment_names`)."""
    where = {f[0]: (int(f[1]), int(f[2])) for f in files}
    return [(n, *where[n], cap) for n, cap in alignment_names(where)]


def read_db_msa(db: str | os.PathLike, name: str, start: int, size: int, **kwargs) -> Msa:
    """One stored alignment (``name`` at bytes ``start``..``start + size`` of ``db``); ``kwargs`` as
    :func:`~.msa.parse_msa` (``query``, ``max_sequences``)."""
    return parse_msa(db, span=(start, size), name=name, **kwargs)
