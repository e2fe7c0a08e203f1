"""Structure prediction from FASTA (or a3m) inputs: :func:`predict`, which ``alphafold-mem predict`` wraps.

One run is a sequence of stages over one record per target (:class:`~.run_context.TargetRun`), walked
top to bottom here:

1. collect the targets (:mod:`.run_inputs`, :mod:`.targets`: a FASTA file with one or many records, a
   directory of FASTA files, one ``.a3m``/``.sto`` whose first row is the query, mmCIF/PDB chains) and
   their MSAs (``msa``: one file for a single target; ``msa_dir``: ``<id>.a3m``/``<id>.sto`` or a
   folder ``<id>/`` of alignment files, merged; neither: single-sequence mode, said so); every input
   is validated before any model work: a bad record or MSA is reported in one line naming file,
   record and position, and the other targets still run; nothing is written before this (a missing
   input leaves no ``--out`` behind); then the sequence search when asked;
2. skip what is finished: targets whose outputs are complete and were produced from the same
   sequence, MSA, weights and result-changing options (:mod:`.provenance`); a finished target that
   differs fails with a line naming what changed, unless ``overwrite``;
3. load the weights once (any format :mod:`alphafold_mem.weights` detects; :mod:`.model_load`) and
   plan every target (:mod:`.planning`): the memory pre-flight and the predicted run time on this
   device, side by side;
4. run each target: features and the forward (:mod:`.target_forward`; a failure such as running out
   of memory fails that target only), then write its files (:mod:`.target_write`) into
   ``<out>/<id>/`` (:mod:`.layout`), named after the prediction (``<model>_seed_<s>``, the model from
   the weights file: ``demo_seed_0``): ``.pdb`` (pLDDT in the B-factor column), ``.cif`` (ModelCIF,
   pLDDT as local QA metric), ``_scores.json``, ``_plddt.png`` and, for PAE presets, ``_pae.json``
   (AlphaFold DB layout) and ``_pae.png``;
5. rank each finished target's prediction as an ensemble of one (:mod:`.ranking`): ``ranked_0.pdb`` /
   ``.cif``, ``ranking_debug.json``, ``<id>_scores.json`` and ``<id>_plddt.png`` (an ensemble,
   :mod:`.ensemble`, ranks its predictions together instead);
6. write ``timings.json`` (seconds and memory per stage of every target, and every second of the run in
   one named stage; a skipped target keeps the records of the run that produced its outputs) and print
   a summary table (:mod:`.run_report`).

All outputs are written atomically (temporary name, then rename).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Callable, Collection, Optional

import torch

from ..binding import bind
from ..memory.policy import MemoryPolicy, PolicyRequest, as_request
from ..weights import default_weights_path
from . import preflight, signals
from .failures import failure_message
from .layout import default_output_name
from .model_load import load_model
from .outputs import output_paths
from .parallel import Parallel, check_writable
from .planning import estimate_seconds, plan_targets, record_rate, stored_rate
from .policy_names import chunking, policy_name
from .ranking import RANK_BY, rank_targets
from .results import PredictionRun, TargetResult
from .run_context import LoadedModel, RunContext, TargetRun
from .run_inputs import collect, search, skip_finished
from .run_report import finish
from .target_forward import features, forward
from .target_write import write
from .targets import PredictError
from .timings import StageClock, Stages

__all__ = ["predict", "PredictError", "PredictionRun", "TargetResult", "chunking", "policy_name"]


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
    output_name: Optional[str] = None,
    targets: Optional[Collection[str]] = None,
    rank_by: Optional[str] = "plddt",
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
        output_name: the outputs' base name relative to ``out_dir``, ``"{id}/<prediction>"`` with ``{id}``
            for the target name (default: ``"{id}/<model>_seed_<seed>"``, :func:`.layout.default_output_name`).
        targets: run only the valid targets of these names (one ``--devices`` rank's share,
            :mod:`alphafold_mem.cli.devices_launch`); reading the inputs logs nothing and rejected
            records are not reported, as whoever chose the names checked and reported the inputs.
            ``None``: every target, rejected inputs logged and reported.
        rank_by: rank each finished target's prediction, an ensemble of one (``"plddt"`` or ``"ptm"``,
            :func:`~.ranking.rank_predictions`); ``None``: leave the ranking to the caller (:mod:`.ensemble`).

    Returns:
        :class:`PredictionRun` (``exit_code`` 1 if any input was rejected or any target failed).

    Raises:
        PredictError: bad options, unusable weights, or no input at all (one line).
    """
    clock = StageClock("start-up")  # every second from here on is in one named stage
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    request = _check_options(memory_policy, msa, msa_dir, single_sequence, num_recycles, recycle_early_stop_tolerance)
    weights_path = os.fspath(weights) if weights is not None else str(default_weights_path())
    output_name = output_name or default_output_name(weights_path, seed)
    _check_layout(output_name, rank_by)
    chosen = not isinstance(request, MemoryPolicy)  # the pre-flight chooses the policy per target
    policy = MemoryPolicy(precision=request.precision) if chosen else request
    par, dev, log = Parallel.start(dap, _resolve_device(device), log)
    options = {"preset": preset, "num_recycles": num_recycles, "precision": policy.precision, "seed": seed}
    if recycle_early_stop_tolerance > 0:  # recorded only when set: results of earlier versions still match
        options["recycle_early_stop_tolerance"] = recycle_early_stop_tolerance
    ctx = RunContext(
        out_dir=os.fspath(out_dir),
        device=dev,
        par=par,
        request=request,
        policy=policy,
        chosen=chosen,
        seed=seed,
        weights_path=weights_path,
        options=options,
        output_name=output_name,
        log=log,
        clock=clock,
        stages=Stages(dev, track_cpu=track_memory),
        overwrite=overwrite,
        record_paths=record_paths,
        debug=debug,
        pipeline=pipeline,
        rank_by=rank_by,
    )

    # 1. Collect the targets (nothing written yet), then search (cached in out_dir).
    with clock.stage("inputs"):
        runs, failed = collect(
            ctx, inputs, msa, msa_dir, single_sequence=single_sequence, min_msa_depth=min_msa_depth, names=targets
        )
        check_writable(ctx.out_dir)  # before any search or model work
    with clock.stage("search" if pipeline is not None else "inputs"):
        runs, more = search(ctx, runs, single_sequence=single_sequence, min_msa_depth=min_msa_depth)
    # 2. Skip what is finished.
    with clock.stage("inputs"):
        todo, skipped, conflicts = skip_finished(ctx, runs)
    # 3. Weights and the pre-flight of every target before any model work (rank 0 decides for every
    # rank): one that cannot run with this run's settings (memory budget, residues for DAP) fails here.
    lm = None
    if todo:
        with clock.stage("weights"):
            lm = load_model(
                ctx,
                given=weights is not None,
                preset=preset,
                num_recycles=num_recycles,
                recycle_early_stop_tolerance=recycle_early_stop_tolerance,
                n_todo=len(todo),
            )
        plan_targets(ctx, lm, todo)
    # 4. Run and write each target.
    for k, run in enumerate(todo, 1):
        _run_one(ctx, lm, run, k, len(todo))
    # 5. Rank each finished target's prediction (an ensemble of one).
    with clock.stage("outputs"):
        rank_targets(ctx, todo + skipped)
    # 6. timings.json and the summary.
    results = failed + more + conflicts + [r.result for r in todo + skipped]
    result = finish(ctx, results, skipped=bool(skipped))
    signals.check()  # a signal whose exception Python dropped (in a callback) still ends the run
    return result


