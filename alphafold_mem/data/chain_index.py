"""The training chain index: one JSON file listing every protein chain of a structure tree.

Layout (ours, and OpenFold's / OpenProteinSet's as they are)::

    <structures>/            *.cif, *.mmcif, *.pdb, *.ent (optionally .gz), searched recursively
                             (OpenFold: ``--mmcif-dir``)
    <alignments>/<pdbid>_<chain>/   one folder per chain (pdbid lower case, author chain id):
        *.a3m, *.sto          AF2/OpenFold (uniref90_hits.sto, bfd_uniclust_hits.a3m,
                              mgnify_hits.sto), ColabFold/Protenix (non_pairing.a3m) ...
    or an OpenFold alignment database (:mod:`.alignment_db`: ``.db`` shards + index JSON)
    duplicate_pdb_chains.txt  chains sharing one alignment (one group per line)
    chain_data_cache.json     {chain: {"seq", "resolution", "release_date", ...}} (OpenFold)
    mmcif_cache.json          {pdb id: {"release_date", "resolution", ...}} (OpenFold)

A chain's alignments are found without parsing any alignment: its own folder (or database entry),
else the folder of a chain listed with it in ``duplicate_pdb_chains.txt``, else the folder of a
chain with the same sequence (a sequence -> folder map built once from the indexed chains and the
chain data cache; the first folder in name order wins). Only folders that no indexed or cached chain
names are opened, for their first row, to extend that map. ``chain_data_cache.json`` and
``mmcif_cache.json`` fill a chain's resolution and release date where its file gives none.

The index (JSON, written by ``alphafold-mem index`` or ``scripts/build_chain_index.py``) lists every
protein chain with its sequence, resolution, release date, number of resolved residues and
alignment source, and points to a per-chain ``.npz`` cache of the parsed coordinates so that
training never re-parses mmCIF. Paths in the index are relative to the index file. The build runs
over ``workers`` processes (the index does not depend on their number) and is incremental: a
sidecar ``<index>.build.json`` keeps what each structure and alignment gave, keyed by path + size
+ mtime, so a rebuild after adding structures parses only those.

Nothing is dropped without a record: unreadable structures, protein chains without modelled atoms,
duplicate chains, alignment folders that no chain uses and alignment files whose first row is not
the chain's sequence (the chain is kept without them) are listed in the index's ``skipped``
list with a ``reason`` (:mod:`.drops`); the parser's notes and warnings per structure go to its
``notes`` list.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..io import atomic_write
from .alignment_db import AlignmentDb, db_alignments, read_duplicate_chains
from .alignment_layout import alignment_files
from .drops import drop
from .errors import InputError, InputNote, InputWarning, warn_input
from .index_build import BuildState, file_key, first_row, mapper, parse_structure
from .msa import query_problem
from .structure_io import STRUCTURE_SUFFIXES

__all__ = ["ChainIndex", "build_chain_index", "default_index_dir"]

#: The folder, inside a data directory, where ``train --data DIR`` keeps DIR's index and caches.
INDEX_DIR_NAME = ".alphafold_mem_index"

INDEX_VERSION = 1

#: The drop reason (:mod:`.drops`) of an alignment file whose first row is not the chain's sequence;
#: the chain itself is used, without that file.
_ALIGNMENT_REASON = "alignment query differs from the chain"


@dataclass
class ChainIndex:
    """A list of chain entries (dicts) loaded from / saved to a JSON index file.

    Each entry has: ``name`` (``<pdbid>_<chain>``), ``pdb_id``, ``chain_id``, ``structure`` (path),
    ``cache`` (``.npz`` path or None), ``alignment_dir`` (or None), ``sequence``, ``length``,
    ``num_resolved``, ``resolution`` (Å or None), ``release_date``, ``method``.
    """

    entries: list = field(default_factory=list)
    root: Path = field(default_factory=Path)
    skipped: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def resolve(self, rel: str | None) -> Path | None:
        """Absolute path of an index-relative path."""
        return None if rel is None else (self.root / rel)

    def save(self, path: str | os.PathLike) -> None:
        with atomic_write(path) as tmp:
            Path(tmp).write_text(
                json.dumps(
                    {"version": INDEX_VERSION, "chains": self.entries, "skipped": self.skipped, "notes": self.notes},
                    indent=1,
                )
            )

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ChainIndex":
        """Read an index; :class:`InputError` when missing, unreadable or of another version."""
        path = Path(path)
        if not path.is_file():
            raise InputError("chain index not found (build it with scripts/build_chain_index.py)", file=path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read chain index: {exc}", file=path) from exc
        if data.get("version") != INDEX_VERSION or not isinstance(data.get("chains"), list):
            raise InputError(f"not a version-{INDEX_VERSION} chain index", file=path)
        return cls(
            entries=data["chains"],
            root=path.parent.resolve(),
            skipped=data.get("skipped", []),
            notes=data.get("notes", []),
        )

    def __len__(self) -> int:
        return len(self.entries)


def default_index_dir(source: str | os.PathLike) -> Path:
    """Where the index of a data directory lives, whatever the run's ``--out``:
    ``<source>/.alphafold_mem_index/`` when ``source`` is writable, else
    ``~/.cache/alphafold_mem/indexes/<name>-<hash of its absolute path>/``."""
    source = Path(source).resolve()
    if os.access(source, os.W_OK):
        return source / INDEX_DIR_NAME
    digest = hashlib.sha1(str(source).encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "alphafold_mem" / "indexes" / f"{source.name}-{digest}"


def _rel(path, root: Path) -> str:
    return os.path.relpath(Path(path).resolve(), root)


def _iter_structures(dirs: Iterable[str | os.PathLike]) -> list[Path]:
    out = []
    for d in dirs:
        d = Path(d)
        if d.is_file():
            out.append(d.resolve())
            continue
        if not d.is_dir():
            raise InputError("structure directory not found", file=d)
        found = []
        for top, subdirs, files in os.walk(d):
            subdirs[:] = [s for s in subdirs if not s.startswith(".")]
            found.extend(Path(top, f) for f in files if f.lower().endswith(STRUCTURE_SUFFIXES))
        out.extend(p.resolve() for p in sorted(found))
    return out


def _read_json(path, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {what}: {exc}", file=path) from exc
    if not isinstance(data, dict):
        raise InputError(f"not an OpenFold {what} (a JSON object keyed by id)", file=path)
    return data


class _Sources:
    """Alignment sources by chain name: folders of ``alignment_dir`` and entries of an alignment db."""

    def __init__(self, alignment_dir, db: AlignmentDb | None, duplicates, chain_cache: dict):
        self.folders: dict[str, Path] = {}
        if alignment_dir is not None:
            adir = Path(alignment_dir)
            if not adir.is_dir():
                raise InputError("alignment directory not found", file=adir)
            with os.scandir(adir) as it:
                self.folders = {e.name: Path(e.path) for e in it if e.is_dir()}
        self.db = db
        self.groups: dict[str, list[str]] = {}
        for group in read_duplicate_chains(duplicates) if duplicates is not None else ():
            for c in group:
                self.groups.setdefault(c, group)
        self.by_seq: dict[str, str] = {}
        for key, info in chain_cache.items():
            if isinstance(info, dict) and info.get("seq") and self.has(key):
                self._claim(info["seq"], key)

    def has(self, key: str) -> bool:
        return key in self.folders or (self.db is not None and key in self.db)

    def _claim(self, seq: str, key: str) -> None:
        old = self.by_seq.get(seq)
        if old is None or key < old:
            self.by_seq[seq] = key

    def own(self, name: str, pdb_id: str, chain_id: str) -> str | None:
        for cand in (name, f"{pdb_id}_{chain_id}".lower(), f"{pdb_id.lower()}_{chain_id}"):
            if self.has(cand):
                return cand
        return next((c for c in self.groups.get(name, ()) if self.has(c)), None)

    def files(self, key: str) -> list[tuple]:
        """The alignments of a source: ``[(job for first_row, stat key, label)]``."""
        if key in self.folders:
            return [((str(p),), str(p), p) for p, _ in alignment_files(self.folders[key])]
        shard = self.db.shard(key)
        return [
            ((str(shard), n, start, size), f"{shard}:{start}:{size}", f"{shard}[{n}]")
            for n, start, size, _ in db_alignments(self.db.chains[key]["files"])
        ]

    def describe(self, key: str, root: Path) -> dict:
        if key in self.folders:
            return {"alignment_dir": _rel(self.folders[key], root)}
        entry = self.db.chains[key]
        return {"alignment_db": {"db": _rel(self.db.shard(key), root), "key": key, "files": entry["files"]}}


def _first_rows(jobs: list[tuple], state: BuildState, run, rows_out: dict) -> dict:
    """``stat key -> (query, reason)`` for every job, from the state or read (in parallel)."""
    out: dict[str, tuple] = {}
    todo = []
    for job, key in jobs:
        if key in out:
            continue
        try:
            stat = file_key(job[0]) + ([job[2], job[3]] if len(job) > 1 else [])
        except OSError:
            out[key] = (None, "file not found")
            continue
        got = state.row(key, stat)
        if got is None:
            todo.append((job, key, stat))
            out[key] = None
        else:
            out[key] = got
            rows_out[key] = [stat, *got]
    for (job, key, stat), got in zip(todo, run(first_row, [t[0] for t in todo])):
        out[key] = tuple(got)
        rows_out[key] = [stat, *got]
    return out


def build_chain_index(
    structure_dirs: Sequence[str | os.PathLike],
    alignment_dir: str | os.PathLike | None,
    out_path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    verbose: bool = False,
    workers: int = 1,
    alignment_index: str | os.PathLike | None = None,
    duplicate_chains: str | os.PathLike | None = None,
    chain_data_cache: str | os.PathLike | None = None,
    mmcif_cache: str | os.PathLike | None = None,
) -> ChainIndex:
    """Parse every new or changed structure once, cache its chains and write the JSON index.

    Args:
        structure_dirs: directories (searched recursively; hidden folders skipped) or files.
        alignment_dir: root of the per-chain alignment folders, or None.
        out_path: the index file to write (``<out_path>.build.json`` keeps the incremental state).
        cache_dir: where to write per-structure ``.npz`` coordinate caches (None: parse on load).
        verbose: print one line per structure parsed with its parse time.
        workers: processes that parse structures and read alignments' first rows.
        alignment_index: an OpenFold alignment database index (:mod:`.alignment_db`); its entries
            serve chains without a folder in ``alignment_dir``.
        duplicate_chains: OpenFold's ``duplicate_pdb_chains.txt``.
        chain_data_cache: OpenFold's ``chain_data_cache.json``.
        mmcif_cache: OpenFold's ``mmcif_cache.json``.

    Returns:
        The :class:`ChainIndex` (also saved). Unreadable structures, protein chains without modelled
        atoms, chains already indexed from another file (e.g. the same entry as .cif and .pdb; the
        first file in sorted order wins) and alignment folders no chain uses are listed in
        ``skipped`` with a ``reason`` and a warning, not fatal; the parser's warnings and notes per
        file (re-emitted for files parsed in this build) are kept in ``notes``. ``timings`` holds
        the parse time of each structure parsed in this build, ``worker_cpu`` the CPU seconds of
        each parsing process (pid) when it finished its last structure.

    Raises:
        InputError: a directory or one of OpenFold's files is missing or unreadable.
    """
    out_path = Path(out_path)
    root = out_path.parent.resolve()
    root.mkdir(parents=True, exist_ok=True)
    cache = None if cache_dir is None else str(Path(cache_dir).resolve())
    if cache is not None:
        Path(cache).mkdir(parents=True, exist_ok=True)
    chain_cache = _read_json(chain_data_cache, "chain data cache") if chain_data_cache is not None else {}
    mmcif_info = _read_json(mmcif_cache, "mmCIF cache") if mmcif_cache is not None else {}
    db = AlignmentDb(alignment_index) if alignment_index is not None else None
    sources = _Sources(alignment_dir, db, duplicate_chains, chain_cache)
    paths = _iter_structures(structure_dirs)
    state = BuildState(out_path.with_name(out_path.name + ".build.json"), cache)
    records: dict[str, dict] = {}
    todo = []
    for path in paths:
        rec = state.structure(path)
        if rec is None:
            todo.append(path)
        else:
            records[str(path)] = rec
    index = ChainIndex(root=root)
    timings = []
    worker_cpu: dict[int, float] = {}
    with mapper(workers) as run:
        for rec in run(parse_structure, [(str(p), cache) for p in todo]):
            records[rec["path"]] = rec
            timings.append(rec["time"])
            pid, cpu = rec.pop("worker")
            worker_cpu[pid] = max(worker_cpu.get(pid, 0.0), cpu)
            for n in rec["notes"]:  # passed on once, when parsed
                category = InputNote if n["kind"] == "note" else InputWarning
                warnings.warn(n["message"], category, stacklevel=2)
            if verbose:
                print(f"{rec['path']}: {len(rec['chains'])} protein chains, {rec['time']:.3f} s")
        chains = _assemble(index, paths, records, root, chain_cache, mmcif_info)
        rows_out: dict[str, list] = {}
        keys = {}
        for c in chains:
            keys[c["name"]] = sources.own(c["name"], c["pdb_id"], c["chain_id"])
            if keys[c["name"]] is not None:
                sources._claim(c["sequence"], keys[c["name"]])
        claimed = set(keys.values()) | set(sources.by_seq.values())
        orphans = sorted(k for k in sources.folders if k not in claimed)
        if orphans and any(v is None and c["sequence"] not in sources.by_seq for c, v in zip(chains, keys.values())):
            # folders no chain names: their first row extends the sequence map (read once, cached)
            jobs = {k: sources.files(k) for k in orphans}
            rows = _first_rows([(j, key) for fs in jobs.values() for j, key, _ in fs], state, run, rows_out)
            for k in orphans:
                query = next((rows[key][0] for _, key, _ in jobs[k] if rows[key][0]), None)
                if query:
                    sources._claim(query, k)
        for c in chains:
            if keys[c["name"]] is None:
                keys[c["name"]] = sources.by_seq.get(c["sequence"])
        used = sorted({k for k in keys.values() if k is not None})
        files = {k: sources.files(k) for k in used}
        rows = _first_rows([(j, key) for k in used for j, key, _ in files[k]], state, run, rows_out)
    for c in chains:
        key = keys[c["name"]]
        if key is None:
            index.entries.append(c)
            continue
        c.update(sources.describe(key, root))
        mismatched = []
        for _, stat_key, label in files[key]:
            query, reason = rows[stat_key]
            why = reason if query is None else (query_problem(query, c["sequence"]) if query else None)
            if why:
                shown = _rel(label, root) if isinstance(label, Path) else label
                warn_input(f"alignment left out for this chain: {why}", file=label, record=c["name"])
                mismatched.append(shown)
                name = label.name if isinstance(label, Path) else label.rsplit("[", 1)[-1].rstrip("]")
                index.skipped.append(drop(_ALIGNMENT_REASON, c["name"], f"{name}: {why}", alignment=shown))
        if mismatched:
            c["alignments_left_out"] = mismatched
        index.entries.append(c)
    used_set = set(used)
    for name, sub in sorted(sources.folders.items()):
        if name not in used_set:
            warn_input("alignment folder without a structure: no indexed chain uses it", file=sub)
            index.skipped.append(
                drop(
                    "alignment folder without a structure",
                    name,
                    "no indexed chain uses it",
                    alignment_dir=_rel(sub, root),
                )
            )
    if db is not None:
        unused = sorted(k for k in db.chains if k not in used_set and k not in sources.folders)
        for name in unused:
            index.skipped.append(drop("alignment folder without a structure", name, "no indexed chain uses it"))
        if unused:
            warn_input(f"{len(unused)} alignment database entries without a structure", file=db.path)
    index.timings = timings  # type: ignore[attr-defined]
    index.worker_cpu = worker_cpu  # type: ignore[attr-defined]  # pid -> CPU s when its last structure was done
    index.save(out_path)
    state.save({str(p): records[str(p)] for p in paths}, rows_out)
    return index


def _assemble(index: ChainIndex, paths, records, root: Path, chain_cache: dict, mmcif_info: dict) -> list[dict]:
    """Index entries (without alignment fields) in structure order; drops and notes recorded."""
    seen: dict[str, str] = {}
    out = []
    for path in paths:
        rec = records[str(path)]
        rel = _rel(path, root)
        index.notes.extend({"structure": rel, "message": n["message"], "kind": n["kind"]} for n in rec["notes"])
        if rec.get("error") is not None:
            warn_input(f"skipping unreadable structure: {rec['error']}", file=path)
            index.skipped.append(drop("unreadable structure", rel, rec["reason"], structure=rel, error=rec["error"]))
            continue
        for chain_id, reason in rec["dropped"]:
            pdb = rec["chains"][0]["pdb_id"] if rec["chains"] else path.name.split(".")[0]
            warn_input(f"skipping protein chain: {reason}", file=path, record=chain_id)
            index.skipped.append(
                drop(
                    "protein chain without modelled atoms",
                    f"{pdb}_{chain_id}",
                    reason,
                    structure=rel,
                    chain=chain_id,
                    error=reason,
                )
            )
        for chain in rec["chains"]:
            name = chain["name"]
            if name in seen:
                warn_input(
                    f"duplicate chain {name} (already indexed from {seen[name]}); skipped", file=path, record=name
                )
                index.skipped.append(
                    drop(
                        "duplicate chain",
                        name,
                        f"already indexed from {seen[name]}",
                        structure=rel,
                        chain=chain["chain_id"],
                        error=f"duplicate of {seen[name]}",
                    )
                )
                continue
            seen[name] = rel
            entry = {k: v for k, v in chain.items() if k != "cache"}
            entry["structure"] = rel
            entry["cache"] = None if chain["cache"] is None else _rel(chain["cache"], root)
            entry["alignment_dir"] = None
            info = chain_cache.get(name) or chain_cache.get(f"{chain['pdb_id'].lower()}_{chain['chain_id']}") or {}
            entry_info = mmcif_info.get(chain["pdb_id"]) or mmcif_info.get(chain["pdb_id"].lower()) or {}
            for field_name in ("resolution", "release_date"):
                if entry.get(field_name) is None:
                    entry[field_name] = info.get(field_name, entry_info.get(field_name))
            out.append(entry)
    return out
