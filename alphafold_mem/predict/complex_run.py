"""Complexes from FASTA to ranked models with AF2-Multimer weights: :func:`predict_complexes`, which
``alphafold-mem predict`` runs for ``--complex`` inputs and for records whose chains are joined by ``:``.

Every complex of the input (:mod:`.complex_target`) gets its processed features once (per-chain MSAs
from ``msa_dir`` paired by species, AF2-Multimer's rule: :mod:`alphafold_mem.data.multimer_features`;
without ``msa_dir``: from ``msa_search`` (an MSA server or a local search, :mod:`.complex_msas`),
else single-sequence; templates per chain from its folder's hits or a ``--template-db`` search,
:mod:`.complex_templates`), then every model (``--models`` from ``--weights-dir``, or the one
``--weights`` file; one model's weights resident at a time) predicts it ``num_predictions_per_model``
times with seeds ``seed``, ``seed + 1``, ... (AF2-Multimer's default is 5 per model). The predictions
are ranked by ``ranking_confidence = 0.8 * ipTM + 0.2 * pTM`` (AF2-Multimer). Outputs of complex
``<id>`` go to ``<out>/<id>/`` (AF2's layout; files: :mod:`.complex_outputs`):

* ``<model>_pred_<k>.pdb`` / ``.cif`` / ``_scores.json`` / ``_pae.json``: one prediction (``<model>``:
  AF2's model name, ``model_1_multimer_v3``, or the weights file's stem);
* ``ranked_<r>.pdb`` / ``.cif``: the predictions best first;
* ``ranking_debug.json``: ``{"iptm+ptm": {name: ranking confidence}, "order": [names best first]}``;
* ``<id>_scores.json``: pTM, ipTM, ranking confidence, mean pLDDT per chain and the chain-pair ipTM
  matrix of the best prediction, and every prediction with its rank, model and seed;
* ``<id>_pae.json``: the best prediction's PAE over the whole complex (AlphaFold DB layout);
* ``<id>_pae.png`` (chain boundaries drawn) and ``<id>_plddt.png`` (coloured by chain): the best prediction's;
* ``<id>_features.npz`` with ``save_features``: the processed features (AF2's names).

Before the forwards of a complex under a model, its memory pre-flight (:mod:`.complex_plan`, the
monomer route's chooser and budget: ``memory_policy`` ``"auto"`` picks the fastest policy predicted to
fit, a concrete policy is checked; under ``dap=P`` per device of the group) logs its plan line and
binds the policy; a complex that does not fit under any allowed policy fails at once.

A complex that fails (bad input, bad alignments, a pre-flight that does not fit, a forward that fails)
is one ``error:`` line; the others still run.

Parallel runs reuse the monomer route's machinery: ``dap=P`` shares every complex among P processes
(:class:`~.parallel.Parallel`: every rank builds the same features and runs the model on its share
of the representations; rank 0 alone logs and writes; a failure outside the model's collectives
fails that complex on every rank, one inside them ends the run), and ``targets=`` runs only the
named complexes (one rank of ``predict --devices N``, :mod:`alphafold_mem.cli.devices_launch`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..binding import bind
from ..data.errors import InputError, InputNote
from ..data.multimer_features import complex_msa_features
from ..memory.policy import MemoryPolicy, PolicyRequest, as_request
from ..search.settings import SearchError
from ..weights import WeightsError, load_weights
from ..weights.directory import ModelWeights, find_model_weights, model_name_of
from .complex_features import CHAIN_GAP, complex_batch
from .complex_msas import ComplexSearch
from .complex_outputs import rank_complex, relax_predictions, write_prediction
from .complex_plan import ComplexPlan, advise_largest, does_not_fit, plan_complex
from .complex_target import ComplexTarget, collect_complexes
from .complex_templates import complex_templates, template_scores
from .errors import PredictError
from .outputs.complex_files import write_features_npz
from .parallel import Parallel
from .policy_names import policy_name
from .preflight import budget_of, format_bytes
from .results import TargetResult
from .unknown_residues import fill_unknown_backbone

__all__ = ["ComplexRun", "complex_members", "predict_complexes"]


@dataclass
class ComplexRun:
    """Results of :func:`predict_complexes`: per complex the prediction names best first, its memory
    pre-flight under the first model that planned it (:class:`~.complex_plan.ComplexPlan`), one error
    line per rejected or failed complex, one :class:`~.results.TargetResult` per complex (length:
    every chain's residues; ``mean_plddt``/``ptm``: the best prediction's; a ``--devices`` run's summary
    rows), and per complex its templates record (:func:`~.complex_templates.complex_templates`)."""

    out_dir: str
    order: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    results: list[TargetResult] = field(default_factory=list)
    plans: dict[str, ComplexPlan] = field(default_factory=dict)
    templates: dict[str, dict] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when every complex was predicted and ranked, 1 otherwise."""
        return 1 if self.errors else 0


