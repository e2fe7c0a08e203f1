"""Scaling ablation: inference activation peak against N_res per technique, measured where it fits
this machine and predicted by the planner up to 10,000+ residues, beside published anchors.

Model: ``scaling_preset`` (default ``model_1``: AF2's channel sizes) without templates, one recycling
iteration, N_seq / N_extra fixed (default 128 / 1024, as ``scripts/bench_memory.py``). Inference
blocks all have the same memory profile, so the activation peak of the full-depth model is that of
two blocks per stack: the measurement runs two Evoformer and two extra-MSA blocks with random weights
on :func:`alphafold_mem.testing.random_features`; the planner is given the full-depth config (its
``predicted_total_bytes`` adds the full model's parameters and the inputs). A measurement whose
predicted total exceeds ``measure_budget`` bytes (default half the free host memory) is not
attempted: a row with that reason. On CPU the measurement runs with ``measure_threads`` torch threads
(default: every core): it times nothing, and the storage counter's peak does not depend on the thread
count (the same bytes at 1 and 2 threads for the reference, chunk 4 and ``low_memory_inference()`` at
N_res 64 and 128), while the section runs up to 2x faster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..binding import bind
from ..config import model_config
from ..memory import MemoryPolicy, track_peak
from ..model import AlphaFold
from ..testing import random_features
from ..units import format_gib
from .planning import Planner, PlannerTimeout
from .results import ResultStore, row
from .techniques import Technique

__all__ = ["ANCHORS", "ScalingRun", "run_scaling", "scaling_configs"]

SECTION = "scaling"

#: Published single-device inference records: (label, N_res, bytes, source). Each at its authors' own
#: settings (MSA depth, precision, chunking), not ours: drawn for orientation.
ANCHORS = (
    (
        "FastFold: 10,000 residues in 61 GB (bf16, one 80 GB A100)",
        10_000,
        61e9,
        "Cheng et al., FastFold (2022), arXiv:2203.00854",
    ),
    ("OpenFold: ~4,600 residues on a 40 GB A100", 4_600, 40e9, "Ahdritz et al., OpenFold, Nature Methods (2024)"),
)


@dataclass
class ScalingRun:
    """What the scaling section needs."""

    store: ResultStore
    config: dict
    n_res: Sequence[int] = (64, 128, 256)
    predict_n_res: Sequence[int] = (1024, 4096, 10240)
    preset: str = "model_1"
    n_seq: int = 128
    n_extra: int = 1024
    device: str = "cpu"
    measure_budget: float = 0.0
    seed: int = 0
    tick: Callable[..., None] = lambda label, advance=True: None
    planner: Planner = field(default_factory=Planner)
    measure_threads: int = field(default_factory=lambda: os.cpu_count() or 1)


def scaling_configs(preset: str):
    """``(full-depth config for the planner, two-block config for the measurement)``."""
    full = model_config(preset, **{"template.enabled": False, "num_recycles": 0})
    measured = model_config(
        preset, **{"template.enabled": False, "num_recycles": 0, "evoformer.num_blocks": 2, "extra_msa.num_blocks": 2}
    )
    return full, measured


def _key(n: int) -> str:
    return f"n_res={n}"


def run_scaling(run: ScalingRun, techniques: Sequence[Technique]) -> None:
    """Predicted peaks at every size and measured peaks at ``run.n_res`` (where they fit), per technique."""
    full, small = scaling_configs(run.preset)
    cfg = {
        **run.config,
        "preset": run.preset,
        "n_seq": run.n_seq,
        "n_extra": run.n_extra,
        "n_templ": 0,
        "measured_blocks": "2 Evoformer + 2 extra-MSA (random weights)",
        "seed": run.seed,
        "measure_threads": run.measure_threads,
    }
    sizes = sorted(set(run.n_res) | set(run.predict_n_res))
    model = None
    for t in techniques:
        reason = t.skip_reason(SECTION, run.device) or (t.skip_reason("inference", run.device))
        if t.perturbed:
            reason = reason or "test-only technique: its memory is the reference's"
        for n in sizes:
            key, common = _key(n), dict(n_res=n, policy=t.policy_json(), config=cfg)
            if reason:
                if not run.store.done(SECTION, t.name, key):
                    run.store.add([row(SECTION, t.name, key, status="skipped", reason=reason, **common)])
                continue
            rows = []
            est = None
            if not run.store.done(SECTION, t.name, key, "predicted_peak_bytes"):
                run.tick(f"predict {t.name} N_res {n}")
                try:
                    est = run.planner.estimate(full, t.policy, n, run.n_seq, run.n_extra, 0)
                    rows += [
                        row(SECTION, t.name, key, "predicted_peak_bytes", est.activations, **common),
                        row(SECTION, t.name, key, "predicted_total_bytes", est.total, **common),
                    ]
                except PlannerTimeout as exc:  # not retried on resume: it would time out again
                    rows.append(
                        row(
                            SECTION,
                            t.name,
                            key,
                            "predicted_peak_bytes",
                            status="skipped",
                            **common,
                            reason=f"{exc} (it traces every chunk iteration; raise --planner-timeout)",
                        )
                    )
                except Exception as exc:  # noqa: BLE001 - a planner failure is a row
                    rows.append(
                        row(
                            SECTION,
                            t.name,
                            key,
                            "predicted_peak_bytes",
                            status="failed",
                            **common,
                            reason=f"{type(exc).__name__}: {str(exc)[:200]}",
                        )
                    )
            if n in run.n_res and not run.store.done(SECTION, t.name, key, "measured_peak_bytes"):
                total = est.total if est is not None else run.store.value(SECTION, "predicted_total_bytes", t.name, key)
                if total is not None and run.measure_budget and total > run.measure_budget:
                    rows.append(
                        row(
                            SECTION,
                            t.name,
                            key,
                            "measured_peak_bytes",
                            None,
                            **common,
                            reason=f"not measured: predicted {format_gib(total, 1)} exceeds the measurement "
                            f"budget {format_gib(run.measure_budget, 1)} on this machine",
                        )
                    )
                else:
                    run.tick(f"measure {t.name} N_res {n}", False)
                    model = model or _model(small, run.seed, run.device)
                    try:
                        rows.append(
                            row(
                                SECTION,
                                t.name,
                                key,
                                "measured_peak_bytes",
                                _measure(model, t.policy, n, run, small),
                                **common,
                            )
                        )
                    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: a row
                        rows.append(
                            row(
                                SECTION,
                                t.name,
                                key,
                                "measured_peak_bytes",
                                status="failed",
                                **common,
                                reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}",
                            )
                        )
            if rows:
                run.store.add(rows)


def _model(config, seed: int, device: str) -> AlphaFold:
    torch.manual_seed(seed)
    return AlphaFold(config).eval().to(device)


def _measure(model: AlphaFold, policy: MemoryPolicy, n: int, run: ScalingRun, config) -> int:
    batch = {k: v.to(run.device) for k, v in random_features(config, n, run.n_seq, run.n_extra, seed=run.seed).items()}
    bind(model, policy)
    threads = torch.get_num_threads()
    torch.set_num_threads(run.measure_threads)
    try:
        with torch.inference_mode(), track_peak(run.device if run.device == "cuda" else None) as mem:
            model(batch)
        return mem.peak
    finally:
        torch.set_num_threads(threads)
        bind(model, MemoryPolicy.reference())
