"""Training dataset over a chain index (:mod:`.chain_index`).

Each entry's alignments are read from its folder: ``pairing.a3m`` (species-paired rows for
multimers) is ignored; files are merged in AF2's order: UniRef90 (first 10,000 rows), BFD /
UniClust / other A3Ms, MGnify (first 501 rows), then any other alignment in name order.

Robustness: required inputs (index, files it names) are validated when the dataset
is built (rejected entries are kept in ``rejected``, with reasons, and an index with nothing usable
fails with the counted reasons); an entry that fails to load later (unreadable structure, corrupt cache, bad
alignment) is skipped with
an :class:`~alphafold_mem.data.errors.InputWarning`, counted in ``num_skipped``, and replaced by the
next entry, so an epoch never ends early on bad data. Counters are per process (per DataLoader
worker).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .alignment_layout import alignment_files
from .chain_index import ChainIndex
from .drops import counted_lines, drop
from .errors import InputError, warn_input
from .features import Sample, make_features
from .features.values import check_feature_values
from .msa import Msa, parse_msa
from .structure import ProteinChain
from .structure_io import read_structure

__all__ = ["ProteinChainDataset"]

#: The shortest chain :class:`ProteinChainDataset` trains on by default: one residue has no residue
#: pairs (distogram, pair representation) to learn from.
MIN_CHAIN_LENGTH = 2


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
