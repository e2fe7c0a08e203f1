"""Ensembles: several models and seeds per target, ranked (AF2's ``ranked_<k>.pdb``, ColabFold's seeds).

:func:`predict_ensemble` runs :func:`alphafold_mem.predict.predict` once per (model, seed) -- one
model's weights resident at a time, every target of the input with it -- and then ranks the
predictions of each target by mean pLDDT (AF2 monomer) or pTM. Outputs of target ``<id>`` go to the
folder ``<out>/<id>/`` (AF2's layout):

* ``model_<k>[_ptm]_seed_<s>.pdb`` / ``.cif`` / ``_scores.json`` / ``_plddt.png`` (and ``_pae.json``,
  ``_pae.png`` with a PAE head): one prediction, written by :func:`~alphafold_mem.predict.predict`
  with its provenance record, so that a rerun with more models or seeds computes only the missing
  ones (the others are skipped, their weights not even loaded);
* ``ranked_<r>.pdb`` / ``.cif``: the predictions best first (``ranked_<r>_relaxed.pdb`` when
  ``--relax`` ran);
* ``ranking_debug.json``: AF2's layout, ``{"plddts": {name: mean pLDDT}, "order": [names best
  first]}`` (``--rank-by ptm``: the key is ``"ptm"``, AF2 monomer has no pTM ranking; its multimer
  writes ``"iptm+ptm"``);
* ``<id>_scores.json``: every prediction with its rank, model, seed, mean pLDDT, pTM and recycles run;
* ``<id>_plddt.png``: the pLDDT of every prediction on one plot.

``<out>/timings.json`` holds the timings of every (model, seed) run. Model names are AF2's
(``model_1``, ``model_1_ptm``; :mod:`alphafold_mem.weights.directory`); seeds are ``seed``,
``seed + 1``, ... ``seed + num_seeds - 1``. The models run largest first (most extra-MSA rows, then
templates: AF2's ``model_1``, then ``model_3`` and ``model_4``, ``model_2``, ``model_5``), so that the
pre-flight of the largest decides first whether a target fits.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..config import model_config
from ..io import atomic_write
from ..weights import default_weights_path
from ..weights.detect import WeightsError
from ..weights.directory import ModelWeights, find_model_weights, model_name_of
from .outputs import write_json
from .outputs.plots import plot_plddt_models
from .runner import PredictionRun, TargetResult, predict
from .targets import PredictError
from .timings import keep_skipped

__all__ = ["RANK_BY", "EnsembleRun", "ensemble_members", "predict_ensemble", "rank_predictions"]

#: Ranking scores: AF2 monomer ranks by mean pLDDT; pTM needs a PAE head.
RANK_BY = ("plddt", "ptm")
_DEBUG_KEY = {"plddt": "plddts", "ptm": "ptm"}


@dataclass
class EnsembleRun:
    """Results of :func:`predict_ensemble`: the :class:`PredictionRun` of every (model, seed) by name
    (``model_1_seed_0``), and per target the names best first."""

    runs: dict[str, PredictionRun]
    out_dir: str
    order: dict[str, list[str]] = field(default_factory=dict)
    failed_rankings: list[str] = field(default_factory=list)
    timings_path: Optional[str] = None

    @property
    def results(self) -> list[TargetResult]:
        return [r for run in self.runs.values() for r in run.results]

    @property
    def exit_code(self) -> int:
        """0 if every prediction and ranking succeeded, 1 otherwise."""
        return 1 if self.failed_rankings or any(run.exit_code for run in self.runs.values()) else 0


def predict_ensemble(
    inputs,
    out_dir,
    *,
    models: Optional[list[int]] = None,
    weights_dir=None,
    weights=None,
    num_seeds: int = 1,
    seed: int = 0,
    rank_by: str = "plddt",
    preset: Optional[str] = None,
    log: Optional[Callable[[str], None]] = None,
    **predict_options,
) -> EnsembleRun:
    """Predict every target with AF2 models ``models`` (weights from ``weights_dir``) or the one
    ``weights`` file, ``num_seeds`` seeds each, and rank the predictions (module docstring).

    Args:
        inputs, out_dir: as :func:`~alphafold_mem.predict.predict`.
        models: AF2 model numbers (1-5); needs ``weights_dir``. ``None``: the one ``weights`` file
            (default: the demo weights), named after its file (``params_model_1_ptm.npz`` -> ``model_1_ptm``).
        weights_dir: folder with AF2 ``params_model_<k>[_ptm].npz`` or OpenFold ``finetuning_[ptm_]<k>.pt``.
        num_seeds: seeds per model (``seed`` ... ``seed + num_seeds - 1``).
        rank_by: ``"plddt"`` (mean pLDDT, AF2 monomer) or ``"ptm"`` (needs a PAE head).
        preset: the preset every model's weights are loaded with (default: from each file).
        predict_options: passed to :func:`~alphafold_mem.predict.predict` (``msa_dir``, ``device``,
            ``memory_policy``, ``num_recycles``...).

    Raises:
        PredictError: bad options or no usable weights folder (one line).
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if num_seeds < 1:
        raise PredictError(f"--num-seeds must be >= 1, got {num_seeds}")
    if rank_by not in RANK_BY:
        raise PredictError(f"--rank-by {rank_by!r}: choose one of {', '.join(RANK_BY)}")
    if predict_options.get("dap", 1) > 1:
        raise PredictError("--dap with --models/--num-seeds is not supported: run the ensemble without --dap")
    members = ensemble_members(models, weights_dir, weights, rank_by, preset)
    seeds = [seed + k for k in range(num_seeds)]
    out_dir = os.fspath(out_dir)
    t_start = time.perf_counter()
    seen: set[str] = set()

    def quiet(line: str) -> None:  # the input notes and rejections repeat in every run: say them once
        if line.startswith(("note:", "warning:", "error:")):
            if line in seen:
                return
            seen.add(line)
        log(line)

    runs: dict[str, PredictionRun] = {}
    timings: dict[str, object] = {}
    before = _read_json(os.path.join(out_dir, "timings.json"))  # the runs' own files replace it
    before_runs = before.get("runs") if isinstance(before, dict) and isinstance(before.get("runs"), dict) else {}
    for m in members:
        for s in seeds:
            tag = f"{m.name}_seed_{s}"
            log(f"ensemble: {tag}: weights {os.path.basename(m.path)}, seed {s}")
            run = predict(
                inputs,
                out_dir,
                weights=m.path,
                preset=preset,
                seed=s,
                output_name="{id}/" + tag,
                log=quiet,
                **predict_options,
            )
            runs[tag] = run
            mine = _read_json(run.timings_path)
            timings[tag] = keep_skipped(mine, before_runs.get(tag)) if isinstance(mine, dict) else mine

    result = EnsembleRun(runs, out_dir)
    names = list(dict.fromkeys(r.name for run in runs.values() for r in run.results))
    for name in names:
        done = [
            tag
            for tag, run in runs.items()
            if any(r.name == name and r.status in ("ok", "skipped") for r in run.results)
        ]
        if not done:
            continue
        try:
            result.order[name] = rank_predictions(os.path.join(out_dir, name), name, done, rank_by)
        except (OSError, ValueError, KeyError) as exc:
            result.failed_rankings.append(name)
            log(f"error: {name}: cannot rank its predictions ({exc})")
    result.timings_path = os.path.join(out_dir, "timings.json")
    total = round(time.perf_counter() - t_start, 3)
    write_json(
        result.timings_path,
        {
            "ensemble": {"models": [m.name for m in members], "seeds": seeds, "rank_by": rank_by},
            "total_seconds": total,
            "stage_seconds": _stage_seconds([timings.get(tag) for tag in runs], total),
            "runs": timings,
        },
    )
    log("")
    log(_summary(out_dir, result.order, rank_by))
    return result


