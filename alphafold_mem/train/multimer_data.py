"""Training data for the multimer presets: complexes from mmCIF entries (AF2-Multimer, Evans et al. 2022).

``--data DIR`` holds ``DIR/mmcif/*.cif[.gz]`` (or the files directly) and optionally
``DIR/alignments/<pdbid>_<chain>/`` (OpenFold's layout); every entry goes through
:func:`alphafold_mem.data.complex_examples.load_complex_examples` (filters, counted reasons) and each
chain without an alignment folder trains on its sequence alone (counted as a note).

Draw ``k`` (over all ranks, :mod:`.draws`' numbering) picks a chain or an interface with
``default_rng([seed, 7, k])``, weighted by chain and interface cluster
(:mod:`alphafold_mem.data.complex_sampling`; clusters from ``--cluster-file``, else each chain its
own), and builds the sample of the complex holding it with ``default_rng([seed, 13, k])``
(:func:`~alphafold_mem.data.multimer_training.make_complex_training_features`: crop, MSA sampling,
masking): a pure function of ``(seed, k)``, so resuming needs only the number of batches consumed.
Each sample carries its complex's whole ground truth (:class:`ComplexSample`) for the permutation
alignment in the training step.

Validation: the complexes whose PDB id is in ``TrainConfig.held_out``, whole (no crop); when none of
them is a complex, the first ``max_val_chains`` training complexes, whole (a measure of fit, said
at start-up).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..config import ModelConfig
from ..data import Batch, collate
from ..data.complex_examples import ComplexExample, ComplexFilters, load_complex_examples
from ..data.complex_sampling import ComplexSampler, interface_pairs, sampling_items
from ..data.drops import counted_lines, drop
from ..data.multimer_crop import MultimerCrop
from ..data.multimer_features import entity_folder
from ..data.multimer_training import complex_raw_features, make_complex_training_features
from ..data.sampling import read_cluster_file
from .config import TrainConfig
from .draws import DrawLoader, DrawSampler

__all__ = ["ComplexSample", "ComplexBatch", "collate_complexes", "ComplexDraws", "MultimerDataModule"]

#: Crop size of validation: the whole complex.
WHOLE = 10**9


@dataclass
class ComplexSample:
    """One complex sample: ``features`` (cropped, no batch dim) and ``ground_truth`` (the whole
    complex: ``asym_id``, ``entity_id``, ``aatype``, ``residue_index``, ``sym_id`` ``[N_full]``,
    ``all_atom_positions [N_full, 37, 3]``, ``all_atom_mask [N_full, 37]``)."""

    sample_id: str
    features: dict
    ground_truth: dict


@dataclass
class ComplexBatch(Batch):
    """A :class:`~alphafold_mem.data.Batch` plus one whole-complex ground truth per sample."""

    ground_truth: list = None

    def to(self, device) -> "ComplexBatch":
        b = super().to(device)
        gts = [{k: v.to(device) for k, v in g.items()} for g in self.ground_truth]
        return ComplexBatch(b.sample_ids, b.features, gts)


def collate_complexes(samples: list[ComplexSample]) -> ComplexBatch:
    """:func:`~alphafold_mem.data.collate` of the features (padding residues get ``asym_id`` 0), the
    ground truths listed beside them."""
    b = collate([s.features for s in samples])
    return ComplexBatch([s.sample_id for s in samples], b.features, [s.ground_truth for s in samples])


class ComplexDraws(Dataset):
    """Draw ``k`` -> :class:`ComplexSample` (module docstring). ``crop``: crop settings; ``whole``:
    item ``k`` is complex ``k`` uncropped (validation); ``clusters``: the cluster file's clusters
    (:func:`~alphafold_mem.data.sampling.read_cluster_file`), None: each chain its own cluster."""

    def __init__(
        self,
        examples: list[ComplexExample],
        config: ModelConfig,
        seed: int,
        msa_dir=None,
        crop: MultimerCrop | None = None,
        whole: bool = False,
        clusters=None,
    ):
        if not examples:
            raise ValueError("no complex to draw from")
        self.examples, self.config, self.seed, self.msa_dir = examples, config, seed, msa_dir
        self.crop = MultimerCrop(WHOLE, 0.0) if whole else (crop or MultimerCrop(config.data.crop_size))
        self.whole = whole
        self._raw: dict[int, dict] = {}
        self.sampler = None if whole else ComplexSampler(sampling_items(complex_items(examples), clusters))

    def __len__(self) -> int:
        return len(self.examples) if self.whole else 2**62

    def raw(self, i: int) -> dict:
        if i not in self._raw:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # missing alignment folders are counted at start-up
                self._raw[i] = complex_raw_features(self.examples[i], self.msa_dir)
        return self._raw[i]

    def __getitem__(self, k: int) -> ComplexSample:
        i = k if self.whole else self.sampler.draw(np.random.default_rng([self.seed, 7, k])).complex_index
        rng = np.random.default_rng([self.seed, 13, k])
        feats, _ = make_complex_training_features(self.raw(i), self.config, rng, self.crop)
        ex = self.examples[i]
        gt = {k2: torch.from_numpy(v) for k2, v in ex.ground_truth().items()}
        return ComplexSample(ex.name, feats, gt)


def complex_items(examples: list[ComplexExample], threshold: float = MultimerCrop().interface_threshold) -> list:
    """Per complex, its chain ids (``<pdbid>_<chain>``) and its interfaces (pairs of chain positions
    with Cα within ``threshold`` Å): the input of :func:`~alphafold_mem.data.complex_sampling.sampling_items`."""
    out = []
    for ex in examples:
        gt = ex.ground_truth()
        pairs = interface_pairs(gt["all_atom_positions"], gt["all_atom_mask"], gt["asym_id"], threshold)
        out.append(([f"{ex.name}_{c.chain_id}" for c in ex.complex.chains], pairs))
    return out


def sampling_line(draws: "ComplexDraws", cluster_file) -> str:
    """The start-up line of the sampling: items, clusters and where the clusters come from."""
    items = draws.sampler.items
    n = [sum(len(it.chains) == k for it in items) for k in (1, 2)]
    c = [len({it.cluster for it in items if len(it.chains) == k}) for k in (1, 2)]
    source = f"clusters of {cluster_file}" if cluster_file else "no --cluster-file: each chain its own cluster"
    return f"sampling: {n[0]} chains in {c[0]} clusters, {n[1]} interfaces in {c[1]} clusters ({source})"


def missing_alignments(examples: list[ComplexExample], msa_dir) -> list[dict]:
    """A note per chain without an alignment folder (it trains on its sequence alone)."""
    out = []
    for ex in examples:
        for eid in ex.complex.entities:
            if msa_dir is None or entity_folder(msa_dir, ex.complex, eid) is None:
                for c in ex.complex.chains_of(eid):
                    out.append(drop("no alignment folder (single-sequence MSA)", f"{ex.name}_{c.chain_id}"))
    return out


class MultimerDataModule(L.LightningDataModule):
    """Complexes of ``data_dir`` for a multimer preset (module docstring); the interface of
    :class:`~.data_module.AF2DataModule` (resumable draws, ``state_dict``)."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        model_config: ModelConfig,
        train_config: TrainConfig,
        max_steps: int = 1000,
        num_workers: int = 0,
        log: Optional[Callable[[str], None]] = None,
        filters: ComplexFilters = ComplexFilters(),
        crop: MultimerCrop | None = None,
        cluster_file=None,
    ):
        super().__init__()
        self.data_dir = Path(data_dir)
        self.model_config, self.train_config = model_config, train_config
        self.max_steps, self.num_workers = max_steps, num_workers or 0
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.filters, self.crop, self.cluster_file = filters, crop, cluster_file
        self.start_batch = 0
        self.train_set: Optional[ComplexDraws] = None
        self.val_set: Optional[ComplexDraws] = None

    def setup(self, stage: Optional[str] = None) -> None:
        if self.train_set is not None:
            return
        msa_dir = self.data_dir / "alignments"
        msa_dir = msa_dir if msa_dir.is_dir() else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # every entry left out is counted below
            examples, drops = load_complex_examples(self.data_dir, self.filters)
        held = set(self.train_config.held_out)
        train = [e for e in examples if e.name not in held]
        val = [e for e in examples if e.name in held]
        if not train:
            raise ValueError(
                f"no complex to train on in {self.data_dir} ({len(examples)} complexes, {len(drops)} left out: "
                + "; ".join(counted_lines(drops))
                + "): give a folder of mmCIF entries with two or more protein chains"
            )
        notes = missing_alignments(examples, msa_dir)
        lines = [f"complexes: {len(train)} for training, {len(val)} held out"]
        lines += [f"left out: {line}" for line in counted_lines(drops)]
        lines += [f"note: {line}" for line in counted_lines(notes)]
        if not val:
            val = train[: self.train_config.max_val_chains]
            lines.append(f"validation: no held-out complex; {len(val)} training complex(es), whole (a measure of fit)")
        seed = self.train_config.seed
        clusters = read_cluster_file(self.cluster_file) if self.cluster_file else None
        self.train_set = ComplexDraws(train, self.model_config, seed, msa_dir, self.crop, clusters=clusters)
        lines.append(sampling_line(self.train_set, self.cluster_file))
        for line in lines:
            self.log(line)
        self.val_set = ComplexDraws(val, self.model_config, seed, msa_dir, whole=True)

    def train_dataloader(self) -> DataLoader:
        t = getattr(self, "trainer", None)
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        sampler = DrawSampler(self.start_batch, max(1, self.max_steps), self.train_config.batch_size, rank, world)
        loader = DrawLoader(
            self.train_set,
            batch_size=self.train_config.batch_size,
            sampler=sampler,
            collate_fn=collate_complexes,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(0),
        )
        loader.position = lambda: self.state_dict()["batches_seen"]
        return loader

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=1, collate_fn=collate_complexes, num_workers=self.num_workers)

    def state_dict(self) -> dict:
        lm = getattr(getattr(self, "trainer", None), "lightning_module", None)
        return {
            "batches_seen": int(getattr(lm, "batches_seen", self.start_batch)),
            "seed": self.train_config.seed,
            "batch_size": self.train_config.batch_size,
        }

    def load_state_dict(self, state: dict) -> None:
        self.start_batch = int(state["batches_seen"])
