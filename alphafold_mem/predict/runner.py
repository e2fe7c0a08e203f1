"""Structure prediction from FASTA (or a3m) inputs: :func:`predict`, which ``alphafold-mem predict`` wraps.

One run:

1. collects the targets (:mod:`alphafold_mem.predict.targets`: a FASTA file with one or many records, a directory of
FASTA files, or one
   ``.a3m``/``.sto`` whose first row is the query) and their MSAs (``msa``: one file for a single
   target; ``msa_dir``: ``<id>.a3m``/``<id>.sto`` or a folder ``<id>/`` of alignment files, merged;
   neither: single-sequence mode, said so);
2. validates every input before any model work: a bad record or MSA is reported in one line naming
   file, record and position, and the other targets still run;
3. skips targets whose outputs are complete and were produced from the same sequence, MSA,
   weights and result-changing options (:mod:`.provenance`); a finished target that differs fails
   with a line naming what changed, unless ``overwrite``;
4. loads the weights once (any format :mod:`alphafold_mem.weights` detects), then for each target
   builds features, runs the model (a failure such as running out of memory fails that target only)
   and writes ``<id>.pdb`` (pLDDT in the B-factor column), ``<id>.cif`` (ModelCIF, pLDDT as local QA
   metric), ``<id>_scores.json``, ``<id>_plddt.png`` and, for PAE presets, ``<id>_pae.json``
   (AlphaFold DB layout) and ``<id>_pae.png``;
5. writes ``timings.json`` (seconds and memory per stage; a skipped target keeps the records of the
   run that produced its outputs) and prints a summary table.

All outputs are written atomically (temporary name, then rename).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
import warnings
from typing import Callable, Collection, Optional

import numpy as np
import torch

from ..binding import bind
from ..data import InputError, make_features, parse_msa
from ..data.alignment_layout import msa_row_cap
from ..data.features.values import check_feature_values
from ..io import os_error_line
from ..memory.policy import MemoryPolicy, PolicyRequest, as_request
from ..weights import DEFAULT_WEIGHTS, WeightsError, default_weights_path, load_weights
from . import preflight, signals
from .outputs import output_paths, write_json, write_target_outputs
from .parallel import Parallel, check_writable
from .progress import ForwardProgress
from .provenance import partition_finished, shareable_scores
from .results import PredictionRun, TargetResult
from .targets import PredictError, Target, collect_targets, measure_searched
from .timings import Stages, keep_skipped
from .unknown_residues import fill_unknown_backbone

__all__ = ["predict", "PredictError", "PredictionRun", "TargetResult"]


# ------------------------------------------------------------------------------------------------
# model
# ------------------------------------------------------------------------------------------------
def _resolve_device(device: str) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise PredictError(f"--device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PredictError(f"--device {device}: CUDA is not available on this machine (use --device cpu)")
    return dev


def _placeholder_templates(n_res: int) -> dict[str, torch.Tensor]:
    """One empty template (``template_mask`` 0) for template-enabled models run without templates,
    as AF2 pads missing templates: its pair update is multiplied by 0 and its MSA row is masked."""
    z = torch.zeros
    return {
        "template_aatype": torch.full((1, n_res), 21, dtype=torch.int64),
        "template_all_atom_positions": z(1, n_res, 37, 3),
        "template_all_atom_mask": z(1, n_res, 37),
        "template_pseudo_beta": z(1, n_res, 3),
        "template_pseudo_beta_mask": z(1, n_res),
        "template_torsion_angles_sin_cos": z(1, n_res, 7, 2),
        "template_alt_torsion_angles_sin_cos": z(1, n_res, 7, 2),
        "template_torsion_angles_mask": z(1, n_res, 7),
        "template_mask": z(1),
    }


# ------------------------------------------------------------------------------------------------
# the entry point
# ------------------------------------------------------------------------------------------------
def predict(
    inputs,
    out_dir,
    *,
    msa=None,
    msa_dir=None,
    single_sequence: bool = False,
    weights=None,
    preset: Optional[str] = None,
    num_recycles: Optional[int] = None,
    device: str = "auto",
    seed: int = 0,
    overwrite: bool = False,
    memory_policy: PolicyRequest = "auto",
    track_memory: bool = True,
    log: Optional[Callable[[str], None]] = None,
    debug: bool = False,
    pipeline=None,
    min_msa_depth: int = 0,
    record_paths: bool = False,
    dap: int = 1,
    recycle_early_stop_tolerance: float = 0.0,
    output_name: str = "{id}",
    targets: Optional[Collection[str]] = None,
) -> PredictionRun:
    """Predict structures for every target in ``inputs`` and write them to ``out_dir``.

    Args:
        inputs: a FASTA file (one or many records), a directory of FASTA files, an ``.a3m``/``.sto``
            whose first row is the query, or a list of these.
        out_dir: output directory (created). Files per target are named from the sanitised record id.
        msa: one ``.a3m``/``.sto`` for a single-target input.
        msa_dir: directory with ``<id>.a3m``/``<id>.sto`` or a folder ``<id>/`` of alignments (merged).
        single_sequence: run without MSAs (also what happens, with a notice, when no MSA is given).
        weights: any weights file :func:`alphafold_mem.weights.load_weights` accepts; default
            ``data/demo_weights/demo.ckpt``.
        preset: for AF2/OpenFold weights the preset that supplies what shapes cannot; for our
            checkpoints it must match the stored config (or be None).
        num_recycles: recycling iterations after the first (default: the model config's).
        device: ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        seed: seed of MSA cluster sampling/masking and of torch.
        overwrite: re-run finished targets (default: skip them if their provenance matches, else fail them).
        memory_policy: the one memory argument (chunking, precision, in-place updates, offload, the
            memory budget ``max_memory``...): ``"auto"`` (default) or an
            :class:`alphafold_mem.AutoPolicy` (its precision and budget): before each target the
            pre-flight picks the fastest policy predicted to fit (:mod:`alphafold_mem.predict.preflight`);
            or a :class:`alphafold_mem.MemoryPolicy`, run as given (``chunk_size="auto"``: the largest
            chunk predicted to fit, per target). Precision ``"bf16"`` is the model's one autocast with
            fp32 islands and representations, ``"bf16-full"`` bf16 representations too
            (:mod:`alphafold_mem.precision`). Either way a target whose predicted peak does not fit
            the budget (default: the device's free memory plus the weights) fails at once, before any
            model work, and the others still run.
        track_memory: on CPU, measure the forward's activation peak with
            :func:`alphafold_mem.memory.track_peak` (a dispatch mode that slows the CPU forward; CUDA
            measurements are free and always on).
        log: receives one line per message (default: print to stderr).
        debug: include tracebacks in the log for failures.
        pipeline: :class:`alphafold_mem.predict.stages.PipelineOptions`: sequence search before the
            features (cached under ``out_dir/<id>/``), templates from hits, Amber relaxation after the outputs.
        min_msa_depth: fail targets whose MSA has fewer distinct rows (query included).
        record_paths: write local paths (inputs, MSAs, weights) into the outputs (default: file names).
        dap: processes sharing each target (DAP; this process is one, :mod:`.parallel`): rank 0 writes.
        recycle_early_stop_tolerance: Å; stop recycling once the Cα distance matrix changes by at most
            this much between iterations (AF2 v2.3; set as the model config's runtime setting
            ``recycle_early_stop_tolerance``); 0 runs every recycle. The recycles run are in the scores
            JSON (``recycles_run``) and timings.json.
        output_name: the outputs' base name relative to ``out_dir``, with ``{id}`` for the target name
            (ensembles: ``"{id}/model_1_seed_0"``, :mod:`.ensemble`).
        targets: run only the valid targets of these names (one ``--devices`` rank's share,
            :mod:`alphafold_mem.cli.devices_launch`); reading the inputs logs nothing and rejected
            records are not reported, as whoever chose the names checked and reported the inputs.
            ``None``: every target, rejected inputs logged and reported.

    Returns:
        :class:`PredictionRun` (``exit_code`` 1 if any input was rejected or any target failed).

    Raises:
        PredictError: bad options, unusable weights, or no input at all (one line).
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        request = as_request(memory_policy)
    except ValueError as exc:
        raise PredictError(f"memory_policy: {exc}") from None
    if msa is not None and msa_dir is not None:
        raise PredictError("give either --msa or --msa-dir, not both")
    if single_sequence and (msa is not None or msa_dir is not None):
        raise PredictError("--single-sequence cannot be combined with --msa/--msa-dir")
    if num_recycles is not None and num_recycles < 0:
        raise PredictError(f"--num-recycles must be >= 0, got {num_recycles}")
    chosen = not isinstance(request, MemoryPolicy)  # the pre-flight chooses the policy per target
    policy = MemoryPolicy(precision=request.precision) if chosen else request
    par, dev, log = Parallel.start(dap, _resolve_device(device), log)
    out_dir = os.fspath(out_dir)
    check_writable(out_dir)  # before any search or model work
    t_start = time.perf_counter()

    # 1-2. Inputs, validated before any model work.
    searching = pipeline is not None and pipeline.searching  # then depth and Neff after the search
    wanted = None if targets is None else set(targets)
    targets, rejected = collect_targets(
        inputs,
        msa,
        msa_dir,
        log if wanted is None else (lambda line: None),
        single_sequence=single_sequence,
        min_msa_depth=0 if searching else min_msa_depth,
    )
    if wanted is not None:
        targets, rejected = [t for t in targets if t.name in wanted], []
    results = [
        TargetResult(name=x.name, length=x.length, status="invalid", message=x.message, order=x.order) for x in rejected
    ]
    if single_sequence:
        for t in targets:
            if t.from_alignment:
                log(f"note: {t.name}: --single-sequence given; ignoring the alignment input {t.source}")
            t.msa_files, t.msa_depth = (), 1
    if pipeline is not None:  # search stage (cached in out_dir): MSAs and template hits
        pipeline.log = log
        for t, message in pipeline.search(targets, out_dir, overwrite=overwrite):
            log(f"error: {message}")
            targets.remove(t)
            results.append(
                TargetResult(name=t.name, length=len(t.sequence), status="failed", message=message, order=t.order)
            )
        if searching:
            targets, shallow = measure_searched(targets, min_msa_depth, log)
            results += [
                TargetResult(name=x.name, length=x.length, status="invalid", message=x.message, order=x.order)
                for x in shallow
            ]
    no_msa = [t.name for t in targets if not t.msa_files]
    if no_msa and not single_sequence:
        shown = ", ".join(no_msa[:5]) + (f" and {len(no_msa) - 5} more" if len(no_msa) > 5 else "")
        log(
            f"note: no MSA given for {shown}: running in single-sequence mode (expect low confidence; "
            "pass --msa or --msa-dir, or --single-sequence to silence this)"
        )

    # 3. Weights (only if there is work to do) and finished targets.

    weights_path = os.fspath(weights) if weights is not None else str(default_weights_path())
    if recycle_early_stop_tolerance < 0:
        raise PredictError(f"--recycle-early-stop-tolerance must be >= 0 Å, got {recycle_early_stop_tolerance}")
    options = {"preset": preset, "num_recycles": num_recycles, "precision": policy.precision, "seed": seed}
    if recycle_early_stop_tolerance > 0:  # recorded only when set: results of earlier versions still match
        options["recycle_early_stop_tolerance"] = recycle_early_stop_tolerance
    todo, skipped, conflicts = partition_finished(
        targets,
        out_dir,
        weights_path,
        options,
        overwrite=overwrite,
        record_paths=record_paths,
        log=log,
        pipeline=pipeline,
        output_name=output_name,
    )
    results += [
        TargetResult(name=x.name, length=x.length, status="failed", message=x.message, order=x.order) for x in conflicts
    ]
    targets = todo + skipped
    todo, skipped = par.agree_targets(targets, todo, skipped)
    for t in skipped:
        log(f"skip: {t.name}: finished outputs of the same inputs and options in {out_dir} (--overwrite reruns)")

    stages = Stages(dev, track_cpu=track_memory)
    loaded = None
    if todo:
        if weights is None and not os.path.exists(weights_path):
            raise PredictError(
                f"no --weights given and the default demo weights ({DEFAULT_WEIGHTS}) are "
                "missing; pass --weights FILE (an alphafold-mem checkpoint, AF2 .npz or OpenFold .pt)"
            )
        try:
            loaded = stages.run("load_weights", lambda: load_weights(weights_path, preset=preset))
        except WeightsError as exc:
            raise PredictError(str(exc)) from None
        model = loaded.model
        if num_recycles is not None:
            model.config = dataclasses.replace(model.config, num_recycles=num_recycles)
        model.config = dataclasses.replace(model.config, recycle_early_stop_tolerance=recycle_early_stop_tolerance)
        model = model.to(dev).eval()
        cfg = model.config
        budget = preflight.budget_of(request, cfg, dev)
        log(
            f"weights: {weights_path} ({loaded.format}, preset {cfg.preset}"
            f"{', ' + loaded.details if loaded.details else ''}); device {dev}, {policy.precision}, "
            f"memory policy {'auto (chosen per target)' if chosen else policy_name(policy)}, "
            f"budget {preflight.format_bytes(budget)}, "
            f"{cfg.num_recycles} recycle(s), {len(todo)} target(s) to run"
            + (f"; one protein shared by {par.dap} processes (DAP)" if par.dap > 1 else "")
        )

    # 4. Targets.
    by_name = {
        t.name: TargetResult(name=t.name, length=len(t.sequence), msa_depth=t.msa_depth, order=t.order) for t in targets
    }
    for t in skipped:
        r = by_name[t.name]
        r.status, r.message = "skipped", "finished outputs exist"
        r.mean_plddt = _previous_mean_plddt(os.path.join(out_dir, output_name.format(id=t.name) + "_scores.json"))
    # Pre-flight of every target before any model work (rank 0 decides, for every rank): one that
    # cannot run with this run's settings (memory budget, residues for the DAP size) fails here.
    fits = par.agree(_preflight_all(todo, cfg, request, dev, par, log) if todo and par.writer else None)
    for k, t in enumerate(todo, 1):
        signals.check()
        r = by_name[t.name]
        r.outputs = output_paths(out_dir, output_name.format(id=t.name), loaded.config.heads.pae_enabled)
        start = time.perf_counter()
        failure = None
        fit = fits[t.name]
        reported = isinstance(fit, preflight.Preflight) and not fit.fits  # logged by the pre-flight
        try:
            if isinstance(fit, Exception):  # the estimate itself failed (e.g. out of memory)
                raise fit
            if not fit.fits:
                raise preflight.DoesNotFit(fit.message)
            policy = fit.policy
            if getattr(model, "memory_policy", None) != policy:
                bind(model, policy, par.mesh)  # and device sharding under DAP
            _run_target(t, r, model, loaded, dev, policy, seed, stages, weights_path, par, pipeline)
        except Exception as exc:  # noqa: BLE001 - one failing target must not stop the others
            if par.active and r.phase == "collectives":  # the other ranks wait in a collective: end the run
                raise
            failure = exc
            r.message = _failure_message(t, exc)
            if debug and not reported:
                log(traceback.format_exc().rstrip())
        rank, message = par.agree_failure(r.message if failure is not None else None)  # DAP: any rank's
        if message is not None:
            r.status, r.message = "failed", message if rank == 0 else f"{message} (on DAP rank {rank})"
            if not reported:
                log(f"error: {r.message}")
        r.seconds = round(time.perf_counter() - start, 2)
        if r.status == "ok":
            log(
                f"[{k}/{len(todo)}] {t.name}: {r.length} residues, MSA depth {r.msa_depth}, "
                f"mean pLDDT {r.mean_plddt:.1f}"
                + (r.message and f", {r.message}")
                + (f", pTM {r.ptm:.3f}" if r.ptm is not None else "")
                + f", {r.seconds:.1f} s"
                + (f", memory policy {policy_name(policy)}" if chosen else "")
            )

    # 5. Timings and summary.
    ordered = sorted(results + [by_name[t.name] for t in targets], key=lambda r: r.order)
    run = PredictionRun(ordered, out_dir, weights=weights_path)
    timings = {
        "device": str(dev),
        "precision": policy.precision,
        "memory_policy": policy_name(policy),
        "weights": weights_path if record_paths else os.path.basename(weights_path),
        "memory_measure": stages.describe(),
        "total_seconds": round(time.perf_counter() - t_start, 3),
        "stages": stages.records,
        "targets": {
            r.name: {"status": r.status, "seconds": r.seconds, "length": r.length, "recycles_run": r.recycles_run}
            for r in run.results
        },
        **par.timings(stages.records),
    }
    run.timings_path = os.path.join(out_dir, "timings.json")
    if par.writer:
        if skipped and output_name == "{id}":  # an ensemble's runs share the file: the ensemble keeps theirs
            timings = keep_skipped(timings, _read_json(run.timings_path))
        try:
            write_json(run.timings_path, timings)
        except OSError as exc:  # the summary still follows
            log(f"error: {os_error_line(exc, 'writing timings.json')}")
            run.timings_path = None
    log("")
    log(run.summary_table())
    if run.failed:
        log(f"{len(run.failed)} of {len(run.results)} target(s) rejected or failed; see the error lines above")
    signals.check()  # a signal whose exception Python dropped (in a callback) still ends the run
    return run


def _preflight_all(todo: list[Target], cfg, request, dev, par: Parallel, log) -> dict:
    """The pre-flight of every target (memory budget, DAP size): its :class:`~.preflight.Preflight`
    (logged once when it does not fit), or the exception the estimate raised (the target fails with it)."""
    fits = {}
    for t in todo:
        fit = par.check_residues(len(t.sequence))
        if fit is None:
            sizes = preflight.feature_sizes(cfg, len(t.sequence), t.msa_depth)
            try:
                fit = preflight.check(cfg, sizes, request, dev, par.dap)
            except Exception as exc:  # noqa: BLE001 - fails this target only, in the loop below
                fits[t.name] = exc
                continue
        fits[t.name] = fit
        if fit.fits and fit.policy != request:  # the planner chose (auto): say what, before the forward
            log(f"{t.name}: memory policy chosen: {policy_name(fit.policy)}, {chunking(fit.policy)}")
        if not fit.fits:
            log(f"error: {_failure_message(t, preflight.DoesNotFit(fit.message))}")
    return fits


def _run_target(
    t: Target, r: TargetResult, model, loaded, dev, policy, seed, stages, weights_path, par, pipeline=None
) -> None:
    """Features, forward and outputs of one target; fills ``r`` (raises on any failure)."""
    precision = policy.precision
    cfg = model.config
    found = {}

    def features():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # already reported during validation
            msas = [parse_msa(f, query=t.sequence, max_sequences=msa_row_cap(f)) for f in t.msa_files]
        chosen = pipeline.templates(t) if pipeline is not None else None
        found["templates"] = chosen
        batch = make_features(
            t.sequence,
            msa=msas or None,
            config=cfg,
            mode="predict",
            seed=seed,
            templates=chosen.templates if chosen else (),
        )
        if cfg.template.enabled and "template_aatype" not in batch:
            batch.update(_placeholder_templates(len(t.sequence)))
        return batch

    batch = stages.run(f"{t.name}/features", features)
    check_feature_values(batch, record=t.name, file=t.source)  # finite, masks 0/1, tokens in range
    r.msa_depth = t.msa_depth
    batch = {k: v.to(dev) for k, v in batch.items()}
    chunk_note = policy.chunk_size  # concrete: the pre-flight resolved chunk_size="auto"

    def forward():
        torch.manual_seed(seed)
        with torch.inference_mode():  # precision: the model enters its one autocast itself
            return model(batch)  # noqa: F821 - bound above; deleted only after this closure ran

    r.phase = "collectives"  # under DAP a failure from here to the gather ends the run on every rank
    with ForwardProgress(model, t.name).attached():
        out = stages.run(f"{t.name}/model", forward, forward=True)
    keep = (
        "final_atom_positions",
        "final_atom_mask",
        "plddt",
        "predicted_aligned_error",
        "max_predicted_aligned_error",
        "ptm",
    )
    arrays = {k: v.detach().float().cpu().numpy() for k, v in par.gather(model, out, keep).items()}
    r.phase = ""
    arrays["aatype"] = batch["aatype"].cpu().numpy()
    fill_unknown_backbone(arrays, out)  # X: N, CA, C, O from the final frame and psi
    r.recycles_run = int(out["num_recycles"]) - 1
    if r.recycles_run < cfg.num_recycles:  # stopped early (AF2 v2.3)
        r.message = (
            f"recycling stopped early after {r.recycles_run} of {cfg.num_recycles} recycle(s) (Cα distance "
            f"change {float(out['recycle_ca_change']):.3f} Å <= tolerance {cfg.recycle_early_stop_tolerance} Å)"
        )
    del out, batch
    if "ptm" in arrays:
        arrays["ptm"] = float(arrays["ptm"])
    if "max_predicted_aligned_error" in arrays:
        arrays["max_predicted_aligned_error"] = float(arrays["max_predicted_aligned_error"])
    plddt = arrays["plddt"]
    if not np.all(np.isfinite(plddt)) or not np.all(np.isfinite(arrays["final_atom_positions"])):
        raise FloatingPointError("the model produced non-finite coordinates or pLDDT")
    r.mean_plddt = float(plddt.mean())
    r.ptm = arrays.get("ptm")
    msa_note = (
        f"MSA {', '.join(os.path.basename(f) for f in t.msa_files)} ({t.msa_depth} rows)"
        if t.msa_files
        else "single-sequence"
    )
    method = (
        f"weights {os.path.basename(weights_path)} ({loaded.format}, preset {cfg.preset}); {msa_note}; "
        f"{cfg.num_recycles} recycle(s); seed {seed}; {precision}; memory policy {policy_name(policy)}"
        + (f" (chunk size {chunk_note})" if chunk_note is not None else "")
    )
    scores = {
        "id": t.name,
        **t.description_fields(),  # capped: alphafold_mem.predict.targets.description_fields
        "source": t.source,
        "sequence": t.sequence,
        "length": len(t.sequence),
        "mean_plddt": round(r.mean_plddt, 2),
        "plddt": [round(float(x), 2) for x in plddt],
        "msa_depth": t.msa_depth,
        "msa_files": list(t.msa_files),
        "msa_mode": "msa" if t.msa_files else "single_sequence",
        "weights": weights_path,
        "weights_format": loaded.format,
        "preset": cfg.preset,
        "architecture": getattr(loaded, "architecture", None),
        "num_recycles": cfg.num_recycles,
        "seed": seed,
        "precision": precision,
        "memory_policy": policy_name(policy),
        "chunk_size": chunk_note,
        "recycles_run": r.recycles_run,
        "recycle_early_stop_tolerance": cfg.recycle_early_stop_tolerance,
    }
    if pipeline is not None:
        scores["templates"] = pipeline.template_record(
            found.get("templates"), pipeline.hits_file(t), cfg.template.enabled
        )
    scores = shareable_scores(scores, t, r.outputs)
    if "predicted_aligned_error" in arrays:
        pae = arrays["predicted_aligned_error"]
        scores["ptm"] = round(r.ptm, 4)
        scores["max_pae"] = round(float(pae.max()), 2)
        scores["max_predicted_aligned_error"] = round(arrays["max_predicted_aligned_error"], 2)
    if par.writer:
        stages.run(f"{t.name}/outputs", lambda: write_target_outputs(r.outputs, t, arrays, scores, method))
        if pipeline is not None and pipeline.relax:  # after the outputs: the unrelaxed model is never replaced
            relaxed_name = os.path.basename(r.outputs["pdb"])[: -len(".pdb")]  # the target's, or an ensemble's
            stages.run(f"{t.name}/relax", lambda: pipeline.relax_target(r.outputs, relaxed_name))
    r.status = "ok"


def policy_name(policy: MemoryPolicy) -> str:
    """The policy's name for people, without its precision (shown beside it): a preset's name, or
    ``low_memory_inference`` with the fields it changes when that is shorter than the fields that
    differ from the reference."""
    plain = policy.replace(precision=MemoryPolicy().precision)
    low = MemoryPolicy.low_memory_inference()
    diffs = [
        f"{f.name}={getattr(plain, f.name)}"
        for f in dataclasses.fields(plain)
        if getattr(plain, f.name) != getattr(low, f.name)
    ]
    return (
        f"low_memory_inference with {','.join(diffs)}"
        if diffs and len(diffs) < plain.name.count("=") + 1
        else plain.name
    )


def chunking(policy: MemoryPolicy) -> str:
    """The chunking a concrete policy runs with, for people: ``"chunk size 16"`` or ``"no chunking"``."""
    return "no chunking" if policy.chunk_size is None else f"chunk size {policy.chunk_size}"


def _read_json(path: str) -> object:
    """The JSON content of ``path``, or ``None`` when it is missing or unreadable."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _previous_mean_plddt(path: str) -> Optional[float]:
    data = _read_json(path)
    try:
        value = data.get("mean_plddt")
        return float(value) if value is not None else None
    except (ValueError, AttributeError, TypeError):
        return None


def _failure_message(t: Target, exc: BaseException) -> str:

    if isinstance(exc, preflight.DoesNotFit):
        return f"{t.source}: record '{t.name}': does not fit: {exc}"
    cpu_oom = isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or cpu_oom:
        return (
            f"{t.source}: record '{t.name}': out of memory at {len(t.sequence)} residues "
            f"(MSA depth {t.msa_depth}); try --low-memory or --chunk-size, or another device"
        )
    if isinstance(exc, InputError):
        return str(exc) if exc.record else f"{exc} (record '{t.name}')"
    if isinstance(exc, PredictError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{t.source}: record '{t.name}': {os_error_line(exc, 'writing its outputs')}"
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    return f"{t.source}: record '{t.name}': {type(exc).__name__}: {text}"
