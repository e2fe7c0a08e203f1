"""LightningDataModule over the chain index of :mod:`alphafold_mem.data.dataset`.

Training draws are an endless, deterministic stream: draw ``k`` (counted over all ranks) picks
chain ``i ~ weights`` (AF2 Suppl. 1.2.5 sample weights) with ``default_rng([seed, k])`` and builds
its features with the dataset's random stream for "epoch" ``k`` (crop, MSA sampling, masking). A
draw is therefore a pure function of ``(seed, k)``: resuming only needs the number of batches
consumed (saved in the checkpoint), and the result is the same whatever the number of workers.
Rank ``r`` of ``W`` takes draws ``k = (b * W + r) * B + j`` for its batch ``b`` and slot ``j``.

Data directory (``--data DIR``): either a chain index JSON (``DIR/index.json`` or
``DIR/chain_index/index.json``, as written by ``scripts/build_chain_index.py``) or raw files laid out
as ``DIR/{mmcif,pdb}/`` (structures, or DIR itself) and ``DIR/alignments/<pdbid>_<chain>/``; the
index and coordinate cache are then built once under ``cache_dir``.

Chains whose PDB id is in ``TrainConfig.held_out`` (or that share a sequence with one) are kept
out of training and used for validation (full length, no cropping).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterator, Optional

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..config import ModelConfig
from ..data import ChainIndex, ProteinChainDataset, build_chain_index, collate
from .config import TrainConfig

__all__ = ["AF2DataModule", "resolve_index", "split_index"]


def resolve_index(data_dir: str | os.PathLike, cache_dir: str | os.PathLike) -> Path:
    """The chain-index JSON for ``data_dir``: an existing one, or one built under ``cache_dir``."""
    data_dir = Path(data_dir)
    if data_dir.is_file() and data_dir.suffix == ".json":
        return data_dir
    for cand in (data_dir / "index.json", data_dir / "chain_index" / "index.json"):
        if cand.is_file():
            return cand
    if not data_dir.is_dir():
        raise FileNotFoundError(f"training data directory not found: {data_dir}")
    out = Path(cache_dir) / "index.json"
    if out.is_file():
        return out
    structures = [data_dir / d for d in ("mmcif", "pdb") if (data_dir / d).is_dir()] or [data_dir]
    alignments = data_dir / "alignments"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_chain_index(structures, alignments if alignments.is_dir() else None, out,
                          cache_dir=Path(cache_dir) / "cache")
    return out


def split_index(index: ChainIndex, held_out: tuple[str, ...]) -> tuple[ChainIndex, ChainIndex]:
    """(train, held-out) indexes: held-out = chains of the listed PDB ids and every chain whose
    sequence equals one of theirs."""
    held = {h.lower() for h in held_out}
    held_seqs = {e["sequence"] for e in index.entries if e.get("pdb_id", "").lower() in held}
    train = [e for e in index.entries if e["sequence"] not in held_seqs]
    val = [e for e in index.entries if e["sequence"] in held_seqs]
    mk = lambda entries: ChainIndex(root=index.root, entries=entries)  # noqa: E731
    return mk(train), mk(val)


class _Draws(Dataset):
    """Draw ``k`` -> a training sample (see the module docstring)."""

    def __init__(self, dataset: ProteinChainDataset, seed: int):
        self.dataset, self.seed = dataset, seed
        w = dataset.sample_weights().numpy()
        self.p = w / w.sum()

    def __len__(self) -> int:
        return 2 ** 62

    def __getitem__(self, k: int):
        i = int(np.random.default_rng([self.seed, 7, k]).choice(len(self.p), p=self.p))
        self.dataset.set_epoch(k)
        return self.dataset[i]


class _DrawSampler(Sampler[int]):
    """Yields this rank's draw numbers from batch ``start_batch`` on, ``num_batches`` batches per pass
    (passes continue where the previous one stopped)."""

    def __init__(self, start_batch: int, num_batches: int, batch_size: int, rank: int, world: int):
        self.next_batch, self.num_batches = start_batch, num_batches
        self.batch_size, self.rank, self.world = batch_size, rank, world

    def __len__(self) -> int:
        return self.num_batches * self.batch_size

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.num_batches):
            b = self.next_batch
            self.next_batch += 1
            for j in range(self.batch_size):
                yield (b * self.world + self.rank) * self.batch_size + j


class AF2DataModule(L.LightningDataModule):
    """Training (cropped, weighted draws) and held-out validation (full chains) loaders.

    Args:
        data_dir: see the module docstring.
        model_config: crop size and MSA sizes come from ``model_config.data``.
        train_config: seed, batch size, held-out ids, number of validation chains.
        cache_dir: where to build the index if ``data_dir`` has none.
        max_steps: optimiser steps planned (sets the length of a loader pass; passes repeat).
        num_workers: DataLoader worker processes (results do not depend on it).
        max_val_length: skip held-out chains longer than this (residues).
    """

    def __init__(self, data_dir: str | os.PathLike, model_config: ModelConfig, train_config: TrainConfig,
                 cache_dir: str | os.PathLike, max_steps: int = 1000, num_workers: int = 0,
                 max_val_length: int = 400):
        super().__init__()
        self.data_dir, self.cache_dir = Path(data_dir), Path(cache_dir)
        self.model_config, self.train_config = model_config, train_config
        self.max_steps, self.num_workers, self.max_val_length = max_steps, num_workers, max_val_length
        self.start_batch = 0
        self.train_set: Optional[ProteinChainDataset] = None
        self.val_set: Optional[ProteinChainDataset] = None
        self.index_path: Optional[Path] = None

    def prepare_data(self) -> None:
        self.index_path = resolve_index(self.data_dir, self.cache_dir)

    def setup(self, stage: Optional[str] = None) -> None:
        if self.train_set is not None:
            return
        self.index_path = self.index_path or resolve_index(self.data_dir, self.cache_dir)
        index = ChainIndex.load(self.index_path)
        train_idx, val_idx = split_index(index, self.train_config.held_out)
        val_idx.entries = [e for e in val_idx.entries if e.get("length", 0) <= self.max_val_length]
        val_idx.entries = val_idx.entries[: self.train_config.max_val_chains]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.train_set = ProteinChainDataset(train_idx, self.model_config, mode="train",
                                                 seed=self.train_config.seed)
            self.val_set = (ProteinChainDataset(val_idx, self.model_config, mode="eval", seed=self.train_config.seed)
                            if val_idx.entries else None)

    def _rank_world(self) -> tuple[int, int]:
        """(rank, world) of the data-parallel replicas: under DAP the devices of one group are one replica."""
        t = getattr(self, "trainer", None)
        if t is None:
            return 0, 1
        lm = t.lightning_module
        return (lm.dp_rank, lm.dp_size) if getattr(lm, "dap", 1) > 1 else (t.global_rank, t.world_size)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        sampler = _DrawSampler(self.start_batch, max(1, self.max_steps), self.train_config.batch_size, rank, world)
        return DataLoader(_Draws(self.train_set, self.train_config.seed), batch_size=self.train_config.batch_size,
                          sampler=sampler, collate_fn=collate, num_workers=self.num_workers,
                          generator=torch.Generator().manual_seed(0),  # never draw from the global RNG
                          persistent_workers=self.num_workers > 0)

    def val_dataloader(self):
        if self.val_set is None:
            return []
        rank, world = self._rank_world()
        n = len(self.val_set)
        idx = list(range(rank, n, world)) or [rank % n]  # every rank needs at least one batch
        return DataLoader(torch.utils.data.Subset(self.val_set, idx), batch_size=1, collate_fn=collate,
                          num_workers=0, generator=torch.Generator().manual_seed(0))

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        lm = getattr(getattr(self, "trainer", None), "lightning_module", None)
        return {"batches_seen": int(getattr(lm, "batches_seen", self.start_batch)),
                "seed": self.train_config.seed, "batch_size": self.train_config.batch_size}

    def load_state_dict(self, state: dict) -> None:
        self.start_batch = int(state["batches_seen"])