def _check_options(memory_policy, msa, msa_dir, single_sequence, num_recycles, tolerance) -> PolicyRequest:
    """The memory request of ``memory_policy``, once the options are checked to go together.

    Raises:
        PredictError: options that do not go together or out of range (one line).
    """
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
    if tolerance < 0:
        raise PredictError(f"--recycle-early-stop-tolerance must be >= 0 Å, got {tolerance}")
    return request


def _check_layout(output_name: str, rank_by: Optional[str]) -> None:
    """Raises PredictError for an ``output_name`` outside the layout (``"{id}/<prediction>"``) or an
    unknown ``rank_by``."""
    folder, _, base = output_name.partition("/")
    if folder != "{id}" or not base or "/" in base or "{" in base:
        raise PredictError(f"output_name {output_name!r}: give '{{id}}/<prediction name>' (the layout: <out>/<id>/)")
    if rank_by is not None and rank_by not in RANK_BY:
        raise PredictError(f"--rank-by {rank_by!r}: choose one of {', '.join(RANK_BY)}")


def _run_one(ctx: RunContext, lm: LoadedModel, run: TargetRun, k: int, n: int) -> None:
    """Run stage and write stage of one target; a failure fails this target only (under DAP, one in
    the ranks' collectives ends the run), reported in one line."""
    signals.check()
    t, r, fit = run.target, run.result, run.fit
    r.outputs = output_paths(ctx.out_dir, ctx.output_name.format(id=t.name), lm.config.heads.pae_enabled)
    start = time.perf_counter()
    failure = None
    reported = isinstance(fit, preflight.Preflight) and not fit.fits  # logged by the pre-flight
    try:
        if isinstance(fit, Exception):  # the estimate itself failed (e.g. out of memory)
            raise fit
        if not fit.fits:
            raise preflight.DoesNotFit(fit.message)
        run.policy = fit.policy
        if getattr(lm.model, "memory_policy", None) != run.policy:
            with ctx.clock.stage("planning"):
                bind(lm.model, run.policy, ctx.par.mesh)  # and device sharding under DAP
        _run_target(ctx, lm, run)
    except Exception as exc:  # noqa: BLE001 - one failing target must not stop the others
        if ctx.par.active and r.phase == "collectives":  # the other ranks wait in a collective: end the run
            raise
        failure = exc
        r.message = failure_message(t, exc)
        if ctx.debug and not reported:
            ctx.log(traceback.format_exc().rstrip())
    rank, message = ctx.par.agree_failure(r.message if failure is not None else None)  # DAP: any rank's
    if message is not None:
        r.status, r.message = "failed", message if rank == 0 else f"{message} (on DAP rank {rank})"
        if not reported:
            ctx.log(f"error: {r.message}")
    r.seconds = round(time.perf_counter() - start, 2)
    if r.status == "ok":
        ctx.log(
            f"[{k}/{n}] {t.name}: {r.length} residues, MSA depth {r.msa_depth}, mean pLDDT {r.mean_plddt:.1f}"
            + (r.message and f", {r.message}")
            + (f", pTM {r.ptm:.3f}" if r.ptm is not None else "")
            + f", {r.seconds:.1f} s"
            + (f", memory policy {policy_name(run.policy)}" if ctx.chosen else "")
        )


def _run_target(ctx: RunContext, lm: LoadedModel, run: TargetRun) -> None:
    """Features, forward and outputs of one target; fills ``run.result`` (raises on any failure)."""
    t = run.target
    batch = features(ctx, run, lm.config)
    sizes = preflight.feature_sizes(lm.config, len(t.sequence), t.msa_depth)
    expected = estimate_seconds(lm.config, sizes, stored_rate(ctx, lm), ctx.par.dap)
    arrays = forward(ctx, run, lm, batch, expected_seconds=expected)
    del batch
    record_rate(ctx, lm, run, ctx.stages.records.get(f"{t.name}/model", {}).get("seconds", 0.0))
    write(ctx, run, lm, arrays)


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
