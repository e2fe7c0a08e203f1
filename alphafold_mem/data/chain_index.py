"""The training chain index: one JSON file listing every protein chain of a structure tree.

Layout::

    <structures>/            *.cif, *.mmcif, *.pdb, *.ent (optionally .gz), searched recursively
    <alignments>/<pdbid>_<chain>/   one folder per chain (pdbid lower case, author chain id):
        *.a3m, *.sto          AF2/OpenFold (uniref90_hits.sto, bfd_uniclust_hits.a3m,
                              mgnify_hits.sto), ColabFold/Protenix (non_pairing.a3m) ...

Chains with identical SEQRES may share one folder (e.g. ``5eil_B`` -> ``5eil_A``): a chain without
its own folder uses any folder whose query equals its sequence.

The index (JSON, written once by ``alphafold-mem index`` or ``scripts/build_chain_index.py``) lists
every protein chain with its sequence, resolution, release date, number of resolved residues and
alignment folder, and points to a per-chain ``.npz`` cache of the parsed coordinates so that
training never re-parses mmCIF. Paths in the index are relative to the index file.

Nothing is dropped without a record: unreadable structures, protein chains without modelled atoms,
duplicate chains, alignment folders that no chain uses and alignment files whose first row is not
the chain's sequence (the chain is kept without them) are listed in the index's ``skipped``
list with a ``reason`` (:mod:`.drops`); the parser's notes and warnings per structure go to its
``notes`` list.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..io import atomic_write
from .alignment_layout import alignment_files
from .drops import drop
from .errors import InputError, InputNote, warn_input
from .msa import parse_msa
from .structure_io import STRUCTURE_SUFFIXES, read_structure

__all__ = ["ChainIndex", "build_chain_index"]

INDEX_VERSION = 1

#: The drop reason (:mod:`.drops`) of an alignment file whose first row is not the chain's sequence;
#: the chain itself is used, without that file.
_ALIGNMENT_REASON = "alignment query differs from the chain"


def _alignment_problems(folder: Path, sequence: str) -> list[tuple[Path, str]]:
    """``(file, reason)`` for each alignment of ``folder`` whose first row is not ``sequence`` or that
    cannot be read (its first record only)."""
    problems = []
    for path, _ in alignment_files(folder):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an empty file is a query-only MSA, fine
                parse_msa(path, query=sequence, max_sequences=1)
        except InputError as exc:
            problems.append((path, exc.reason))
    return problems


def _folder_query(folder: Path) -> str | None:
    """Query sequence (first row, insertions removed) of a folder's first alignment, or None."""
    for path, _ in alignment_files(folder):
        try:
            msa = parse_msa(path, max_sequences=1)
        except InputError:
            continue
        if msa.depth:
            return msa.query
    return None


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


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(Path(path).resolve(), root)


def _iter_structures(dirs: Iterable[str | os.PathLike]) -> list[Path]:
    out = []
    for d in dirs:
        d = Path(d)
        if d.is_file():
            out.append(d)
            continue
        if not d.is_dir():
            raise InputError("structure directory not found", file=d)
        out.extend(p for p in sorted(d.rglob("*")) if p.name.lower().endswith(STRUCTURE_SUFFIXES))
    return out


