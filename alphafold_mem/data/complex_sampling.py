"""Which complex a multimer training draw takes: sampling by chain and interface cluster.

Each training draw picks one **item** -- a chain, or an interface (two chains of one complex in
contact) -- with probability proportional to its weight, and trains on the complex that holds it
(the crop then follows :mod:`.multimer_crop`, AF2-Multimer Suppl. 7.2, unchanged). The weights are
the chain / interface cluster weights of the weighted PDB set as AlphaFold 3 (Abramson et al. 2024,
Suppl. 2.5.1) writes out AF2-Multimer's sampling of chains and interfaces, for protein chains:

* a chain: ``BETA_CHAIN * ALPHA_PROTEIN / N`` with ``N`` the number of training chains in its
  cluster;
* an interface: ``BETA_INTERFACE * 2 * ALPHA_PROTEIN / N`` with ``N`` the number of training
  interfaces in its cluster, an interface's cluster being the **unordered pair** of its two chains'
  clusters (so A-B and B-A are one cluster, and a homodimer's interface is the pair (A, A)).

So every chain cluster gets the same total weight, and so does every interface cluster, whatever
its size: large families do not dominate. Cluster sizes are counted over the training complexes
(the cluster file only says which chains belong together).

Clusters come from an MMseqs2 / OpenFold cluster file (:func:`.sampling.read_cluster_file`, chain
ids ``<pdbid>_<chain>``; ``alphafold-mem train --cluster-file``); without one, or for a chain the
file does not list, **each chain is its own cluster**. Two chains form an interface when a resolved
Cα of one lies within ``threshold`` (10 Å, the interface distance of the spatial crop,
:data:`.multimer_crop.MULTIMER_CROP`) of a resolved Cα of the other.

:meth:`ComplexSampler.draw` takes one uniform number from the generator it is given, so draw ``k`` of
a run stays a pure function of ``(seed, k)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .multimer_crop import ca_contacts

__all__ = [
    "BETA_CHAIN",
    "BETA_INTERFACE",
    "ALPHA_PROTEIN",
    "SampleItem",
    "ComplexSampler",
    "chain_cluster_ids",
    "interface_pairs",
    "sampling_items",
]

#: AF3 Suppl. 2.5.1: weight factors of a chain and of an interface, and of each protein chain in it.
BETA_CHAIN, BETA_INTERFACE, ALPHA_PROTEIN = 0.5, 1.0, 3.0


@dataclass(frozen=True)
class SampleItem:
    """A chain (``chains`` of length 1) or an interface (length 2) of complex ``complex_index``;
    ``cluster``: its chain cluster (one id) or interface cluster (the sorted pair of ids);
    ``weight``: its unnormalised sampling weight."""

    complex_index: int
    chains: tuple[str, ...]
    cluster: tuple[str, ...]
    weight: float


def chain_cluster_ids(chain_ids: Sequence[str], clusters: Optional[Sequence[Sequence[str]]] = None) -> dict[str, str]:
    """Chain id (``<pdbid>_<chain>``) -> cluster id: ``"cluster <n>"`` for a chain on line ``n`` of
    the cluster file (``clusters`` as :func:`.sampling.read_cluster_file` returns them), else the
    chain id itself (its own cluster). PDB ids compare lower-cased."""
    line_of = {}
    for n, members in enumerate(clusters or (), 1):
        for m in members:
            line_of[_key(m)] = f"cluster {n}"
    return {c: line_of.get(_key(c), c) for c in chain_ids}


def _key(chain_id: str) -> str:
    pdb, sep, chain = chain_id.partition("_")
    return f"{pdb.lower()}{sep}{chain}"


def interface_pairs(positions: np.ndarray, mask: np.ndarray, asym_id: np.ndarray, threshold: float = 10.0):
    """Pairs ``(i, j)``, ``i < j``, of chain positions (0-based, in ``asym_id`` order) with a resolved
    Cα of chain ``i`` within ``threshold`` Å of a resolved Cα of chain ``j`` (:func:`.multimer_crop.ca_contacts`).

    Args:
        positions: ``[N_res, 37, 3]`` (Å); mask ``[N_res, 37]``; asym_id ``[N_res]`` (chains contiguous).
    """
    asym_id = np.asarray(asym_id)
    position = np.unique(asym_id, return_inverse=True)[1]
    i, j = ca_contacts(positions, mask, asym_id, threshold)
    return sorted({(int(a), int(b)) for a, b in zip(position[i], position[j]) if a < b})


def sampling_items(complexes: Sequence[tuple[Sequence[str], Sequence[tuple[int, int]]]], clusters=None):
    """Every chain and interface of ``complexes`` with its weight (module docstring).

    Args:
        complexes: per complex, its chain ids (``<pdbid>_<chain>``, in chain order) and its interfaces
            as pairs of positions in that order (:func:`interface_pairs`).
        clusters: the cluster file's clusters, or None (each chain its own cluster).

    Returns:
        ``list[SampleItem]``: the chains of each complex, then its interfaces, complex by complex.
    """
    ids = chain_cluster_ids([c for chains, _ in complexes for c in chains], clusters)
    raw = []
    for i, (chains, pairs) in enumerate(complexes):
        raw += [(i, (c,), (ids[c],)) for c in chains]
        raw += [(i, (chains[a], chains[b]), tuple(sorted((ids[chains[a]], ids[chains[b]])))) for a, b in pairs]
    size: dict[tuple[int, tuple[str, ...]], int] = {}
    for _, chains, cluster in raw:
        size[len(chains), cluster] = size.get((len(chains), cluster), 0) + 1
    out = []
    for i, chains, cluster in raw:
        beta = BETA_CHAIN if len(chains) == 1 else BETA_INTERFACE
        out.append(SampleItem(i, chains, cluster, beta * ALPHA_PROTEIN * len(chains) / size[len(chains), cluster]))
    return out


class ComplexSampler:
    """Draws :class:`SampleItem` s with probability proportional to their weights.

    Raises:
        ValueError: no item, or a weight that is not positive and finite.
    """

    def __init__(self, items: Sequence[SampleItem]):
        weights = np.array([it.weight for it in items], dtype=np.float64)
        if not len(items) or not np.all(np.isfinite(weights) & (weights > 0)):
            raise ValueError("complex sampling needs at least one chain, each weight positive and finite")
        self.items = list(items)
        self.probabilities = weights / weights.sum()
        self._cumulative = np.cumsum(self.probabilities)

    def draw(self, rng: np.random.Generator) -> SampleItem:
        """One item, from one ``rng.random()``."""
        u = rng.random()
        return self.items[min(int(np.searchsorted(self._cumulative, u, side="right")), len(self.items) - 1)]

    def complex_probabilities(self, n_complexes: int) -> np.ndarray:
        """``[n_complexes]``: the probability that a draw trains on each complex (its items' sum)."""
        return np.bincount([it.complex_index for it in self.items], self.probabilities, minlength=n_complexes)
