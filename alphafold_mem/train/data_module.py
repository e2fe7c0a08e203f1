"""LightningDataModule over the chain index of :mod:`alphafold_mem.data.dataset`.

Training draws are an endless, deterministic stream: draw ``k`` (counted over all ranks) picks
chain ``i ~ weights`` (AF2 Suppl. 1.2.5 sample weights) with ``default_rng([seed, k])`` and builds
its features with the dataset's random stream for "epoch" ``k`` (crop, MSA sampling, masking). A
draw is therefore a pure function of ``(seed, k)``: resuming only needs the number of batches
consumed (saved in the checkpoint), and the result is the same whatever the number of workers.
Rank ``r`` of ``W`` takes draws ``k = (b * W + r) * B + j`` for its batch ``b`` and slot ``j`` (:mod:`.draws`).

Data directory (``--data DIR``): either a chain index JSON (``DIR/index.json`` or
``DIR/chain_index/index.json``, as written by ``scripts/build_chain_index.py``) or raw files laid out
as ``DIR/{mmcif,pdb}/`` (structures, or DIR itself) and ``DIR/alignments/<pdbid>_<chain>/``; the
index and coordinate cache are then built once in ``DIR/.alphafold_mem_index/`` (reused by every run,
updated incrementally when structures are added; :func:`resolve_index`).

Chains whose PDB id is in ``TrainConfig.held_out`` (or that share a sequence with one) are kept
out of training and used for validation (full length, no cropping).

With ``DataOptions.val_data`` the validation chains come from that directory (or index) instead,
and training leaves out every chain whose sequence equals a validation chain's.

Sampling as published (:class:`DataOptions`, :mod:`alphafold_mem.data.sampling`): weights
``length factor / cluster size`` from a ``--cluster-file``; a self-distillation set
(``--distillation-dir``, laid out as a data directory, predicted structures with pLDDT in the B-factor
column) drawn with probability ``--distillation-prob`` per sample, its residues with pLDDT < 70 out of
the loss; chain filters by resolution, release date, chain list and obsolete ids. Templates
(:mod:`alphafold_mem.data.training_templates`) from each chain's hit file when
``--template-mmcif-dir`` is given and the model uses templates.

Workers: ``num_workers=None`` takes :func:`default_num_workers`; training and validation loaders use
the same number, and a draw does not depend on it.

At set-up the data left out (and why) is reported: one counted line per reason, the full list in
``<report_dir>/data_report.json`` (:mod:`.data_report`).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader

from ..config import ModelConfig
from ..data import ChainIndex, ProteinChainDataset, build_chain_index, collate
from ..data.chain_index import default_index_dir
from ..data.drops import drop
from ..data.sampling import (
    MIN_DISTILLATION_PLDDT,
    ChainFilters,
    cluster_sizes,
    read_chain_list,
    read_cluster_file,
)
from ..data.templates_from_hits import parse_obsolete
from ..data.training_templates import TemplateSource
from .config import TrainConfig
from .data_report import DataReport
from .draws import DrawLoader, Draws, DrawSampler

__all__ = ["AF2DataModule", "DataOptions", "default_num_workers", "resolve_index", "split_index"]


def default_num_workers(cpus: int | None = None) -> int:
    """DataLoader workers by default: ``min(4, cpus - 1)``, 0 on a one-CPU machine (the CPUs this
    process may use, ``os.sched_getaffinity``, else ``os.cpu_count``)."""
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cpus = os.cpu_count() or 1
    return max(0, min(4, cpus - 1))


@dataclass(frozen=True)
class DataOptions:
    """What ``alphafold-mem train`` reads besides ``--data`` and how it samples (one flag each).

    Attributes:
        val_data: validation data directory or index (``--val-data``); None: held-out ids.
        cluster_file: MMseqs2/OpenFold cluster file (``--cluster-file``); None: chains with the same
            sequence form a cluster.
        distillation_dir: self-distillation data directory (``--distillation-dir``).
        distillation_prob: probability of a draw from it (``--distillation-prob``; OpenFold 0.75).
        max_resolution, max_release_date, filter_file, obsolete, require_alignments: the chain
            filters (:class:`~alphafold_mem.data.sampling.ChainFilters`; ``obsolete`` is also
            used for template ids).
        template_mmcif_dirs, max_template_date: training templates
            (:class:`~alphafold_mem.data.training_templates.TemplateSource`).
    """

    val_data: str | None = None
    cluster_file: str | None = None
    distillation_dir: str | None = None
    distillation_prob: float = 0.75
    max_resolution: float = 9.0
    max_release_date: str | None = None
    filter_file: str | None = None
    obsolete: str | None = None
    require_alignments: bool = False
    template_mmcif_dirs: tuple = field(default_factory=tuple)
    max_template_date: str | None = None

    def __post_init__(self):
        if not 0.0 <= self.distillation_prob <= 1.0:
            raise ValueError(f"--distillation-prob {self.distillation_prob}: expected a probability in [0, 1]")

    def filters(self, obsolete: dict | None) -> ChainFilters:
        chains = None if self.filter_file is None else frozenset(read_chain_list(self.filter_file))
        return ChainFilters(
            max_resolution=self.max_resolution,
            max_release_date=self.max_release_date,
            chains=chains,
            obsolete=obsolete,
            require_alignments=self.require_alignments,
        )

    def templates(self, model_config: ModelConfig, obsolete: dict | None) -> TemplateSource | None:
        if not self.template_mmcif_dirs or not model_config.template.enabled:
            return None
        return TemplateSource(
            self.template_mmcif_dirs,
            self.max_template_date,
            obsolete or {},
            max_hits=model_config.template.max_templates,
        )


def resolve_index(data_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """The chain-index JSON for ``data_dir``: an existing one (``DIR`` itself, ``DIR/index.json``,
    ``DIR/chain_index/index.json``), else the one of ``DIR``'s own index folder
    (:func:`~alphafold_mem.data.chain_index.default_index_dir`: ``DIR/.alphafold_mem_index/``, the
    same for every ``--out``), built there or brought up to date (only new or changed structures are
    parsed). ``cache_dir`` is not used for raw directories (kept for callers)."""
    data_dir = Path(data_dir)
    if data_dir.is_file() and data_dir.suffix == ".json":
        return data_dir
    for cand in (data_dir / "index.json", data_dir / "chain_index" / "index.json"):
        if cand.is_file():
            return cand
    if not data_dir.is_dir():
        what = "chain index file" if data_dir.suffix == ".json" else "training data directory"
        raise FileNotFoundError(f"{what} not found: {data_dir}")
    index_dir = default_index_dir(data_dir)
    out = index_dir / "index.json"
    structures = [data_dir / d for d in ("mmcif", "pdb") if (data_dir / d).is_dir()] or [data_dir]
    alignments = data_dir / "alignments"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_chain_index(
            structures,
            alignments if alignments.is_dir() else None,
            out,
            cache_dir=index_dir / "cache",
            workers=default_num_workers() or 1,
        )
    return out


def split_index(index: ChainIndex, held_out: tuple[str, ...]) -> tuple[ChainIndex, ChainIndex]:
    """(train, held-out) indexes: held-out = chains of the listed PDB ids and every chain whose
    sequence equals one of theirs."""
    held = {h.lower() for h in held_out}
    held_seqs = {e["sequence"] for e in index.entries if e.get("pdb_id", "").lower() in held}
    train = [e for e in index.entries if e["sequence"] not in held_seqs]
    val = [e for e in index.entries if e["sequence"] in held_seqs]
    return (
        ChainIndex(root=index.root, entries=train, skipped=list(index.skipped)),
        ChainIndex(root=index.root, entries=val),
    )


class AF2DataModule(L.LightningDataModule):
    """Training (cropped, weighted draws) and validation (full chains) loaders.

    Args:
        data_dir: see the module docstring.
        model_config: crop size and MSA sizes come from ``model_config.data``.
        train_config: seed, batch size, held-out ids, number of validation chains.
        cache_dir: where to build the index if ``data_dir`` has none.
        max_steps: optimiser steps planned (sets the length of a loader pass; passes repeat).
        num_workers: DataLoader worker processes for training and validation (results do not depend
            on it); None: :func:`default_num_workers`.
        max_val_length: skip validation chains longer than this (residues).
        report_dir: where ``data_report.json`` goes (``None``: nowhere; the lines are still logged).
        log: receives the report lines (default: stderr).
        options: :class:`DataOptions` (sampling, filters, templates, validation data).

    Raises (at set-up):
        InputError: a file named by ``options`` cannot be read, or a date is not ``YYYY-MM-DD``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike,
        model_config: ModelConfig,
        train_config: TrainConfig,
        cache_dir: str | os.PathLike,
        max_steps: int = 1000,
        num_workers: int | None = 0,
        max_val_length: int = 400,
        report_dir: str | os.PathLike | None = None,
        log: Optional[Callable[[str], None]] = None,
        options: DataOptions | None = None,
    ):
        super().__init__()
        self.data_dir, self.cache_dir = Path(data_dir), Path(cache_dir)
        self.model_config, self.train_config = model_config, train_config
        self.num_workers = default_num_workers() if num_workers is None else num_workers
        self.max_steps, self.max_val_length = max_steps, max_val_length
        self.options = options or DataOptions()
        self.start_batch = 0
        self.train_set: Optional[ProteinChainDataset] = None
        self.val_set: Optional[ProteinChainDataset] = None
        self.distillation_set: Optional[ProteinChainDataset] = None
        self.index_path: Optional[Path] = None
        self.report_dir = None if report_dir is None else Path(report_dir)
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.report: Optional[DataReport] = None

    def prepare_data(self) -> None:
        self.index_path = resolve_index(self.data_dir, self.cache_dir)
        if self.options.val_data is not None:
            resolve_index(self.options.val_data, self.cache_dir / "validation")
        if self.options.distillation_dir is not None:
            resolve_index(self.options.distillation_dir, self.cache_dir / "distillation")

    def _indexes(self) -> tuple[ChainIndex, ChainIndex, ChainIndex]:
        """(all indexed, training, validation) chain indexes."""
        index = ChainIndex.load(self.index_path)
        if self.options.val_data is None:
            return (index, *split_index(index, self.train_config.held_out))
        val_idx = ChainIndex.load(resolve_index(self.options.val_data, self.cache_dir / "validation"))
        val_seqs = {e["sequence"] for e in val_idx.entries}
        train = [e for e in index.entries if e["sequence"] not in val_seqs]
        return index, ChainIndex(root=index.root, entries=train, skipped=list(index.skipped)), val_idx

    def setup(self, stage: Optional[str] = None) -> None:
        if self.train_set is not None:
            return
        self.index_path = self.index_path or resolve_index(self.data_dir, self.cache_dir)
        opts = self.options
        obsolete = parse_obsolete(opts.obsolete) if opts.obsolete else None
        filters = opts.filters(obsolete)
        templates = opts.templates(self.model_config, obsolete)
        clusters = cluster_sizes(read_cluster_file(opts.cluster_file)) if opts.cluster_file else None
        index, train_idx, val_idx = self._indexes()
        report = self.report = _split_report(index, val_idx, self.max_val_length, self.train_config.max_val_chains)
        if opts.val_data is not None:
            report.counts["validation indexed"] = len(val_idx.entries)
        val_idx.entries = [e for e in val_idx.entries if e.get("length", 0) <= self.max_val_length]
        val_idx.entries = val_idx.entries[: self.train_config.max_val_chains]
        common = dict(filters=filters, templates=templates)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # every entry left out is in the report below
            self.train_set = ProteinChainDataset(
                train_idx,
                self.model_config,
                mode="train",
                seed=self.train_config.seed,
                recycling_slices=self.model_config.num_recycles + 1,
                cluster_sizes=clusters,
                **common,
            )
            self.val_set = None
            val_left_out: list = []
            if val_idx.entries:  # the filters may leave none of the validation chains: then no validation
                val = ProteinChainDataset(
                    val_idx, self.model_config, mode="eval", seed=self.train_config.seed, allow_empty=True, **common
                )
                val_left_out = val.rejected
                self.val_set = val if len(val) else None
            if opts.distillation_dir is not None:
                dist_idx = ChainIndex.load(resolve_index(opts.distillation_dir, self.cache_dir / "distillation"))
                self.distillation_set = ProteinChainDataset(
                    dist_idx,
                    self.model_config,
                    mode="train",
                    seed=self.train_config.seed,
                    recycling_slices=self.model_config.num_recycles + 1,
                    templates=templates,
                    plddt_threshold=MIN_DISTILLATION_PLDDT,
                )
        report.add("dropped", self.train_set.rejected + val_left_out)
        report.add("notes", self.train_set.notes)
        report.counts.update(train=len(self.train_set), validation=len(self.val_set) if self.val_set else 0)
        if self.distillation_set is not None:
            dist = self.distillation_set
            report.add("dropped", [{**e, "reason": f"distillation: {e['reason']}"} for e in dist.rejected])
            report.counts.update(distillation=len(dist), distillation_indexed=len(dist.index.entries))
            report.notes.append(
                drop(
                    "self-distillation", str(opts.distillation_dir), f"drawn with probability {opts.distillation_prob}"
                )
            )
        if self._rank_world()[0] == 0:
            report.emit(self.log, None if self.report_dir is None else self.report_dir / "data_report.json")
            if self.val_set is None and val_left_out:
                self.log(
                    f"validation: the filters left out all {len(val_left_out)} validation chain(s) (see "
                    "data_report.json, --held-out, --val-data); no validation runs"
                )
            elif self.val_set is None:
                self.log("validation: no held-out chain is present (see --held-out, --val-data); no validation runs")

    def _rank_world(self) -> tuple[int, int]:
        """``(rank, world size)`` of the data-parallel replicas of the attached trainer, ``(0, 1)``
        without one: under DAP the devices of one group are one replica."""
        t = getattr(self, "trainer", None)
        if t is None:
            return 0, 1
        lm = t.lightning_module
        return (lm.dp_rank, lm.dp_size) if getattr(lm, "dap", 1) > 1 else (t.global_rank, t.world_size)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        sampler = DrawSampler(self.start_batch, max(1, self.max_steps), self.train_config.batch_size, rank, world)
        draws = Draws(self.train_set, self.train_config.seed, self.distillation_set, self.options.distillation_prob)
        loader = DrawLoader(
            draws,
            batch_size=self.train_config.batch_size,
            sampler=sampler,
            collate_fn=collate,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(0),  # never draw from the global RNG
            persistent_workers=self.num_workers > 0,
        )
        loader.position = lambda: self.state_dict()["batches_seen"]
        return loader

    def val_dataloader(self):
        if self.val_set is None:
            return []
        rank, world = self._rank_world()
        n = len(self.val_set)
        idx = list(range(rank, n, world)) or [rank % n]  # every rank needs at least one batch
        return DataLoader(
            torch.utils.data.Subset(self.val_set, idx),
            batch_size=1,
            collate_fn=collate,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(0),
            persistent_workers=self.num_workers > 0,
        )

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        lm = getattr(getattr(self, "trainer", None), "lightning_module", None)
        return {
            "batches_seen": int(getattr(lm, "batches_seen", self.start_batch)),
            "seed": self.train_config.seed,
            "batch_size": self.train_config.batch_size,
        }

    def load_state_dict(self, state: dict) -> None:
        self.start_batch = int(state["batches_seen"])


def _split_report(index: ChainIndex, val_idx: ChainIndex, max_val_length: int, max_val_chains: int) -> DataReport:
    """A :class:`DataReport` with the index's drops and notes and the validation split's choices."""
    report = DataReport()
    report.add_index(index)
    report.counts["indexed"] = len(index.entries)
    held = [drop("held out for validation", e["name"]) for e in val_idx.entries]
    too_long = [
        drop("validation chain longer than the limit", e["name"], f"{e.get('length')} > {max_val_length}")
        for e in val_idx.entries
        if e.get("length", 0) > max_val_length
    ]
    short = [e for e in val_idx.entries if e.get("length", 0) <= max_val_length]
    extra = [
        drop("validation chains beyond max_val_chains", e["name"], f"max_val_chains={max_val_chains}")
        for e in short[max_val_chains:]
    ]
    report.add("held_out", held + too_long + extra)
    return report
