"""pLDDT and PAE plots (matplotlib, object-oriented API with the Agg canvas: no pyplot, no global
backend switch)."""

from __future__ import annotations

import numpy as np

from ...io import atomic_write

__all__ = ["plot_plddt", "plot_plddt_models", "plot_pae"]

#: AlphaFold DB confidence bands: (lower bound, upper bound, colour, label).
PLDDT_BANDS = (
    (90.0, 100.0, "#0053D6", "very high (>90)"),
    (70.0, 90.0, "#65CBF3", "confident (70-90)"),
    (50.0, 70.0, "#FFDB13", "low (50-70)"),
    (0.0, 50.0, "#FF7D45", "very low (<50)"),
)


def _figure(width: float, height: float):
    # heavy: matplotlib takes about half a second to import, and only plotting needs it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path) -> None:
    with atomic_write(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")


def plot_plddt(path, plddt: np.ndarray, title: str = "") -> None:
    """Per-residue pLDDT (0-100) over residue number (1-based), on the AlphaFold DB colour bands."""
    plddt = np.asarray(plddt, dtype=np.float64)
    fig = _figure(7.0, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(1, plddt.shape[0] + 1)
    ax.plot(x, plddt, color="0.35", lw=0.8, zorder=2)
    for lo, hi, colour, label in PLDDT_BANDS:
        ax.axhspan(lo, hi, color=colour, alpha=0.15, lw=0, zorder=1)
        inside = (plddt >= lo) & ((plddt < hi) if lo < 90.0 else (plddt <= hi))
        ax.scatter(x[inside], plddt[inside], s=9, color=colour, zorder=3, label=label)
    ax.set_xlim(0.5, max(plddt.shape[0], 1) + 0.5)
    ax.set_ylim(0, 100)
    ax.set_xlabel("Residue")
    ax.set_ylabel("pLDDT")
    ax.set_title(f"{title}  mean pLDDT {plddt.mean():.1f}" if title else f"mean pLDDT {plddt.mean():.1f}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False, title="pLDDT", title_fontsize=7)
    _save(fig, path)


def plot_plddt_models(path, plddts: dict[str, np.ndarray], title: str = "") -> None:
    """Per-residue pLDDT (0-100) of several predictions of one target on one plot, one line each,
    labelled with its name and mean pLDDT in the order given (an ensemble: best first), on the
    AlphaFold DB colour bands."""
    fig = _figure(7.5, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    for lo, hi, colour, _ in PLDDT_BANDS:
        ax.axhspan(lo, hi, color=colour, alpha=0.12, lw=0, zorder=1)
    n = 1
    for name, values in plddts.items():
        values = np.asarray(values, dtype=np.float64)
        n = max(n, values.shape[0])
        ax.plot(np.arange(1, values.shape[0] + 1), values, lw=0.9, zorder=2, label=f"{name} ({values.mean():.1f})")
    ax.set_xlim(0.5, n + 0.5)
    ax.set_ylim(0, 100)
    ax.set_xlabel("Residue")
    ax.set_ylabel("pLDDT")
    if title:
        ax.set_title(title)
    ax.legend(
        loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False, title="mean pLDDT", title_fontsize=7
    )
    _save(fig, path)


def plot_pae(path, pae: np.ndarray, max_pae: float | None = None, title: str = "") -> None:
    """Predicted aligned error (Å) heatmap: x = scored residue, y = aligned residue (AlphaFold DB layout)."""
    pae = np.asarray(pae, dtype=np.float64)
    vmax = float(max_pae) if max_pae is not None else float(pae.max(initial=1.0))
    n = pae.shape[0]
    fig = _figure(5.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(
        pae,
        cmap="Greens_r",
        vmin=0.0,
        vmax=vmax,
        origin="upper",
        extent=(0.5, n + 0.5, n + 0.5, 0.5),
        interpolation="nearest",
    )
    cbar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cbar.set_label("Expected position error (Å)")
    ax.set_xlabel("Scored residue")
    ax.set_ylabel("Aligned residue")
    if title:
        ax.set_title(title)
    _save(fig, path)
