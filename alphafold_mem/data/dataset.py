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

Sampling as published (:mod:`.sampling`): chain filters (:class:`~.sampling.ChainFilters`), weights
``length factor / cluster size`` from a cluster file, self-distillation structures with residues of
pLDDT < 70 masked out of the loss. Templates (:mod:`.training_templates`) from each chain's hit file
(in its alignment folder or the alignment database) when a
:class:`~.training_templates.TemplateSource` is given and the model uses templates; their
random draws use their own stream, ``default_rng([seed, e, i, 1])``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from .alignment_db import db_alignments
from .alignment_layout import alignment_files
from .chain_index import ChainIndex
from .drops import counted_lines, drop
from .errors import InputError, warn_input
from .features import Sample, make_features
from .features.values import check_feature_values
from .msa import Msa, parse_msa
from .sampling import NO_ALIGNMENT_REASON, ChainFilters, has_alignments, length_factor, mask_low_plddt
from .structure import ProteinChain
from .structure_io import read_structure
from .training_templates import HitFile, TemplateSource, find_hit_file, find_stored_hit_file, training_templates

__all__ = ["ProteinChainDataset"]

#: The shortest chain :class:`ProteinChainDataset` trains on by default: one residue has no residue
#: pairs (distogram, pair representation) to learn from.
MIN_CHAIN_LENGTH = 2

