"""The ablation's PNG figures (matplotlib, Agg), drawn from the result rows; each written through
:func:`alphafold_mem.io.atomic_write`.

* ``memory_vs_nres.png``: activation peak against N_res per technique, predicted (lines) and
  measured (markers), with the published anchors (stars; their authors' settings, totals);
* ``deviation_vs_saving.png``: one point per technique: memory saving against the reference (x) and
  the largest Cα-RMSD to the reference run over the chains (y);
* ``training_loss.png``: the training loss curves overlaid;
* ``lddt_per_chain.png``: lDDT-Cα against the experimental structure, per chain and technique.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from ..io import atomic_write
from ..units import GIB
from .scaling import ANCHORS

__all__ = ["draw_all"]


def _plt():
    import matplotlib  # heavy: matplotlib takes about half a second to import; only the plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: matplotlib takes about half a second to import; only the plots need it

    return plt


def _finish(fig, ax, out: Path, name: str, title: str, xlabel: str, ylabel: str, legend: Optional[int] = None) -> Path:
    """Label, grid, legend (font size ``legend``), then write ``out/name`` atomically."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend(fontsize=legend, ncol=2 if legend < 7 else 1)
    path = out / name
    with atomic_write(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return path


def _ok(rows, section, measure):
    return [
        r
        for r in rows
        if r["section"] == section and r["measure"] == measure and r["status"] == "ok" and r["value"] is not None
    ]


def _techniques(rows, section) -> list[str]:
    return list(dict.fromkeys(r["technique"] for r in rows if r["section"] == section))


def memory_vs_nres(rows, out: Path) -> Optional[Path]:
    pred, meas = _ok(rows, "scaling", "predicted_peak_bytes"), _ok(rows, "scaling", "measured_peak_bytes")
    if not pred and not meas:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for i, name in enumerate(_techniques(pred + meas, "scaling")):
        color = f"C{i % 10}"
        p = sorted((r["n_res"], r["value"] / GIB) for r in pred if r["technique"] == name)
        m = sorted((r["n_res"], r["value"] / GIB) for r in meas if r["technique"] == name)
        if p:
            ax.plot(*zip(*p), "-", color=color, label=f"{name} (predicted)")
        if m:
            ax.plot(*zip(*m), "o", color=color, mfc="none", label=f"{name} (measured)")
    for label, n, total, _ in ANCHORS:
        ax.plot([n], [total / GIB], "*", color="k", ms=13)
        ax.annotate(label, (n, total / GIB), textcoords="offset points", xytext=(-8, 8), ha="right", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    return _finish(
        fig,
        ax,
        out,
        "memory_vs_nres.png",
        "Activation peak vs sequence length (stars: published totals at their own settings)",
        "N_res",
        "inference activation peak (GiB = 2^30 bytes)",
        legend=6,
    )


def deviation_vs_saving(rows, out: Path) -> Optional[Path]:
    peaks = _ok(rows, "inference", "peak_counter_bytes")
    rmsd = _ok(rows, "inference", "ca_rmsd_to_reference")
    ref = {r["chain"]: r["value"] for r in peaks if r["technique"] == "reference"}
    points = []
    for name in _techniques(peaks, "inference"):
        ratios = [r["value"] / ref[r["chain"]] for r in peaks if r["technique"] == name and ref.get(r["chain"])]
        devs = [r["value"] for r in rmsd if r["technique"] == name]
        if ratios and devs:
            points.append((name, 1 - statistics.median(ratios), max(devs)))
    if not points:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (name, saving, dev) in enumerate(points):
        ax.plot([100 * saving], [dev], "o", color=f"C{i % 10}")
        ax.annotate(name, (100 * saving, dev), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_yscale("symlog", linthresh=1e-5)
    return _finish(
        fig,
        ax,
        out,
        "deviation_vs_saving.png",
        "Accuracy deviation vs memory saving (one point per technique)",
        "activation-peak saving vs reference, median over chains (%)",
        "largest Cα-RMSD to the reference run over chains (Å)",
    )


def training_loss(rows, out: Path) -> Optional[Path]:
    loss = _ok(rows, "training", "loss")
    if not loss:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, name in enumerate(_techniques(loss, "training")):
        pts = sorted((r["step"], r["value"]) for r in loss if r["technique"] == name)
        ax.plot(*zip(*pts), "-o", ms=3, color=f"C{i % 10}", label=name, alpha=0.8)
    return _finish(
        fig,
        ax,
        out,
        "training_loss.png",
        "Training loss, same weights, seed and draws per technique",
        "step",
        "training loss",
        legend=7,
    )


def lddt_per_chain(rows, out: Path) -> Optional[Path]:
    lddt = _ok(rows, "inference", "lddt_ca")
    if not lddt:
        return None
    chains = list(dict.fromkeys(r["chain"] for r in lddt))
    names = _techniques(lddt, "inference")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(chains) + 2), 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        vals = {r["chain"]: r["value"] for r in lddt if r["technique"] == name}
        xs = [k + i * width for k, c in enumerate(chains) if c in vals]
        ax.bar(xs, [vals[c] for c in chains if c in vals], width, label=name, color=f"C{i % 10}")
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(chains))], chains, fontsize=8)
    return _finish(
        fig,
        ax,
        out,
        "lddt_per_chain.png",
        "Per-chain lDDT-Cα per technique",
        "chain",
        "lDDT-Cα vs experimental structure",
        legend=6,
    )


def draw_all(rows, out: Path) -> dict[str, Path]:
    """Every figure the rows allow: name -> path (figures without data are left out)."""
    found = {}
    for fn in (memory_vs_nres, deviation_vs_saving, training_loss, lddt_per_chain):
        path = fn(rows, out)
        if path is not None:
            found[fn.__name__] = path
    return found