def complex_members(models, weights_dir, weights) -> list[ModelWeights]:
    """The AF2-Multimer weights of the run: models ``models`` from ``weights_dir`` (multimer files
    only), or the one ``weights`` file.

    Raises:
        PredictError: no weights given, options that do not go together, or no multimer file of
            every model asked for (one line).
    """
    if models:
        if weights_dir is None:
            raise PredictError("--models needs --weights-dir DIR (a folder of AF2-Multimer weights)")
        if weights is not None:
            raise PredictError("give --weights-dir with --models, not --weights")
        try:
            return find_model_weights(weights_dir, models, multimer=True)
        except WeightsError as exc:
            raise PredictError(str(exc)) from None
    if weights_dir is not None:
        raise PredictError("--weights-dir needs --models (e.g. --models 1,2,3,4,5)")
    if weights is None:
        raise PredictError(
            "a complex needs AF2-Multimer weights: give --weights FILE (params_model_<k>_multimer_v3.npz or a "
            "multimer checkpoint) or --weights-dir DIR --models 1,2,3,4,5"
        )
    path = os.fspath(weights)
    return [ModelWeights(model_name_of(path), 0, "file", path)]


def _device(device: str) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise PredictError(f"--device {device!r}: {exc}") from None


def _load(member: ModelWeights, preset, num_recycles, tolerance, dev, request: PolicyRequest, log):
    """The member's model on ``dev`` (eval), with the run's recycling settings; one line saying what
    runs (``request``: the memory request, for the line).

    Raises:
        PredictError: unusable or monomer weights (one line naming the file).
    """
    try:
        loaded = load_weights(member.path, preset=preset)
    except WeightsError as exc:
        raise PredictError(str(exc)) from None
    model = loaded.model
    if not model.config.multimer and not model.config.heads.pae_enabled:
        raise PredictError(
            f"{member.path}: monomer weights without a PAE head (preset {model.config.preset}) cannot score "
            "ipTM; a complex needs AF2-Multimer weights (params_model_<k>_multimer_v3.npz or a *_multimer "
            "checkpoint) or monomer pTM weights (params_model_<k>_ptm.npz)"
        )
    cfg = model.config
    if num_recycles is not None:
        cfg = dataclasses.replace(cfg, num_recycles=num_recycles)
    if tolerance is not None:
        cfg = dataclasses.replace(cfg, recycle_early_stop_tolerance=tolerance)
    model.config = cfg
    if not cfg.multimer:
        log(
            f"note: {member.path}: monomer weights on complexes: AF2 runs with a residue-index gap of "
            f"{CHAIN_GAP} between chains (ColabFold's route), ipTM from its PAE head; labelled so in the outputs"
        )
    log(
        f"weights: {member.path} ({loaded.format}, preset {cfg.preset}, "
        f"{'AF2-Multimer' if cfg.multimer else 'monomer, chain gap ' + str(CHAIN_GAP)}); device {dev}, "
        f"{request.precision}, memory policy {_request_name(request)}, budget "
        f"{format_bytes(budget_of(request, cfg, dev))}, up to {cfg.num_recycles} recycle(s), early stop at "
        f"{cfg.recycle_early_stop_tolerance} Å"
    )
    return model.to(dev).eval()


def _request_name(request: PolicyRequest) -> str:
    if isinstance(request, MemoryPolicy) and request.chunk_size != "auto":
        return policy_name(request)
    return "auto (chosen per complex)"


