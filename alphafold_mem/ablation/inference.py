"""Inference ablation on real chains: per technique and chain, the activation peak by two independent
measures, the planner's prediction, time, deviation from the fp32 reference run and accuracy against
the experimental structure.

Per chain (one process, the same weights and features for every technique):

1. the reference runs first; its prediction is kept (``work/predictions/<chain>/reference.npz``) so a
   resumed run compares against the same numbers;
2. each technique: one forward under :func:`alphafold_mem.memory.track_peak` (the storage counter;
   on CUDA also ``torch.cuda.max_memory_allocated``) gives the peak and the prediction; the planner
   (:func:`alphafold_mem.planner.estimate_breakdown`) predicts the peak for the same sizes;
3. timing: ``repeats`` rounds, each running every technique once (interleaved, so a change of load
   hits all alike); the median per technique.

On CPU the second memory measure is the peak-RSS growth of one forward in a fresh subprocess per
technique (:mod:`.rss_worker`, all chains in it, after a warm-up forward).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from ..binding import bind
from ..memory import MemoryPolicy, track_peak
from ..memory.host import MMAP_ENV
from ..planner import batch_sizes
from .chains import Chain, chain_features, experimental_chain
from .planning import Planner, PlannerTimeout
from .results import ResultStore, row
from .scores import DEVIATION_MEASURES, Prediction, accuracy, deviation
from .techniques import Technique

__all__ = ["InferenceRun", "run_inference", "forward"]

SECTION = "inference"


@dataclass
class InferenceRun:
    """What the inference section needs: the loaded model, where to write, how to measure."""

    model: torch.nn.Module
    weights: str
    device: torch.device
    store: ResultStore
    work_dir: Path  # predictions kept for resuming (``DIR/work``)
    config: dict  # the shared part of the ``config`` column
    seed: int = 0
    repeats: int = 3
    threads: int = 1
    tick: Callable[..., None] = lambda label, advance=True: None
    planner: Planner = field(default_factory=Planner)


def forward(model: torch.nn.Module, batch: dict, device: torch.device) -> dict:
    """One inference forward (the model enters its own autocast), synchronised on CUDA."""
    with torch.inference_mode():
        out = model(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


@contextlib.contextmanager
def _bound(run: InferenceRun, t: Technique):
    bind(run.model, t.policy)
    try:
        with t.prepare(run.model):
            yield
    finally:
        bind(run.model, MemoryPolicy.reference())


def _pred_path(run: InferenceRun, chain: Chain, t: Technique) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_=." else "_" for ch in t.name)
    return run.work_dir / "predictions" / chain.name / f"{safe}.npz"


def _cfg(run: InferenceRun, chain: Chain, batch: dict) -> dict:
    n_res, n_seq, n_extra, n_templ = batch_sizes(batch)
    return {**run.config, **chain.describe(), "n_seq": n_seq, "n_extra": n_extra, "n_templ": n_templ}


def _fail_reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in text:
        return f"out of memory: {text}"
    return f"{type(exc).__name__}: {text}"


def _failed_row(t: Technique, chain: Chain, exc: BaseException) -> dict:
    """The row of a technique that failed on a chain (no measure), with the reason in one line."""
    return row(
        SECTION,
        t.name,
        chain.name,
        status="failed",
        reason=_fail_reason(exc),
        n_res=chain.n_res,
        policy=t.policy_json(),
    )


def _tracked(run: InferenceRun, t: Technique, batch: dict) -> tuple[Prediction, int, Optional[int]]:
    """Prediction, storage-counter peak and (CUDA) allocator peak of one forward under ``t``."""
    cuda = run.device.type == "cuda"
    with _bound(run, t):
        if cuda:
            torch.cuda.synchronize(run.device)
            base = torch.cuda.memory_allocated(run.device)
            torch.cuda.reset_peak_memory_stats(run.device)
        with track_peak() as mem:  # the storage counter (counts CUDA storages too)
            out = forward(run.model, batch, run.device)
        alloc = torch.cuda.max_memory_allocated(run.device) - base if cuda else None
        return Prediction.from_output(out), mem.peak, alloc


def _predicted(run: InferenceRun, t: Technique, batch: dict) -> float:
    return run.planner.estimate(run.model.config, t.policy, *batch_sizes(batch)).activations


def _measure_rows(
    run: InferenceRun, t: Technique, chain: Chain, batch: dict, ref: Optional[Prediction], is_reference: bool = False
) -> list[dict]:
    """The rows of one tracked run of ``t`` on ``chain`` (peaks, predicted peak, deviation, accuracy);
    ``ref`` is the reference prediction (None: the reference itself, or its run failed)."""
    pred, peak, alloc = _tracked(run, t, batch)
    pred.save(_pred_path(run, chain, t))
    if is_reference:
        ref = pred
    common = dict(n_res=chain.n_res, policy=t.policy_json(), config=_cfg(run, chain, batch))
    rows = [
        row(SECTION, t.name, chain.name, "peak_counter_bytes", peak, **common),
        row(SECTION, t.name, chain.name, "mean_plddt", float(pred.plddt.mean()), **common),
    ]
    if alloc is not None:
        rows.append(
            row(
                SECTION,
                t.name,
                chain.name,
                "peak_rss_bytes",
                alloc,
                **common,
                reason="CUDA: torch.cuda.max_memory_allocated above the allocated bytes before the forward",
            )
        )
    try:
        rows.append(row(SECTION, t.name, chain.name, "predicted_peak_bytes", _predicted(run, t, batch), **common))
    except PlannerTimeout as exc:
        rows.append(row(SECTION, t.name, chain.name, "predicted_peak_bytes", None, reason=str(exc), **common))
    except Exception as exc:  # noqa: BLE001 - a planner failure is a row, not a crash
        rows.append(
            row(
                SECTION, t.name, chain.name, "predicted_peak_bytes", status="failed", reason=_fail_reason(exc), **common
            )
        )
    devs = deviation(pred, ref) if ref is not None else dict.fromkeys(DEVIATION_MEASURES)
    for k, v in devs.items():
        why = "the reference run failed" if ref is None else "the model has no pTM head"
        rows.append(row(SECTION, t.name, chain.name, k, v, **common, reason="" if v is not None else why))
    true, why = experimental_chain(chain)
    if true is None:
        rows.append(row(SECTION, t.name, chain.name, "lddt_ca", None, reason=why, **common))
        return rows
    for label, p in (("", pred), ("_reference", ref)):
        if p is None:
            continue
        for k, v in accuracy(p, true.atom37_positions, true.atom37_mask, chain.sequence).items():
            rows.append(row(SECTION, t.name, chain.name, k + label, v, **common))
    return rows


def _attempt(run: InferenceRun, t: Technique, chain: Chain, fn: Callable[[], list[dict]]) -> bool:
    """Add ``fn()``'s rows, or one ``failed`` row with the reason; True when it worked."""
    try:
        run.store.add(fn())
        return True
    except Exception as exc:  # noqa: BLE001 - one technique failing must not stop the grid
        run.store.add([_failed_row(t, chain, exc)])
        return False


