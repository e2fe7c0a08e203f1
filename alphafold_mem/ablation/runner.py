"""``run_ablation``: the whole grid (inference, training, scaling), a progress bar
over it, rows written as they finish, a re-run that resumes, and ``report.md`` at the end (also after
an interruption, from the partial grid).

Grids (``AblationConfig`` fields left at ``None`` take these):

=================  ==========================================  =========================================
                   default                                     ``quick``
=================  ==========================================  =========================================
techniques         every derived technique                     reference, presets, rows that cannot run
chains             the shipped per-entry chains (7)            the 2 shortest
timing repeats     3                                           2
training steps     6                                           2
scaling N_res      measured 64, 128, 256; predicted            measured 64, 128; predicted 10240
                   1024, 4096, 10240
=================  ==========================================  =========================================

The OpenFold side-by-side rows are measurement of another system, not part of this command:
``scripts/compare_openfold.py --ablation-out DIR`` adds them to a result directory (section
``openfold``) and rewrites its ``report.md``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch
from tqdm.auto import tqdm

from ..io import atomic_write
from ..planner import available_memory
from ..weights import default_weights_path, load_weights
from .chains import REPO_DATA, discover_chains
from .dap import run_dap
from .inference import InferenceRun, run_inference
from .planning import Planner
from .report import load_run_info, save_run_info, write_report
from .results import ResultStore, versions
from .scaling import ScalingRun, run_scaling
from .techniques import Technique, derive_techniques, quick_techniques, select_techniques
from .training import TrainingRun, run_training

__all__ = ["AblationConfig", "SECTIONS", "run_ablation"]

SECTIONS = ("inference", "training", "scaling")


@dataclass
class AblationConfig:
    """Options of one ablation run (see the module docstring for what ``None`` means)."""

    out: Path
    quick: bool = False
    chains: Optional[Sequence[str]] = None
    max_chains: Optional[int] = None
    weights: Optional[str] = None
    techniques: Optional[Sequence[str]] = None
    chunk_sizes: Sequence[int] = (64, 16, 4)
    n_res: Optional[Sequence[int]] = None
    predict_n_res: Optional[Sequence[int]] = None
    training_steps: Optional[int] = None
    train_data: Optional[str] = None
    device: str = "cpu"
    repeats: Optional[int] = None
    threads: int = 1
    seed: int = 0
    sections: Sequence[str] = SECTIONS
    scaling_preset: str = "model_1"
    scaling_n_seq: int = 128
    scaling_n_extra: int = 1024
    planner_timeout: float = 60.0
    command: str = ""

    def resolved(self) -> "AblationConfig":
        """A copy with every ``None`` replaced by the default or ``quick`` grid value."""
        q = self.quick
        pick = lambda value, default, quick: value if value is not None else (quick if q else default)  # noqa: E731
        return dataclasses.replace(
            self,
            out=Path(self.out),
            max_chains=pick(self.max_chains, None, 2),
            repeats=pick(self.repeats, 3, 2),
            training_steps=pick(self.training_steps, 6, 2),
            n_res=tuple(pick(self.n_res, (64, 128, 256), (64, 128))),
            predict_n_res=tuple(pick(self.predict_n_res, (1024, 4096, 10240), (10240,))),
        )


@dataclass
class _Progress:
    total: int
    done: int
    bar: object = field(default=None, repr=False)

    def __post_init__(self):

        self.bar = tqdm(
            total=self.total, initial=self.done, unit="cell", file=sys.stderr, dynamic_ncols=True, desc="ablate"
        )

    def tick(self, label: str, advance: bool = True) -> None:
        """Show ``label``; count one more cell unless ``advance`` is False (a second pass over a cell)."""
        if advance:
            self.bar.update(1)
        self.bar.set_postfix_str(label[:60])

    def sync(self, store: ResultStore, cells) -> None:
        """Set the count to the finished cells (skipped ones included) after a section."""
        self.bar.n = sum(store.done(*c) for c in cells)
        self.bar.refresh()


def _machine() -> str:
    try:
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return f"{os.cpu_count()} CPUs, load average (1/5/15 min) {load}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def run_ablation(
    config: AblationConfig,
    extra_techniques: Sequence[Technique] = (),
    log=lambda line: print(line, file=sys.stderr, flush=True),
) -> Path:
    """Run (or resume) the ablation grid of ``config``; returns the path of ``report.md``.
    Args:
        config: the options; ``None`` fields take the default or quick grid.
        extra_techniques: techniques beyond the derived ones (e.g. a test-only perturbed one); they
            are run whether or not ``config.techniques`` names them.
        log: receives notes (missing MSAs or structures, skipped inputs).

    Raises:
        ValueError: an unknown technique name or section.
        alphafold_mem.predict.PredictError / alphafold_mem.weights.WeightsError: unusable chains or weights.
    """
    cfg = config.resolved()
    unknown = set(cfg.sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown section(s) {sorted(unknown)}; valid: {', '.join(SECTIONS)}")
    torch.set_num_threads(cfg.threads)
    derived = derive_techniques({"chunk_size": tuple(cfg.chunk_sizes)})
    if cfg.techniques:
        techniques = select_techniques(derived, cfg.techniques)
    else:
        techniques = quick_techniques(derived) if cfg.quick else derived
    techniques = list(techniques) + [t for t in extra_techniques if t.name not in {u.name for u in techniques}]
    weights = str(cfg.weights or default_weights_path())
    loaded = load_weights(weights)
    chains = (
        discover_chains(cfg.chains, cfg.max_chains, smallest_first=cfg.quick or cfg.max_chains is not None, log=log)
        if {"inference"} & set(cfg.sections)
        else []
    )
    device = torch.device(cfg.device)
    info = load_run_info(cfg.out)
    meta = {
        "versions": versions(),
        "weights": f"{weights} ({loaded.format}, preset {loaded.config.preset}, sha256 {_sha256(weights)})",
        "device": str(device),
        "threads": cfg.threads,
        "repeats": cfg.repeats,
        "seed": cfg.seed,
    }
    this_run = {"command": cfg.command, "started": _now(), "machine": "at start: " + _machine()}
    info = {"runs": info.get("runs", []) + [this_run], "meta": meta}
    save_run_info(cfg.out, info)
    store = ResultStore(cfg.out, meta["versions"])
    base = {
        "weights": weights,
        "weights_sha256": _sha256(weights),
        "preset": loaded.config.preset,
        "num_recycles": loaded.config.num_recycles,
        "device": str(device),
        "threads": cfg.threads,
        "seed": cfg.seed,
        "repeats": cfg.repeats,
    }
    work = _work_dir(cfg.out)
    planner = Planner(cfg.planner_timeout)
    cells = _cells(cfg, techniques, chains)
    progress = _Progress(len(cells), sum(store.done(*c) for c in cells))
    try:
        if "inference" in cfg.sections:
            model = loaded.model.to(device).eval()
            run = InferenceRun(
                model, weights, device, store, work, base, cfg.seed, cfg.repeats, cfg.threads, progress.tick, planner
            )
            run_inference(run, techniques, chains, dap_runner=run_dap)
            progress.sync(store, cells)
        if "training" in cfg.sections and cfg.training_steps:
            run = TrainingRun(
                loaded.config,
                loaded.model.state_dict(),
                Path(cfg.train_data or REPO_DATA),
                work / "train_index",
                store,
                base,
                cfg.training_steps,
                cfg.seed,
                device.type,
                progress.tick,
            )
            run_training(run, techniques)
            progress.sync(store, cells)
        if "scaling" in cfg.sections:
            budget = 0.5 * available_memory(device)
            run = ScalingRun(
                store,
                {k: base[k] for k in ("device", "threads")},
                cfg.n_res,
                cfg.predict_n_res,
                cfg.scaling_preset,
                cfg.scaling_n_seq,
                cfg.scaling_n_extra,
                device.type,
                budget,
                cfg.seed,
                progress.tick,
                planner,
            )
            run_scaling(run, techniques)
            progress.sync(store, cells)
        this_run["finished"] = _now()
    finally:
        progress.bar.close()
        this_run["machine"] += "; at end: " + _machine()
        save_run_info(cfg.out, info)
        path = write_report(cfg.out, store.rows, info)
    return path


def _work_dir(out: Path) -> Path:
    """``out/work``: intermediates kept for resuming (predictions, training index, DAP runs), ignored by
    git (its own ``.gitignore``), so that ``out`` can be committed as it is."""
    work = out / "work"
    if not (work / ".gitignore").is_file():
        with atomic_write(work / ".gitignore") as tmp:
            Path(tmp).write_text("# alphafold-mem ablate: intermediates for resuming, not results\n*\n")
    return work


def _cells(cfg: AblationConfig, techniques, chains) -> list[tuple[str, str, str]]:
    """Every (section, technique, chain) cell of the grid, for the progress bar."""
    out = []
    if "inference" in cfg.sections:
        out += [("inference", t.name, c.name) for t in techniques for c in chains]
    if "training" in cfg.sections and cfg.training_steps:
        out += [("training", t.name, "train") for t in techniques]
    if "scaling" in cfg.sections:
        sizes = sorted(set(cfg.n_res) | set(cfg.predict_n_res))
        out += [("scaling", t.name, f"n_res={n}") for t in techniques for n in sizes]
    return out