#: Template structures kept parsed per process (cleared when full).
_TEMPLATE_CACHE_SIZE = 128


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
        filters: :class:`~.sampling.ChainFilters` (its ``max_resolution`` replaces the argument);
            chains kept without an alignment folder are listed in ``notes``.
        templates: :class:`~.training_templates.TemplateSource`, or None (no templates; the model's
            template stack, if enabled, gets one masked placeholder).
        cluster_sizes: chain id -> size of its cluster (:func:`~.sampling.cluster_sizes`); None:
            chains with the same sequence form a cluster.
        plddt_threshold: self-distillation: residues whose pLDDT (B-factor column) is below this leave
            the loss; the structure file is read at every draw (the coordinate cache has no B-factors).
        allow_empty: no usable entry is not an error (a validation set the filters emptied); the
            dataset then has length 0 and ``rejected`` says why.

    Raises:
        InputError: the index cannot be read, or no usable entry remains (unless ``allow_empty``).
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
        filters: ChainFilters | None = None,
        templates: TemplateSource | None = None,
        cluster_sizes: dict | None = None,
        plddt_threshold: float | None = None,
        allow_empty: bool = False,
    ):
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self.index = index if isinstance(index, ChainIndex) else ChainIndex.load(index)
        self.config = config
        self.mode = mode
        self.seed = seed
        self.recycling_slices = recycling_slices
        self.templates = templates if templates is not None and config.template.enabled else None
        self.cluster_sizes = cluster_sizes
        self.plddt_threshold = plddt_threshold
        self.epoch = 0
        self.num_skipped = 0
        self.num_skipped_files = 0
        self._bad_files: set[Path] = set()  # alignments that failed at a draw (warned once each)
        self._template_cache: dict = {}  # pdb id -> parsed template structure
        self.entries = []
        self.rejected: list[dict] = []  # drop entries (.drops) of the index entries left out
        self.notes: list[dict] = []  # chains kept with a remark (no alignment folder, no cluster)
        if filters is not None:
            max_resolution = filters.max_resolution
        for entry in self.index.entries:
            found = self._reject(entry, max_resolution, max_single_residue_fraction, min_resolved, min_length)
            if found is None and filters is not None:
                found = filters.reason(entry)
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
            self.notes.extend(self._remarks(entry, filters))
        if not self.entries and not allow_empty:
            reasons = counted_lines(list(self.index.skipped) + self.rejected)
            raise InputError(
                f"no usable chains in the index ({len(self.index.entries)} indexed, "
                f"{self.num_skipped} left out here, {len(self.index.skipped)} skipped while indexing"
                + (f"; {'; '.join(reasons)}" if reasons else "")
                + ")"
            )

    def _remarks(self, entry: dict, filters: ChainFilters | None) -> list[dict]:
        """Report notes of a chain that is used (:mod:`.drops` entries)."""
        name, out = entry.get("name", "?"), []
        if filters is not None and not has_alignments(entry):
            out.append(drop(NO_ALIGNMENT_REASON, name, "trained from its sequence alone"))
        if self.cluster_sizes is not None and name not in self.cluster_sizes:
            out.append(drop("not in the cluster file", name, "sampled as a cluster of its own"))
        if self.templates is not None and self.hit_file(entry) is None:
            out.append(drop("no template hit file", name, "trained without templates"))
        return out

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
        if e.get("alignment_db") and not self.index.resolve(e["alignment_db"]["db"]).is_file():
            return (
                "alignment folder not found",
                f"alignment database not found: {self.index.resolve(e['alignment_db']['db'])}",
            )
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
        """AF2 Suppl. 1.2.5 sampling weights: ``max(min(N_res, 512), 256) / 512`` divided by the size
        of the chain's cluster (``cluster_sizes``: the cluster file's, a chain in none alone), or
        without a cluster file by the number of chains with the same sequence. Use with
        ``torch.utils.data.WeightedRandomSampler``."""
        if self.cluster_sizes is not None:
            sizes = [self.cluster_sizes.get(e["name"], 1) for e in self.entries]
        else:
            counts: dict[str, int] = {}
            for e in self.entries:
                counts[e["sequence"]] = counts.get(e["sequence"], 0) + 1
            sizes = [counts[e["sequence"]] for e in self.entries]
        w = [length_factor(len(e["sequence"])) / n for e, n in zip(self.entries, sizes)]
        return torch.tensor(w, dtype=torch.float64)

    def load_chain(self, entry: dict) -> ProteinChain:
        """The entry's chain from its ``.npz`` cache, else parsed from the structure file."""
        cache = self.index.resolve(entry.get("cache"))
        if cache is not None and cache.is_file() and self.plddt_threshold is None:
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
        if self.plddt_threshold is not None:  # self-distillation: low-confidence residues leave the loss
            mask, _ = mask_low_plddt(chain.atom37_mask, chain.b_factors, self.plddt_threshold)
            chain = dataclasses.replace(chain, atom37_mask=mask)
        return chain

    def _alignments(self, entry: dict) -> list[tuple[object, dict, int | None]]:
        """``(label, parse_msa arguments, row cap)`` of the entry's alignments in AF2 order: files of its
        folder, or spans of an alignment database (:mod:`.alignment_db`); the same labels as the
        index's ``alignments_left_out``."""
        db = entry.get("alignment_db")
        if db:
            shard = self.index.resolve(db["db"])
            return [
                (f"{db['db']}[{n}]", {"path": shard, "span": (start, size), "name": n}, cap)
                for n, start, size, cap in db_alignments(db["files"])
            ]
        folder = self.index.resolve(entry.get("alignment_dir"))
        if folder is None:
            return []
        return [(path, {"path": path}, cap) for path, cap in alignment_files(folder)]

    def load_msas(self, entry: dict) -> list[Msa]:
        """The entry's alignments (AF2 order and caps), from its folder or the alignment database.
        Files the index left out (``alignments_left_out``: first row not the chain's sequence, counted
        at start-up) are skipped silently; another bad file is skipped with one counted warning (once
        per file)."""
        msas = []
        left_out = {self.index.resolve(rel) for rel in entry.get("alignments_left_out", ())}
        left_out |= set(entry.get("alignments_left_out", ()))
        for label, where, cap in self._alignments(entry):
            if label in left_out:  # counted once at start-up (the index's skipped list)
                continue
            try:
                msas.append(parse_msa(**where, query=entry["sequence"], max_sequences=cap))
            except InputError as exc:
                if label in self._bad_files:
                    continue
                self._bad_files.add(label)
                self.num_skipped_files += 1
                warn_input(
                    f"skipping alignment ({self.num_skipped_files} skipped so far; warned once): {exc}",
                    file=where["path"],
                    record=entry["name"],
                )
        return msas

    def hit_file(self, entry: dict) -> HitFile | None:
        """The entry's template hit file (:mod:`.training_templates`): in its alignment folder, or among
        its files in the alignment database; None without one."""
        db = entry.get("alignment_db")
        if db:
            return find_stored_hit_file(self.index.resolve(db["db"]), db["files"])
        path = find_hit_file(self.index.resolve(entry.get("alignment_dir")))
        return None if path is None else HitFile(path, path.name)

    def load_templates(self, entry: dict, i: int) -> list:
        """The entry's templates for this draw (:func:`~.training_templates.training_templates`; its
        own random stream), ``[]`` without a template source or hit file."""
        if self.templates is None:
            return []
        if len(self._template_cache) > _TEMPLATE_CACHE_SIZE:
            self._template_cache.clear()
        rng = np.random.default_rng([self.seed, self.epoch, i, 1])
        hit_file = self.hit_file(entry)
        if hit_file is None:
            return []
        templates, _ = training_templates(
            entry["sequence"],
            hit_file,
            entry.get("release_date"),
            self.templates,
            train=self.mode == "train",
            rng=rng,
            structure_cache=self._template_cache,
            log=lambda line: self._template_warning(line, hit_file, entry["name"]),
        )
        return templates

    def _template_warning(self, line: str, hit_file: HitFile, name: str) -> None:
        """An unreadable hit file: warned once per file (dropped hits are not warned)."""
        if line.startswith("warning:") and hit_file not in self._bad_files:
            self._bad_files.add(hit_file)
            warn_input(line.removeprefix("warning: "), file=str(hit_file), record=name)

    def _make(self, i: int) -> Sample:
        entry = self.entries[i]
        chain = self.load_chain(entry)
        rng = np.random.default_rng([self.seed, self.epoch, i])
        feats = make_features(
            chain,
            self.load_msas(entry),
            self.config,
            structure=chain,
            templates=self.load_templates(entry, i),
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
