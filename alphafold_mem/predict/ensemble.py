"""Ensembles: several models and seeds per target, ranked (AF2's ``ranked_<k>.pdb``, ColabFold's seeds).

:func:`predict_ensemble` runs :func:`alphafold_mem.predict.predict` once per (model, seed) -- one
model's weights resident at a time, every target of the input with it -- and then ranks the
predictions of each target by mean pLDDT (AF2 monomer) or pTM. The outputs are the layout of every
``predict`` run (:mod:`.layout`: ``<out>/<id>/`` with one ``model_<k>[_ptm]_seed_<s>.*`` set per
prediction, ``ranked_<r>.pdb``, ``ranking_debug.json``, ``<id>_scores.json``, ``<id>_plddt.png``); a
single model is the ensemble of one. Each prediction is written by :func:`~alphafold_mem.predict.predict`
with its provenance record, so that a rerun with more models or seeds computes only the missing ones
(the others are skipped, their weights not even loaded); the ranking
(:func:`~alphafold_mem.predict.ranking.rank_predictions`) writes ``ranking_debug.json`` as AF2 does,
``{"plddts": {name: mean pLDDT}, "order": [names best first]}`` (``--rank-by ptm``: the key is ``"ptm"``,
AF2 monomer has no pTM ranking; its multimer writes ``"iptm+ptm"``).

``<out>/timings.json`` holds the timings of every (model, seed) run. Model names are AF2's
(``model_1``, ``model_1_ptm``; :mod:`alphafold_mem.weights.directory`); seeds are ``seed``,
``seed + 1``, ... ``seed + num_seeds - 1``. The models run largest first (most extra-MSA rows, then
templates: AF2's ``model_1``, then ``model_3`` and ``model_4``, ``model_2``, ``model_5``), so that the
pre-flight of the largest decides first whether a target fits.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..config import model_config
from ..weights import default_weights_path
from ..weights.detect import WeightsError
from ..weights.directory import ModelWeights, find_model_weights, model_name_of
from .layout import prediction_name, where_line
from .outputs import write_json
from .ranking import RANK_BY, rank_predictions
from .runner import PredictionRun, TargetResult, predict
from .targets import PredictError
from .timings import keep_skipped

__all__ = ["RANK_BY", "EnsembleRun", "ensemble_members", "predict_ensemble", "rank_predictions"]


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
            tag = prediction_name(m.name, s)
            log(f"ensemble: {tag}: weights {os.path.basename(m.path)}, seed {s}")
            run = predict(
                inputs,
                out_dir,
                weights=m.path,
                preset=preset,
                seed=s,
                output_name="{id}/" + tag,
                log=quiet,
                rank_by=None,  # ranked below, every prediction of the target together
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
    if result.order:
        log(where_line(out_dir))
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
