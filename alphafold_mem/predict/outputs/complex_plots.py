"""Plots of a predicted complex: pLDDT coloured by chain and PAE with the chain boundaries drawn
(the matplotlib set-up and colour bands of :mod:`.plots`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .plots import PLDDT_BANDS, _figure, _save

__all__ = ["plot_complex_pae", "plot_complex_plddt"]

#: Chain colours, repeated for complexes with more chains (matplotlib's tab10).
CHAIN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def plot_complex_plddt(path, plddt: np.ndarray, chains: Sequence[tuple[str, int]], title: str = "") -> None:
    """Per-residue pLDDT (0-100) of a complex over its residues in chain order, one colour per chain
    (``chains``: ``(chain id, length)`` in order; their lengths sum to ``N_res``), on the AlphaFold DB
    colour bands."""
    plddt = np.asarray(plddt, dtype=np.float64)
    fig = _figure(7.5, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    for lo, hi, colour, _ in PLDDT_BANDS:
        ax.axhspan(lo, hi, color=colour, alpha=0.12, lw=0, zorder=1)
    start = 0
    for k, (chain_id, length) in enumerate(chains):
        x = np.arange(start + 1, start + length + 1)
        values = plddt[start : start + length]
        colour = CHAIN_COLOURS[k % len(CHAIN_COLOURS)]
        ax.plot(x, values, color=colour, lw=1.0, zorder=2, label=f"{chain_id} ({values.mean():.1f})")
        start += length
    ax.set_xlim(0.5, max(start, 1) + 0.5)
    ax.set_ylim(0, 100)
    ax.set_xlabel("Residue (chains in order)")
    ax.set_ylabel("pLDDT")
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False, title="chain", title_fontsize=7)
    _save(fig, path)


def plot_complex_pae(path, pae: np.ndarray, chains: Sequence[tuple[str, int]], max_pae: float, title: str = "") -> None:
    """PAE (Å) heatmap of a complex (x = scored residue, y = aligned residue) with a line at every
    chain boundary and the chain ids along the top."""
    pae = np.asarray(pae, dtype=np.float64)
    n = pae.shape[0]
    fig = _figure(5.2, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(
        pae, cmap="Greens_r", vmin=0.0, vmax=float(max_pae), origin="upper",
        extent=(0.5, n + 0.5, n + 0.5, 0.5), interpolation="nearest",
    )  # fmt: skip
    start = 0
    for chain_id, length in chains:
        if start:
            ax.axvline(start + 0.5, color="black", lw=0.8)
            ax.axhline(start + 0.5, color="black", lw=0.8)
        ax.text(start + length / 2 + 0.5, 0.0, chain_id, ha="center", va="bottom", fontsize=8)
        start += length
    cbar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cbar.set_label("Expected position error (Å)")
    ax.set_xlabel("Scored residue")
    ax.set_ylabel("Aligned residue")
    if title:
        ax.set_title(title, pad=14)
    _save(fig, path)
