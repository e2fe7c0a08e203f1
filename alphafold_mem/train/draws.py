"""Training draws as an endless, deterministic stream (:class:`Draws`), the sampler of one rank's draw
numbers (:class:`DrawSampler`) and the resumable training loader (:class:`DrawLoader`).

Draw ``k`` (counted over all ranks) picks chain ``i ~ weights`` (AF2 Suppl. 1.2.5 sample weights) with
``default_rng([seed, 7, k])`` and builds its features with the dataset's random stream for "epoch" ``k``
(crop, MSA sampling, masking): a pure function of ``(seed, k)``, whatever the number of workers. Rank
``r`` of ``W`` takes draws ``k = (b * W + r) * B + j`` for its batch ``b`` and slot ``j``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from torch.utils.data import DataLoader, Dataset, Sampler

from ..data import ProteinChainDataset
from ..data.sampling import draw_source

__all__ = ["DrawLoader", "DrawSampler", "Draws"]


def _probabilities(dataset: ProteinChainDataset) -> np.ndarray:
    w = dataset.sample_weights().numpy()
    return w / w.sum()


class Draws(Dataset):
    """Draw ``k`` -> a training sample (see the module docstring). With a distillation set, the
    draw's first random number picks the set (probability ``distillation_prob``), then the chain."""

    def __init__(
        self,
        dataset: ProteinChainDataset,
        seed: int,
        distillation: ProteinChainDataset | None = None,
        distillation_prob: float = 0.0,
    ):
        self.dataset, self.seed = dataset, seed
        self.distillation, self.distillation_prob = distillation, distillation_prob
        self.p = _probabilities(dataset)
        self.p_distillation = None if distillation is None else _probabilities(distillation)

    def __len__(self) -> int:
        return 2**62

    def choose(self, k: int) -> tuple[ProteinChainDataset, int]:
        """``(dataset, index)`` of draw ``k``."""
        rng = np.random.default_rng([self.seed, 7, k])
        dataset, p = self.dataset, self.p
        if self.distillation is not None and draw_source(rng, self.distillation_prob):
            dataset, p = self.distillation, self.p_distillation
        return dataset, int(rng.choice(len(p), p=p))

    def __getitem__(self, k: int):
        dataset, i = self.choose(k)
        dataset.set_epoch(k)
        return dataset[i]


class DrawSampler(Sampler[int]):
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


class DrawLoader(DataLoader):
    """The training loader, resumable in Lightning's sense (``state_dict`` / ``load_state_dict``): its
    state is the number of the next batch to draw. The data module restores that number from the
    checkpoint before the loader is built (:meth:`AF2DataModule.load_state_dict`), so a resume draws
    exactly the batches the uninterrupted run would have."""

    #: the batches consumed so far (set by the data module; the sampler runs ahead of it by the
    #: batches prefetched by workers)
    position = None

    def state_dict(self) -> dict:
        return {"next_batch": int(self.position() if self.position is not None else self.sampler.next_batch)}

    def load_state_dict(self, state: dict) -> None:
        if "next_batch" in state:
            self.sampler.next_batch = int(state["next_batch"])