def _time(run: InferenceRun, techniques: Sequence[Technique], chain: Chain, batch: dict) -> list[dict]:
    times: dict[str, list[float]] = {t.name: [] for t in techniques}
    for r in range(run.repeats):
        for t in techniques:
            run.tick(f"time {chain.name} {t.name} ({r + 1}/{run.repeats})", False)
            with _bound(run, t):
                t0 = time.perf_counter()
                forward(run.model, batch, run.device)
                times[t.name].append(time.perf_counter() - t0)
    return [
        row(
            SECTION,
            t.name,
            chain.name,
            "seconds",
            statistics.median(times[t.name]),
            n_res=chain.n_res,
            policy=t.policy_json(),
            config={
                **_cfg(run, chain, batch),
                "times": times[t.name],
                "interleaved_with": [u.name for u in techniques],
            },
        )
        for t in techniques
    ]


def run_inference(
    run: InferenceRun, techniques: Sequence[Technique], chains: Sequence[Chain], dap_runner: Optional[Callable] = None
) -> None:
    """The inference grid: every technique on every chain; rows go to ``run.store`` as they finish."""
    runnable = [t for t in techniques if t.skip_reason(SECTION, run.device.type) is None and t.dap == 1]
    ref_t = next(t for t in techniques if t.name == "reference")
    for chain in chains:
        for t in techniques:
            reason = t.skip_reason(SECTION, run.device.type)
            if reason and not run.store.done(SECTION, t.name, chain.name):
                run.store.add(
                    [
                        row(
                            SECTION,
                            t.name,
                            chain.name,
                            status="skipped",
                            reason=reason,
                            n_res=chain.n_res,
                            policy=t.policy_json(),
                        )
                    ]
                )
        todo = [t for t in runnable if not run.store.done(SECTION, t.name, chain.name, "peak_counter_bytes")]
        untimed = [t for t in runnable if not run.store.done(SECTION, t.name, chain.name, "seconds")]
        if not (todo or untimed):
            continue
        batch = {k: v.to(run.device) for k, v in chain_features(chain, run.model.config, run.seed).items()}
        ref_path = _pred_path(run, chain, ref_t)
        if ref_t in todo or not ref_path.is_file():
            run.tick(f"run {chain.name} reference")
            _attempt(run, ref_t, chain, lambda: _measure_rows(run, ref_t, chain, batch, None, is_reference=True))
            todo = [t for t in todo if t is not ref_t]
        ref = Prediction.load(ref_path) if ref_path.is_file() else None
        for t in todo:
            run.tick(f"run {chain.name} {t.name}")
            _attempt(run, t, chain, lambda: _measure_rows(run, t, chain, batch, ref))
        ok = [t for t in untimed if run.store.done(SECTION, t.name, chain.name, "peak_counter_bytes")]
        if ok:
            run.store.add(_time(run, ok, chain, batch))
    for t in techniques:
        if t.dap > 1 and t.skip_reason(SECTION, run.device.type) is None:
            _dap_rows(run, t, chains, ref_t, dap_runner)
    if run.device.type == "cpu":
        # policy -> {chain: bytes}: one fresh process per distinct policy, also over a resume (its kept
        # rows are this run's)
        measured: dict = {}
        for t in runnable:
            for r in run.store.get(SECTION, "peak_rss_bytes", t.name):
                if r["value"] is not None:
                    measured.setdefault(t.policy, {})[r["chain"]] = r["value"]
        for t in runnable:
            missing = [
                c
                for c in chains
                if not run.store.done(SECTION, t.name, c.name, "peak_rss_bytes")
                and run.store.done(SECTION, t.name, c.name, "peak_counter_bytes")
            ]
            if missing:
                run.tick(f"rss {t.name}", False)
                run.store.add(_rss_rows(run, t, missing, measured))


