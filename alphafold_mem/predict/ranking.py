"""Ranking the predictions of one target, AF2's way: ``ranked_<r>.pdb`` / ``.cif`` best first and
``ranking_debug.json``. Every ``predict`` run ranks: a single model is an ensemble of one (one entry),
an ensemble (:mod:`.ensemble`) ranks all its (model, seed) predictions once they ran (:mod:`.layout`)."""

from __future__ import annotations

import filecmp
import json
import os
import shutil

from ..io import atomic_write
from .outputs import write_json
from .outputs.plots import plot_plddt_models

__all__ = ["RANK_BY", "rank_predictions"]

#: Ranking scores: AF2 monomer ranks by mean pLDDT; pTM needs a PAE head.
RANK_BY = ("plddt", "ptm")
_DEBUG_KEY = {"plddt": "plddts", "ptm": "ptm"}


def rank_predictions(target_dir: str, name: str, tags: list[str], rank_by: str = "plddt") -> list[str]:
    """Rank the predictions ``tags`` of one target (their ``<tag>_scores.json`` in ``target_dir``),
    best first by ``rank_by``, ties in the order given; writes ``ranked_<r>.pdb/.cif``,
    ``ranking_debug.json``, ``<name>_scores.json`` and ``<name>_plddt.png`` there and removes
    ranked files of a larger earlier ensemble. Returns the tags best first.

    Raises:
        ValueError: ``rank_by="ptm"`` for a prediction without pTM (weights without a PAE head).
        OSError: a file could not be read or written.
    """
    scores = {}
    for tag in tags:
        with open(os.path.join(target_dir, f"{tag}_scores.json")) as fh:
            scores[tag] = json.load(fh)
    key = "mean_plddt" if rank_by == "plddt" else "ptm"
    lacking = [t for t in tags if scores[t].get(key) is None]
    if lacking:
        raise ValueError(f"{', '.join(lacking)} without {key} (weights without a PAE head): use --rank-by plddt")
    order = sorted(tags, key=lambda t: -float(scores[t][key]))
    for r, tag in enumerate(order):
        for suffix in (".pdb", ".cif", "_relaxed.pdb"):
            source = os.path.join(target_dir, tag + suffix)
            ranked = os.path.join(target_dir, f"ranked_{r}{suffix}")
            if os.path.exists(source):
                if os.path.exists(ranked) and filecmp.cmp(source, ranked, shallow=False):
                    continue  # a rerun that skipped the prediction leaves its ranked copy as it was
                with atomic_write(ranked) as tmp:
                    shutil.copyfile(source, tmp)
            elif os.path.exists(ranked):
                os.remove(ranked)
    for entry in os.listdir(target_dir):  # ranks left from an earlier, larger ensemble
        stem = entry.split(".")[0].removesuffix("_relaxed")
        if stem.startswith("ranked_") and stem[7:].isdigit() and int(stem[7:]) >= len(order):
            os.remove(os.path.join(target_dir, entry))
    write_json(
        os.path.join(target_dir, "ranking_debug.json"),
        {_DEBUG_KEY[rank_by]: {t: scores[t][key] for t in tags}, "order": order},
        indent=4,
    )
    listing = []
    for r, tag in enumerate(order):
        s = scores[tag]
        listing.append(
            {
                "rank": r,
                "name": tag,
                "model": tag.rsplit("_seed_", 1)[0],
                "seed": s.get("seed"),
                "weights": s.get("weights"),
                "mean_plddt": s.get("mean_plddt"),
                "ptm": s.get("ptm"),
                "recycles_run": s.get("recycles_run"),
                "ranked_pdb": f"ranked_{r}.pdb",
                "pdb": f"{tag}.pdb",
                "scores": f"{tag}_scores.json",
            }
        )
    write_json(
        os.path.join(target_dir, f"{name}_scores.json"),
        {"id": name, "length": scores[order[0]].get("length"), "rank_by": rank_by, "order": order, "models": listing},
    )
    plot_plddt_models(os.path.join(target_dir, f"{name}_plddt.png"), {t: scores[t]["plddt"] for t in order}, title=name)
    return order


def rank_targets(ctx, runs) -> None:
    """Rank the one prediction of every finished target (``ok`` or ``skipped``) of a single-model run,
    an ensemble of one (:func:`rank_predictions` with one entry), by ``ctx.rank_by`` (``None``: the
    caller ranks, :mod:`.ensemble`); rank 0 only under DAP. ``ctx``: the run's
    :class:`~.run_context.RunContext`; ``runs``: its :class:`~.run_context.TargetRun` records. A target
    whose ranking fails (a file that cannot be written) is marked failed with one line."""
    if ctx.rank_by is None or not ctx.par.writer:
        return
    for run in runs:
        r = run.result
        if r.status not in ("ok", "skipped"):
            continue
        base = ctx.base_name(run.name)
        try:
            rank_predictions(os.path.dirname(base), run.name, [os.path.basename(base)], ctx.rank_by)
        except (OSError, ValueError, KeyError) as exc:
            r.status, r.message = "failed", f"{run.name}: cannot rank its prediction ({exc})"
            ctx.log(f"error: {r.message}")