def _plan(t: ComplexTarget, msa_rows: int, model, tag: str, request, dev, run: ComplexRun, planned: dict, par, log):
    """The pre-flight of ``t`` under ``model``'s config (planned once per config, whatever its preset's
    name, the first kept in ``run.plans``; per device of ``par``'s DAP group): the policy to bind, or
    ``None`` after one ``error:`` line counted in ``run.errors`` (the same answer on every rank: the
    plan is computed alike on each)."""
    key = (t.name, dataclasses.replace(model.config, preset=""))  # the name changes no size
    plan = planned.get(key)
    if plan is None:
        try:
            plan = plan_complex(
                t, msa_rows, model.config, request, dev, log, model=tag if t.name in run.plans else None, dap=par.dap
            )
        except Exception as exc:  # noqa: BLE001 - the estimate failed: this complex fails, the batch goes on
            message = f"{t.source}: complex '{t.name}': the memory pre-flight failed: {_one_line(exc)}"
            log(f"error: {message}")
            run.errors.append(message)
            return None
        planned[key] = plan
        run.plans.setdefault(t.name, plan)
        if not plan.fit.fits:
            message = does_not_fit(t, plan.fit)
            log(f"error: {message}")
            run.errors.append(message)
            advise_largest(t, plan, model.config, request, dev, log, dap=par.dap)
    return plan.fit.policy


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _features(t: ComplexTarget, msa_dir, log) -> dict:
    """The processed complex features; input warnings logged; raises InputError on bad alignments."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return complex_msa_features(t.cx, msa_dir)
        finally:
            for w in caught:
                log(f"{'note' if issubclass(w.category, InputNote) else 'warning'}: {w.message}")


def _forward(model, batch: dict, seed: int, dev, par: Parallel) -> dict:
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model({k: v.to(dev) for k, v in batch.items()})
        if not model.config.multimer:  # ipTM, ranking confidence, chain-pair ipTM from the PAE head
            head = model.aux_heads.predicted_aligned_error  # (DAP: on this rank's rows, as in the forward)
            asym = batch["asym_id"].to(dev)
            out.update(head(out["pair"], batch["seq_mask"].to(dev), keep_logits=False, asym_id=asym))
        out = par.gather(model, out, tuple(out))  # DAP: the representation-shaped outputs whole
    arrays = {k: v.detach().float().cpu().numpy() if v.is_floating_point() else v.cpu().numpy() for k, v in out.items()}
    arrays["aatype"] = batch["aatype"].numpy()
    fill_unknown_backbone(arrays, out)  # an X gets N, CA, C, O as in the monomer outputs
    return arrays


def _prepare(
    t: ComplexTarget, msa_dir, pipeline, save_features: bool, run: ComplexRun, par: Parallel, log, search=None
) -> Optional[dict]:
    """The complex's features, templates included (``None`` when it failed, on every rank: logged and
    recorded); rank 0 creates its folder and writes ``<id>_features.npz`` with ``save_features``; with
    ``search`` (:class:`~.complex_msas.ComplexSearch`) its alignments are searched first."""
    result = next(r for r in run.results if r.name == t.name)
    message = None
    fit = par.check_residues(t.cx.num_res)  # device sharding needs more residues than processes
    if fit is not None:
        message = f"{t.source}: complex '{t.name}': {fit.message}"
    else:
        try:
            if search is not None:
                msa_dir = search.alignments(t.cx, run.out_dir, log)
            feats = _features(t, msa_dir, log)
            templates, run.templates[t.name] = complex_templates(t.cx, msa_dir, pipeline, run.out_dir, log)
            feats.update(templates)
            if par.writer:
                target_dir = os.path.join(run.out_dir, t.name)
                os.makedirs(target_dir, exist_ok=True)
                if save_features:
                    write_features_npz(os.path.join(target_dir, f"{t.name}_features.npz"), feats)
        except SearchError as exc:
            message = f"{t.source}: complex '{t.name}': {'MSA server' if search.msa_server else 'search'}: {exc}"
        except (InputError, ValueError, OSError) as exc:
            message = str(exc) if isinstance(exc, InputError) else f"{t.source}: complex '{t.name}': {exc}"
    rank, message = par.agree_failure(message)  # DAP: any rank's failure fails the complex on all
    if message is not None:
        message = message if rank == 0 else f"{message} (on DAP rank {rank})"
        log(f"error: {message}")
        run.errors.append(message)
        result.status, result.message = "failed", message
        return None
    result.msa_depth = int(feats["msa"].shape[0])
    used = template_scores(run.templates.get(t.name), None)["used"]
    log(
        f"complex {t.name}: {t.cx.describe()}, {result.msa_depth} MSA rows, {int(feats['num_paired_rows'])} "
        f"paired, {len(used)} template(s){' (' + ', '.join(used) + ')' if used else ''}"
    )
    return feats


def _predict_one(t: ComplexTarget, feats: dict, tag: str, s: int, model, member, dev, par: Parallel, run: ComplexRun):
    """One prediction of ``t``: ``(scores, None)`` (scores on rank 0 only) or ``(None, error line)``,
    the same answer on every rank. A failure inside the model's collectives (DAP) is raised: the other
    ranks wait in a collective, the launcher ends them."""
    message, scores, phase = None, None, ""
    try:
        batch = complex_batch(t.cx, feats, model.config, seed=s)
        phase = "collectives"
        arrays = _forward(model, batch, s, dev, par)
        phase = ""
        if par.writer:
            target_dir = os.path.join(run.out_dir, t.name)
            templates = template_scores(run.templates.get(t.name), model.config)
            scores = write_prediction(
                target_dir, tag, t, arrays, member=member, seed=s, config=model.config, templates=templates
            )
    except (RuntimeError, ValueError, OSError) as exc:
        if par.active and phase == "collectives":
            raise
        message = f"{t.source}: complex '{t.name}': prediction {tag} failed: {' '.join(str(exc).split())[:300]}"
    rank, message = par.agree_failure(message)
    if message is not None and rank != 0:
        message = f"{message} (on DAP rank {rank})"
    return scores, message


def predict_complexes(
    inputs,
    out_dir,
    *,
    one_complex: bool = False,
    weights=None,
    weights_dir=None,
    models: Optional[list[int]] = None,
    num_predictions_per_model: int = 1,
    seed: int = 0,
    preset: Optional[str] = None,
    num_recycles: Optional[int] = None,
    recycle_early_stop_tolerance: Optional[float] = None,
    device: str = "auto",
    msa_dir=None,
    pipeline=None,
    msa_search: Optional[ComplexSearch] = None,
    save_features: bool = False,
    memory_policy: PolicyRequest = "auto",
    dap: int = 1,
    targets: Optional[list[str]] = None,
    log: Optional[Callable[[str], None]] = None,
    searched: bool = False,
) -> ComplexRun:
    """Predict and rank every complex of ``inputs`` (module docstring).

    Args:
        inputs: a FASTA file, a folder of FASTA files, or a list of these.
        out_dir: output folder (created); complex ``<id>`` writes ``<out_dir>/<id>/``.
        one_complex: every file is one complex (``--complex``), else every record (chains joined by ``:``).
        weights: one AF2-Multimer weights file (AF2 ``.npz``, OpenFold ``.pt`` or our checkpoint).
        weights_dir, models: AF2 model numbers 1-5 from a folder of ``params_model_<k>_multimer_v3.npz``.
        num_predictions_per_model: predictions per model, seeds ``seed`` ... ``seed + K - 1``.
        preset: the preset AF2 files are loaded with (default: from the file).
        num_recycles: recycling iterations after the first (default: the model's; AF2 v2.3 multimer: 20,
            stopped early at ``recycle_early_stop_tolerance``).
        recycle_early_stop_tolerance: Å (default: the model config's, 0.5 for AF2-Multimer).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``...
        msa_dir: per-chain alignment folders (:func:`alphafold_mem.data.multimer_features.entity_folder`);
            ``None``: single-sequence unless ``msa_search``.
        pipeline: :class:`~.stages.PipelineOptions`: template options per chain (``template_db``,
            ``mmcif_dirs``, ``max_templates``...), ``relax`` (:func:`~.complex_outputs.relax_predictions`).
        msa_search: :class:`~.complex_msas.ComplexSearch`: each complex's alignments from an MSA server or
            jackhmmer, written under ``<out_dir>/<id>/msas/`` (not with ``msa_dir`` nor ``dap > 1``).
        save_features: also write ``<id>_features.npz``.
        memory_policy: ``"auto"``, an :class:`~alphafold_mem.AutoPolicy` (precision, ``max_memory``
            bytes) or a :class:`~alphafold_mem.MemoryPolicy` (checked; ``chunk_size="auto"`` sized by
            the planner), as for monomers (:mod:`.preflight`).
        dap: processes sharing every complex (dynamic axial parallelism; every process calls this
            function in an initialised process group, :mod:`alphafold_mem.cli.dap_launch`); rank 0
            logs, writes and returns the complete run. A complex of ``dap`` residues or fewer fails.
        targets: run only the complexes of these names; the inputs are then not reported (whoever
            chose the names did). ``None``: every complex, rejected ones logged and reported.
        log: one line per message (default: stderr).
        searched: ``msa_search`` and the template search ran before this run (``--dap``'s launcher,
            :mod:`.complex_presearch`): their files are read, nothing is searched (also under ``dap > 1``).

    Returns:
        :class:`ComplexRun` (``exit_code`` 1 when any complex was rejected or failed).

    Raises:
        PredictError: bad options (``memory_policy`` included; a template search under ``dap > 1``),
            unusable or monomer weights, no complex in the input, or ``dap > 1`` without a process
            group (one line).
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        request = as_request(memory_policy)
    except ValueError as exc:
        raise PredictError(f"memory_policy: {exc}") from None
    if num_predictions_per_model < 1:
        raise PredictError(f"--num-predictions-per-model must be >= 1, got {num_predictions_per_model}")
    if num_recycles is not None and num_recycles < 0:
        raise PredictError(f"--num-recycles must be >= 0, got {num_recycles}")
    if dap > 1 and not searched and pipeline is not None and pipeline.template_db is not None:
        raise PredictError("--dap does not run the template search: search first, then give the hits in --msa-dir")
    if msa_search is not None and (msa_dir is not None or (dap > 1 and not searched)):
        raise PredictError(f"complexes take --msa-server/--db without {'--msa-dir' if msa_dir else '--dap'}")
    msa_search = dataclasses.replace(msa_search, searched=True) if msa_search and searched else msa_search
    members = complex_members(models, weights_dir, weights)
    par, dev, log = Parallel.start(dap, _device(device), log)
    quiet = targets is not None  # one share of a --devices run: the launcher reported the inputs
    found, rejected = collect_complexes(inputs, one_complex=one_complex, log=(lambda _: None) if quiet else log)
    if quiet:
        found, rejected = [t for t in found if t.name in set(targets)], []
    if not found and not rejected and targets is None:
        raise PredictError(f"{inputs}: no FASTA input with a complex")
    run = ComplexRun(os.fspath(out_dir), errors=[message for _, message in rejected])
    run.results = [TargetResult(name, status="invalid", message=m, order=-1) for name, m in rejected]
    run.results += [TargetResult(t.name, length=t.cx.num_res, order=t.order) for t in found]
    if msa_dir is None and msa_search is None and found:
        log(f"note: no --msa-dir: {len(found)} complex(es) run in single-sequence mode (no MSA, nothing paired)")
    if msa_search is not None and not searched:
        msa_search.note_public_server(len(found), log)
    features: dict[str, dict] = {}
    for t in found:
        feats = _prepare(t, msa_dir, pipeline, save_features, run, par, log, msa_search)
        if feats is not None:
            features[t.name] = feats
    results = {r.name: r for r in run.results}
    seeds = [seed + k for k in range(num_predictions_per_model)]
    done: dict[str, list[str]] = {name: [] for name in features}
    best: dict[str, dict] = {}
    planned: dict = {}
    for member in members:
        model = _load(member, preset, num_recycles, recycle_early_stop_tolerance, dev, request, log)
        tag_model = member.name if member.number else model_name_of(member.path, model.config.preset)
        for t in found:
            if t.name not in features or results[t.name].status == "failed":
                continue
            msa_rows = features[t.name]["msa"].shape[0]
            policy = _plan(t, msa_rows, model, tag_model, request, dev, run, planned, par, log)
            if policy is None:
                results[t.name].status, results[t.name].message = "failed", run.errors[-1]
                continue
            if getattr(model, "memory_policy", None) != policy or par.active:
                bind(model, policy, par.mesh if par.active else None)  # DAP: device sharding too
            for k, s in enumerate(seeds):
                tag = f"{tag_model}_pred_{k}"
                start = time.perf_counter()
                scores, message = _predict_one(t, features[t.name], tag, s, model, member, dev, par, run)
                seconds = time.perf_counter() - start
                results[t.name].seconds = round((results[t.name].seconds or 0.0) + seconds, 2)
                if message is not None:
                    log(f"error: {message}")
                    run.errors.append(message)
                    results[t.name].status, results[t.name].message = "failed", message
                    break
                done[t.name].append(tag)
                if scores is not None:  # rank 0
                    best.setdefault(t.name, {})[tag] = scores
                    log(
                        f"{t.name} {tag} (seed {s}): ipTM {scores['iptm']:.3f}, pTM {scores['ptm']:.3f}, "
                        f"ranking confidence {scores['ranking_confidence']:.3f}, mean pLDDT "
                        f"{scores['mean_plddt']:.1f}, {seconds:.1f} s"
                    )
        del model
    for t in found:
        if done.get(t.name) and results[t.name].status != "failed" and par.writer:
            relax_predictions(os.path.join(run.out_dir, t.name), done[t.name], pipeline, log)  # after every forward
            run.order[t.name] = rank_complex(os.path.join(run.out_dir, t.name), t, done[t.name])
            top = best[t.name][run.order[t.name][0]]
            results[t.name].mean_plddt, results[t.name].ptm = top["mean_plddt"], top["ptm"]
            log(f"{t.name}: ranked {', '.join(run.order[t.name])} -> {os.path.join(run.out_dir, t.name)}")
    return run