def _dap_rows(run: InferenceRun, t: Technique, chains: Sequence[Chain], ref_t: Technique, dap_runner) -> None:
    """``t``'s rows (``t.dap`` > 1) for the chains not done yet that have a reference prediction: one
    ``dap_runner`` call over all of them (it starts the P ranks once per batch, not once per chain)."""
    todo = [c for c in chains if not run.store.done(SECTION, t.name, c.name) and _pred_path(run, c, ref_t).is_file()]
    if not todo:
        return
    run.tick(f"dap {t.name} ({len(todo)} chains)", False)
    refs = {c.name: Prediction.load(_pred_path(run, c, ref_t)) for c in todo}
    try:
        rows = dap_runner(run, t, todo, refs)
    except Exception as exc:  # noqa: BLE001 - one technique failing must not stop the grid
        rows = [_failed_row(t, c, exc) for c in todo]
    run.store.add(rows)
    for _ in {r["chain"] for r in rows}:
        run.tick(f"dap {t.name}")


def _rss_rows(run: InferenceRun, t: Technique, chains: Sequence[Chain], measured: dict) -> list[dict]:
    """Peak-RSS growth per chain from one fresh subprocess (:mod:`.rss_worker`) per policy; a
    technique whose policy was measured already in this run (or in the run it resumes: ``measured``
    is seeded from the kept rows) reuses that process's numbers (its ``prepare`` hook, a weights
    perturbation, does not change memory and does not run there)."""

    def rows(values: dict, config: Optional[dict], **fields) -> list[dict]:
        return [
            row(
                SECTION,
                t.name,
                c.name,
                "peak_rss_bytes",
                values.get(c.name),
                n_res=c.n_res,
                policy=t.policy_json(),
                config=None if config is None else {**run.config, **c.describe(), **config},
                **fields,
            )
            for c in chains
        ]

    known = measured.get(t.policy, {})
    if all(c.name in known for c in chains):
        return rows(known, {}, reason="same policy as a row measured before in this run (or the run it resumes)")
    result, failure = _rss_worker(run, t, chains)
    if failure:
        return rows({}, None, status="failed", reason=failure)
    measured.setdefault(t.policy, {}).update(result)
    note = "measured without the technique's prepare hook" if t.perturbed else ""
    measure = f"VmHWM growth, fresh process, MALLOC_MMAP_THRESHOLD_={MMAP_ENV['MALLOC_MMAP_THRESHOLD_']}"
    return rows(result, {"measure": measure}, reason=note)


def _rss_worker(run: InferenceRun, t: Technique, chains: Sequence[Chain]) -> tuple[dict, str]:
    """``({chain name: peak-RSS growth in bytes}, "")`` from one :mod:`.rss_worker` process under
    :data:`~alphafold_mem.memory.host.MMAP_ENV`, or ``({}, why it failed)``."""
    job = {
        "weights": run.weights,
        "policy": dataclasses.asdict(t.policy),
        "seed": run.seed,
        "threads": run.threads,
        "chains": [
            dataclasses.asdict(c, dict_factory=lambda kv: {k: v for k, v in kv if not k.startswith("_")})
            for c in chains
        ],
    }
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        **MMAP_ENV,
        "OMP_NUM_THREADS": str(run.threads),
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        proc = subprocess.run(
            [sys.executable, "-m", "alphafold_mem.ablation.rss_worker", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=3600,
        )
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return {}, f"RSS worker: {tail}"[:400]
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""
