"""Effective MSA depth: the number of effective sequences at 80 % identity (Neff).

``Neff = sum_i 1 / n_i`` with ``n_i`` the number of rows (``i`` included) whose identity to row ``i``
is at least the threshold; identity is the fraction of the ``N_res`` query columns on which two
rows carry the same token, a gap matching a gap (the sequence reweighting of Morcos et al. 2011 /
Ovchinnikov et al. 2014 (GREMLIN), as AF2's Fig. 5 and ColabFold's authors use it, threshold 0.8).
A query-only MSA has Neff 1; N identical-at-80 % rows count as 1.

Cost: ``N_seq^2 * N_res`` token comparisons (as one-hot matrix products, ``torch``). Above
``max_exact_rows`` rows the sum is estimated from a fixed random sample of rows, each compared with
every row (``Neff ~= N / m * sum_{i in sample} 1 / n_i``, unbiased); the result says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["NeffResult", "neff"]


@dataclass(frozen=True)
class NeffResult:
    """``value``: Neff; ``rows``: rows it was computed over; ``exact``: False when sampled
    (``sampled_rows`` of them)."""

    value: float
    rows: int
    exact: bool
    sampled_rows: int

    def describe(self) -> str:
        """``"12.3"`` or ``"~12.3 (estimated from 512 of 4000 rows)"``."""
        if self.exact:
            return f"{self.value:.1f}"
        return f"~{self.value:.1f} (estimated from {self.sampled_rows} of {self.rows} rows)"


def _identical_counts(queries: np.ndarray, rows: np.ndarray) -> torch.Tensor:
    """``[M, N]`` number of columns on which query row ``m`` and row ``n`` carry the same token."""
    q, r = torch.from_numpy(queries), torch.from_numpy(rows)
    counts = torch.zeros(q.shape[0], r.shape[0], dtype=torch.float32)
    for token in np.unique(rows):
        counts += (q == int(token)).float() @ (r == int(token)).float().T
    return counts


def neff(
    sequences: Sequence[str],
    identity: float = 0.8,
    *,
    max_exact_rows: int = 1024,
    sample_rows: int = 512,
    seed: int = 0,
) -> NeffResult:
    """Neff of aligned rows of equal length (row 0 the query; ``-`` gaps).

    Args:
        sequences: ``N_seq`` aligned rows, each ``N_res`` characters.
        identity: the identity threshold (0.8 = 80 %).
        max_exact_rows: above this many rows, estimate from ``sample_rows`` sampled rows.
        sample_rows: rows sampled (``numpy.random.default_rng(seed)``) for the estimate.

    Returns:
        :class:`NeffResult` (``value`` 0 for no rows).

    Raises:
        ValueError: rows of different lengths.
    """
    n = len(sequences)
    if n == 0:
        return NeffResult(0.0, 0, True, 0)
    length = len(sequences[0])
    if any(len(s) != length for s in sequences):
        raise ValueError("neff: rows of different lengths")
    if length == 0:
        return NeffResult(1.0, n, True, n)
    tokens = np.frombuffer("".join(sequences).encode("ascii", errors="replace"), dtype=np.uint8)
    tokens = tokens.reshape(n, length).astype(np.int32)
    if n <= max_exact_rows:
        chosen, exact = np.arange(n), True
    else:
        chosen = np.sort(np.random.default_rng(seed).choice(n, size=sample_rows, replace=False))
        exact = False
    counts = _identical_counts(tokens[chosen], tokens)
    neighbours = (counts >= identity * length - 1e-4).sum(dim=1).double()  # each row counts itself
    total = float((1.0 / neighbours).sum())
    value = total if exact else total * n / len(chosen)
    return NeffResult(value, n, exact, len(chosen))