def ensemble_members(
    models, weights_dir, weights, rank_by: str = "plddt", preset: Optional[str] = None
) -> list[ModelWeights]:
    """The weights of an ensemble, largest model first (module docstring): AF2 models ``models`` from
    ``weights_dir`` (of the kind ``preset`` names: monomer or AF2-Multimer; without one, the kind the
    folder holds), or the one ``weights`` file (default: the demo weights).

    Raises:
        PredictError: options that do not go together, or no family with every model (one line).
    """
    if models:
        if weights_dir is None:
            raise PredictError("--models needs --weights-dir DIR (a folder of AF2 or OpenFold weights)")
        if weights is not None:
            raise PredictError("give --weights-dir with --models, not --weights")
        try:
            multimer = model_config(preset).multimer if preset else None  # a preset says which kind
            found = find_model_weights(weights_dir, models, need_ptm=rank_by == "ptm", multimer=multimer)
        except WeightsError as exc:
            raise PredictError(str(exc)) from None
        return sorted(found, key=_size, reverse=True)  # the largest's pre-flight first: fail before the others ran
    if weights_dir is not None:
        raise PredictError("--weights-dir needs --models (e.g. --models 1,2,3,4,5)")
    path = os.fspath(weights) if weights is not None else str(default_weights_path())
    return [ModelWeights(model_name_of(path), 0, "file", path)]


def _size(m: ModelWeights) -> tuple[int, bool]:
    """AF2's models differ in size by their extra-MSA rows (5120 or 1024) and templates (models 1-2)."""
    cfg = model_config(m.name)
    return cfg.data.max_extra_msa, cfg.template.enabled


def _stage_seconds(run_timings: list, total: float) -> dict[str, float]:
    """The ensemble's seconds per named stage: its runs' ``stage_seconds`` summed, and the rest of
    ``total`` (ranking, the ensemble's files) in ``outputs``, so the stages sum to the total."""
    summed: dict[str, float] = {}
    for rec in run_timings:
        stages = rec.get("stage_seconds") if isinstance(rec, dict) else None
        for stage, seconds in (stages if isinstance(stages, dict) else {}).items():
            summed[stage] = summed.get(stage, 0.0) + float(seconds)
    summed["outputs"] = summed.get("outputs", 0.0) + max(total - sum(summed.values()), 0.0)
    return {k: round(v, 3) for k, v in summed.items()}


def _read_json(path) -> object:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError, TypeError):
        return None


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


def _summary(out_dir: str, order: dict[str, list[str]], rank_by: str) -> str:
    rows = [("target", "rank", "prediction", "mean pLDDT", "pTM")]
    for name, tags in order.items():
        for r, tag in enumerate(tags):
            try:
                with open(os.path.join(out_dir, name, f"{tag}_scores.json")) as fh:
                    s = json.load(fh)
            except (OSError, ValueError):
                s = {}
            plddt, ptm = s.get("mean_plddt"), s.get("ptm")
            rows.append(
                (name, str(r), tag, "-" if plddt is None else f"{plddt:.1f}", "-" if ptm is None else f"{ptm:.3f}")
            )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [f"ranked by {'mean pLDDT' if rank_by == 'plddt' else 'pTM'} (best first):"]
    for k, row in enumerate(rows):
        lines.append(
            "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