def build_chain_index(
    structure_dirs: Sequence[str | os.PathLike],
    alignment_dir: str | os.PathLike | None,
    out_path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    verbose: bool = False,
) -> ChainIndex:
    """Parse every structure once, cache its chains and write the JSON index.

    Args:
        structure_dirs: directories (searched recursively) or files.
        alignment_dir: root of the per-chain alignment folders, or None (single-sequence training).
        out_path: the index file to write.
        cache_dir: where to write ``<name>.npz`` coordinate caches (None: no cache, parse on load).
        verbose: print one line per structure with its parse time.

    Returns:
        The :class:`ChainIndex` (also saved). Unreadable structures, protein chains without modelled
        atoms, chains already indexed from another file (e.g. the same entry as .cif and .pdb; the
        first file in sorted order wins) and alignment folders no chain uses are listed in
        ``skipped`` with a ``reason`` and a warning, not fatal; the parser's warnings and notes per
        file (re-emitted) are kept in ``notes``.
    """
    out_path = Path(out_path)
    root = out_path.parent.resolve()
    root.mkdir(parents=True, exist_ok=True)
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    folders: dict[str, Path] = {}
    by_query: dict[str, Path] = {}
    if alignment_dir is not None:
        adir = Path(alignment_dir)
        if not adir.is_dir():
            raise InputError("alignment directory not found", file=adir)
        for sub in sorted(p for p in adir.iterdir() if p.is_dir()):
            folders[sub.name] = sub
    index = ChainIndex(root=root)
    seen: dict[str, str] = {}
    timings = []
    used_folders: set[Path] = set()
    for path in _iter_structures(structure_dirs):
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                structure = read_structure(path)
            except (InputError, OSError, ValueError) as exc:
                structure, error = None, exc
        for w in caught:  # kept in the index and passed on
            index.notes.append(
                {
                    "structure": _rel(path, root),
                    "message": str(w.message),
                    "kind": "note" if issubclass(w.category, InputNote) else "warning",
                }
            )
            warnings.warn(w.message, w.category, stacklevel=2)
        if structure is None:
            warn_input(f"skipping unreadable structure: {error}", file=path)
            index.skipped.append(
                drop(
                    "unreadable structure",
                    _rel(path, root),
                    getattr(error, "reason", str(error)),
                    structure=_rel(path, root),
                    error=str(error),
                )
            )
            continue
        for chain_id, reason in structure.dropped:
            warn_input(f"skipping protein chain: {reason}", file=path, record=chain_id)
            index.skipped.append(
                drop(
                    "protein chain without modelled atoms",
                    f"{structure.pdb_id}_{chain_id}",
                    reason,
                    structure=_rel(path, root),
                    chain=chain_id,
                    error=reason,
                )
            )
        timings.append(time.perf_counter() - t0)
        if verbose:
            print(f"{path}: {len(structure.chains)} protein chains, {timings[-1]:.3f} s")
        for chain in structure.chains.values():
            if chain.name in seen:
                warn_input(
                    f"duplicate chain {chain.name} (already indexed from {seen[chain.name]}); skipped",
                    file=path,
                    record=chain.name,
                )
                index.skipped.append(
                    drop(
                        "duplicate chain",
                        chain.name,
                        f"already indexed from {seen[chain.name]}",
                        structure=_rel(path, root),
                        chain=chain.chain_id,
                        error=f"duplicate of {seen[chain.name]}",
                    )
                )
                continue
            seen[chain.name] = _rel(path, root)
            folder = folders.get(chain.name) or folders.get(f"{chain.pdb_id}_{chain.chain_id}".lower())
            if folder is None and folders:
                if not by_query:  # read folder queries lazily, once
                    for sub in folders.values():
                        q = _folder_query(sub)
                        if q is not None:
                            by_query.setdefault(q, sub)
                folder = by_query.get(chain.sequence)
            mismatched: list[str] = []
            if folder is not None:
                used_folders.add(folder)
                for bad, why in _alignment_problems(folder, chain.sequence):
                    warn_input(f"alignment left out for this chain: {why}", file=bad, record=chain.name)
                    mismatched.append(_rel(bad, root))
                    index.skipped.append(
                        drop(_ALIGNMENT_REASON, chain.name, f"{bad.name}: {why}", alignment=_rel(bad, root))
                    )
            cache = None
            if cache_dir is not None:
                cache = Path(cache_dir) / f"{chain.name}.npz"
                with atomic_write(cache) as tmp, open(tmp, "wb") as fh:
                    np.savez(
                        fh, aatype=chain.aatype, atom37_positions=chain.atom37_positions, atom37_mask=chain.atom37_mask
                    )
            index.entries.append(
                {
                    "name": chain.name,
                    "pdb_id": chain.pdb_id,
                    "chain_id": chain.chain_id,
                    "structure": _rel(path, root),
                    "cache": None if cache is None else _rel(cache, root),
                    "alignment_dir": None if folder is None else _rel(folder, root),
                    "sequence": chain.sequence,
                    "length": len(chain),
                    "num_resolved": chain.num_resolved,
                    "resolution": chain.resolution,
                    "release_date": chain.release_date,
                    "method": chain.method,
                    "modified": [list(m) for m in chain.modified],
                    **({"alignments_left_out": mismatched} if mismatched else {}),
                }
            )
    for name, sub in folders.items():
        if sub not in used_folders:
            warn_input("alignment folder without a structure: no indexed chain uses it", file=sub)
            index.skipped.append(
                drop(
                    "alignment folder without a structure",
                    name,
                    "no indexed chain uses it",
                    alignment_dir=_rel(sub, root),
                )
            )
    index.timings = timings  # type: ignore[attr-defined]
    index.save(out_path)
    return index
