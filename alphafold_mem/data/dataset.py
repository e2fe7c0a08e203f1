"""Training dataset over a directory of structures plus a directory of per-chain alignments.

Layout::

    <structures>/            *.cif, *.mmcif, *.pdb, *.ent (optionally .gz), searched recursively
    <alignments>/<pdbid>_<chain>/   one folder per chain (pdbid lower case, author chain id):
        *.a3m, *.sto          AF2/OpenFold (uniref90_hits.sto, bfd_uniclust_hits.a3m,
                              mgnify_hits.sto), ColabFold/Protenix (non_pairing.a3m) ...

Chains with identical SEQRES may share one folder (e.g. ``5eil_B`` -> ``5eil_A``): a chain without
its own folder uses any folder whose query equals its sequence. ``pairing.a3m`` (species-paired rows
for multimers) is ignored. Files are merged in AF2's order: UniRef90 (first 10,000 rows), BFD /
UniClust / other A3Ms, MGnify (first 501 rows), then any other alignment in name order.

The index (JSON, written once by ``scripts/build_chain_index.py``) lists every protein chain with
its sequence, resolution, release date, number of resolved residues and alignment folder, and
points to a per-chain ``.npz`` cache of the parsed coordinates so that training never re-parses
mmCIF. Paths in the index are relative to the index file.

Nothing is dropped without a record: unreadable structures, protein chains without modelled atoms,
duplicate chains, alignment folders that no chain uses and alignment files whose first row is not
the chain's sequence (the chain is kept without them) are listed in the index's ``skipped``
list with a ``reason`` (:mod:`.drops`); the parser's notes and warnings per structure go to its
``notes`` list. Robustness: required inputs (index, files it names) are validated when the dataset
is built (rejected entries are kept in ``rejected``, with reasons, and an index with nothing usable
fails with the counted reasons); an entry that fails to load later (unreadable structure, corrupt cache, bad
alignment) is skipped with
an :class:`~alphafold_mem.data.errors.InputWarning`, counted in ``num_skipped``, and replaced by the
next entry, so an epoch never ends early on bad data. Counters are per process (per DataLoader
worker).
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
import torch

from ..io import atomic_write
from .alignment_layout import alignment_files
from .drops import counted_lines, drop
from .errors import InputError, InputNote, warn_input
from .features import Sample, make_features
from .features.values import check_feature_values
from .msa import Msa, parse_msa
from .structure import ProteinChain
from .structure_io import STRUCTURE_SUFFIXES, read_structure

__all__ = ["ChainIndex", "build_chain_index", "ProteinChainDataset"]

INDEX_VERSION = 1

#: The shortest chain :class:`ProteinChainDataset` trains on by default: one residue has no residue
#: pairs (distogram, pair representation) to learn from.
MIN_CHAIN_LENGTH = 2


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


class ProteinChainDataset(torch.utils.data.Dataset):
    """Map-style dataset of training samples (:class:`~alphafold_mem.data.features.batch.Sample`).

    Args:
        index: a :class:`ChainIndex` or the path of its JSON file.
        config: ``ModelConfig`` (crop size, MSA sizes, masking).
        mode: ``"train"`` (crops, block deletion) or ``"eval"`` (full length).
        seed: base seed; sample ``i`` in epoch ``e`` uses ``default_rng([seed, e, i])``.
        max_resolution: drop chains with a resolution above this (Å; unknown passes), AF2 Suppl. 1.2.5.
        max_single_residue_fraction: drop chains where one residue type exceeds this fraction.
        min_resolved: drop chains with fewer resolved residues.
        min_length: drop chains with fewer residues, as ``"too short"`` (checked before the
            residue-type fraction, which says nothing about a chain of one or two residues).
        recycling_slices: ``None``, or ``R``: every sample carries a trailing recycling dim of size
            ``R`` with one MSA cluster draw per slice (see ``make_features``; training uses
            ``config.num_recycles + 1``).

    Raises:
        InputError: the index cannot be read, or no usable entry remains.
    """

    def __init__(
        self,
        index,
        config,
        *,
        mode: str = "train",
        seed: int = 0,
        max_resolution: float = 9.0,
        max_single_residue_fraction: float = 0.8,
        min_resolved: int = 1,
        recycling_slices: int | None = None,
        min_length: int = MIN_CHAIN_LENGTH,
    ):
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self.index = index if isinstance(index, ChainIndex) else ChainIndex.load(index)
        self.config = config
        self.mode = mode
        self.seed = seed
        self.recycling_slices = recycling_slices
        self.epoch = 0
        self.num_skipped = 0
        self.num_skipped_files = 0
        self._bad_files: set[Path] = set()  # alignments that failed at a draw (warned once each)
        self.entries = []
        self.rejected: list[dict] = []  # drop entries (.drops) of the index entries left out
        for entry in self.index.entries:
            found = self._reject(entry, max_resolution, max_single_residue_fraction, min_resolved, min_length)
            if found is not None:
                self.num_skipped += 1
                self.rejected.append(drop(found[0], entry.get("name", "?"), found[1]))
                warn_input(
                    f"skipping index entry: {found[1]}",
                    file=self.index.resolve(entry.get("structure")),
                    record=entry.get("name"),
                )
                continue
            self.entries.append(entry)
        if not self.entries:
            reasons = counted_lines(list(self.index.skipped) + self.rejected)
            raise InputError(
                f"no usable chains in the index ({len(self.index.entries)} indexed, "
                f"{self.num_skipped} left out here, {len(self.index.skipped)} skipped while indexing"
                + (f"; {'; '.join(reasons)}" if reasons else "")
                + ")"
            )

    def _reject(
        self, e: dict, max_res: float, max_frac: float, min_resolved: int, min_length: int
    ) -> tuple[str, str] | None:
        """``(reason, detail)`` (:mod:`.drops`) when the entry cannot be used, else None."""
        required = ("name", "chain_id", "structure", "sequence")
        if any(k not in e for k in required):
            return "missing index fields", f"missing fields {[k for k in required if k not in e]}"
        cache = self.index.resolve(e.get("cache"))
        structure = self.index.resolve(e["structure"])
        if not ((cache is not None and cache.is_file()) or structure.is_file()):
            return "structure file not found", f"structure file not found: {structure}"
        if e.get("alignment_dir") and not self.index.resolve(e["alignment_dir"]).is_dir():
            return "alignment folder not found", f"alignment folder not found: {self.index.resolve(e['alignment_dir'])}"
        if e.get("resolution") and e["resolution"] > max_res:
            return "resolution above the limit", f"resolution {e['resolution']} Å > {max_res} Å"
        seq = e["sequence"]
        if len(seq) < min_length:
            return "too short", f"{len(seq)} residue(s), fewer than {min_length}"
        if seq and max(seq.count(c) for c in set(seq)) / len(seq) > max_frac:
            return "one residue type dominates", f"one residue type makes up more than {max_frac:.0%} of the sequence"
        if e.get("num_resolved", min_resolved) < min_resolved:
            return "too few resolved residues", f"only {e.get('num_resolved')} resolved residues"
        return None

    def __len__(self) -> int:
        return len(self.entries)

    def set_epoch(self, epoch: int) -> None:
        """Change the random stream (crops, MSA sampling) for a new epoch."""
        self.epoch = int(epoch)

    def sample_weights(self) -> torch.Tensor:
        """AF2 Suppl. 1.2.5 sampling weights: ``max(min(N_res, 512), 256) / 512`` divided by the
        number of chains with the same sequence (a stand-in for 40 % identity clusters). Use with
        ``torch.utils.data.WeightedRandomSampler``."""
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e["sequence"]] = counts.get(e["sequence"], 0) + 1
        w = [max(min(len(e["sequence"]), 512), 256) / 512 / counts[e["sequence"]] for e in self.entries]
        return torch.tensor(w, dtype=torch.float64)

    def load_chain(self, entry: dict) -> ProteinChain:
        """The entry's chain from its ``.npz`` cache, else parsed from the structure file."""
        cache = self.index.resolve(entry.get("cache"))
        if cache is not None and cache.is_file():
            try:
                with np.load(cache) as z:
                    arrays = {k: z[k] for k in ("aatype", "atom37_positions", "atom37_mask")}
            except (OSError, ValueError, KeyError) as exc:
                raise InputError(f"corrupt chain cache: {exc}", file=cache, record=entry["name"]) from exc
            if len(arrays["aatype"]) != len(entry["sequence"]):
                raise InputError("cache length differs from the indexed sequence", file=cache, record=entry["name"])
            return ProteinChain(
                pdb_id=entry.get("pdb_id", ""),
                chain_id=entry["chain_id"],
                sequence=entry["sequence"],
                aatype=arrays["aatype"],
                atom37_positions=arrays["atom37_positions"],
                atom37_mask=arrays["atom37_mask"],
                b_factors=np.zeros_like(arrays["atom37_mask"]),
                resolution=entry.get("resolution"),
                release_date=entry.get("release_date"),
                method=entry.get("method", ""),
                path=str(self.index.resolve(entry["structure"])),
            )
        structure = read_structure(self.index.resolve(entry["structure"]))
        chain = structure.chain(entry["chain_id"], id_type="auth")
        if chain.sequence != entry["sequence"]:
            raise InputError(
                "structure sequence differs from the index (rebuild the index)", file=chain.path, record=entry["name"]
            )
        return chain

    def load_msas(self, entry: dict) -> list[Msa]:
        """The entry's alignments (AF2 order and caps). Files the index left out
        (``alignments_left_out``: first row not the chain's sequence, counted at start-up) are skipped
        silently; another bad file is skipped with one counted warning (once per file)."""
        folder = self.index.resolve(entry.get("alignment_dir"))
        if folder is None:
            return []
        msas = []
        left_out = {self.index.resolve(rel) for rel in entry.get("alignments_left_out", ())}
        for path, cap in alignment_files(folder):
            if path in left_out:  # counted once at start-up (the index's skipped list)
                continue
            try:
                msas.append(parse_msa(path, query=entry["sequence"], max_sequences=cap))
            except InputError as exc:
                if path in self._bad_files:
                    continue
                self._bad_files.add(path)
                self.num_skipped_files += 1
                warn_input(
                    f"skipping alignment ({self.num_skipped_files} skipped so far; warned once): {exc}",
                    file=path,
                    record=entry["name"],
                )
        return msas

    def _make(self, i: int) -> Sample:
        entry = self.entries[i]
        chain = self.load_chain(entry)
        rng = np.random.default_rng([self.seed, self.epoch, i])
        feats = make_features(
            chain,
            self.load_msas(entry),
            self.config,
            structure=chain,
            mode=self.mode,
            seed=rng,
            recycling_slices=self.recycling_slices,
        )
        check_feature_values(feats, record=entry["name"], file=chain.path)  # finite, masks 0/1, tokens in range
        return Sample(sample_id=entry["name"], features=feats)

    def __getitem__(self, i: int) -> Sample:
        n = len(self.entries)
        for attempt in range(n):
            j = (i + attempt) % n
            try:
                return self._make(j)
            except (InputError, OSError, ValueError, KeyError) as exc:
                self.num_skipped += 1
                warn_input(
                    f"skipping sample ({self.num_skipped} skipped so far): {exc}", record=self.entries[j]["name"]
                )
        raise RuntimeError(f"every one of the {n} entries failed to load")
