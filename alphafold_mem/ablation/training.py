"""Training ablation: K steps of fine-tuning per technique from the same weights and seed on the
shipped training chains (or ``--train-data``), through the project's own trainer
(:class:`alphafold_mem.train.AlphaFoldLightning`, :func:`~alphafold_mem.train.build_trainer`).

Per technique: the loss of every step (the AF2 loss as trained, times sqrt(crop size)); its largest
relative deviation from the reference curve; the median step time; the held-out lDDT-Cα after the K
steps (the trained weights, not the EMA: K is too small for an average to move); and the peak of one
training step (forward, AF2 loss, backward) by the storage counter, on the first training batch
after the K steps that holds a template (of the first :data:`TEMPLATE_SEARCH_BATCHES`; else the first
batch). Techniques map onto training as :mod:`.techniques` says: ``precision=bf16`` is the trainer's
``bf16-mixed``, the policy's own precision stays fp32.

Templates are trained as ``alphafold-mem train`` trains them (:mod:`alphafold_mem.data.training_templates`):
hit files in the training data's alignment folders (``pdb70_hits.hhr``, ``hmm_output.sto``,
``pdb_hits.sto``), template mmCIFs from ``<train data>/templates/`` when present, else from its
structure folder (``mmcif/`` or ``pdb_mmcif/``, as OpenFold trains with its mmCIF directory as the
template directory); :func:`template_options`. The rows say how many chains had a hit file and how
many templates the measured batch held; a chain without hits trains with one masked placeholder.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from lightning.pytorch.callbacks import Callback

from ..memory import track_peak
from ..train import AF2DataModule, AlphaFoldLightning, TrainConfig, build_trainer, evaluate_lddt
from ..train.config import DEFAULT_HELD_OUT
from ..train.data_module import DataOptions
from .results import ResultStore, row
from .techniques import TRAINER_PRECISION, Technique

__all__ = ["StepRecorder", "TrainingRun", "run_training", "template_options", "train_config"]

SECTION = "training"
#: Training batches searched for one holding a template, for the peak measurement.
TEMPLATE_SEARCH_BATCHES = 16


class StepRecorder(Callback):
    """Loss (``nan`` for a skipped step) and wall time of every training step."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.seconds: list[float] = []
        self._t0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seconds.append(time.perf_counter() - self._t0)
        self.losses.append(float(outputs["loss"]) if outputs else float("nan"))


def train_config(seed: int = 0, lr: float = 1e-3) -> TrainConfig:
    """The fine-tuning settings of every technique: AF2's peak learning rate without warm-up (so K
    steps move the weights), clipping 0.1, the default held-out ids, no validation during training."""
    return TrainConfig(lr=lr, warmup_steps=0, seed=seed, held_out=DEFAULT_HELD_OUT, val_every_steps=0)


def template_options(data_dir: Path) -> DataOptions:
    """The training templates ``data_dir`` gives (see the module docstring): :class:`DataOptions`
    with its template mmCIF folder, or without templates when it has no mmCIF folder."""
    data_dir = Path(data_dir)
    own = data_dir / "templates"
    found = [own] if own.is_dir() else [data_dir / d for d in ("mmcif", "pdb_mmcif") if (data_dir / d).is_dir()]
    return DataOptions(template_mmcif_dirs=tuple(str(d) for d in found))


@dataclass
class TrainingRun:
    """What the training section needs."""

    model_config: object
    state_dict: dict
    data_dir: Path
    cache_dir: Path
    store: ResultStore
    config: dict
    steps: int = 4
    seed: int = 0
    device: str = "cpu"
    tick: Callable[..., None] = lambda label, advance=True: None
    data_options: Optional[DataOptions] = None  # None: template_options(data_dir)


def _measured_batch(dm: AF2DataModule):
    """The first training batch holding a template among the first :data:`TEMPLATE_SEARCH_BATCHES`
    (the first batch when none does, without templates, or when no training chain has a hit file)."""
    ds, first = dm.train_set, None
    search = ds.templates is not None and any(ds.hit_file(e) is not None for e in ds.entries)
    if search:
        dm.max_steps = max(dm.max_steps, TEMPLATE_SEARCH_BATCHES)  # one loader pass covers the search
    for k, batch in enumerate(dm.train_dataloader()):
        if first is None:
            first = batch
        if not search:
            break
        if batch.features["template_mask"].sum() > 0:
            return batch
        if k + 1 >= TEMPLATE_SEARCH_BATCHES:
            break
    return first


def _tracked_step(module: AlphaFoldLightning, dm: AF2DataModule, precision: str, device: str) -> tuple[int, int]:
    """``(peak bytes, templates in the batch)``: the storage-counter peak of one training step
    (forward, AF2 loss, backward) on :func:`_measured_batch`."""
    batch = _measured_batch(dm).to(torch.device(device))
    templates = int(batch.features["template_mask"][..., 0].sum()) if "template_mask" in batch.features else 0
    model = module.model.train()
    model.zero_grad(set_to_none=True)
    autocast = torch.autocast(device, dtype=torch.bfloat16) if precision == "bf16-mixed" else contextlib.nullcontext()
    with track_peak(device if device == "cuda" else None) as mem:
        with autocast:  # the step's forward as training runs it (sampled recycling over the trailing dim)
            out, feats = module.step_forward(dict(batch.features), 0)
            feats["use_clamped_fape"] = torch.ones(feats["aatype"].shape[0], device=device)
            loss, _ = module.loss_fn(out, feats)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return mem.peak, templates


def _template_note(dm: AF2DataModule, templates: int) -> str:
    """What the measured step saw of the template stack, for the peak row."""
    ds = dm.train_set
    if ds.templates is None:
        return "no templates (the model has no template stack, or the training data no mmCIF folder)"
    with_hits = sum(ds.hit_file(e) is not None for e in ds.entries)
    return (
        f"measured on a batch holding {templates} template(s); "
        f"{with_hits} of {len(ds.entries)} training chains have a template hit file"
    )


def _one(
    run: TrainingRun, t: Technique, tmp: Path, options: DataOptions
) -> tuple[StepRecorder, Optional[float], tuple[int, str], str]:
    """Train ``t`` for ``run.steps`` steps: (recorder, held-out lDDT-Cα, (step peak, what it saw of the
    templates), trainer precision)."""
    import lightning as L  # heavy: Lightning takes seconds to import; only the training section needs it

    precision = TRAINER_PRECISION[t.policy.precision]
    L.seed_everything(run.seed, workers=True, verbose=False)
    tc = train_config(run.seed)
    module = AlphaFoldLightning(run.model_config, tc, t.policy.replace(precision="fp32"))
    module.model.load_state_dict(run.state_dict)
    dm = AF2DataModule(
        run.data_dir, run.model_config, tc, cache_dir=run.cache_dir, max_steps=run.steps, options=options
    )
    rec = StepRecorder()
    trainer = build_trainer(
        tmp / t.name.replace("/", "_"),
        run.steps,
        precision=precision,
        devices=1,
        accelerator="gpu" if run.device == "cuda" else "cpu",
        val_every_steps=None,
        ckpt_every_steps=10**9,
        loggers=(),
        callbacks=[rec],
        progress_bar=False,
    )
    with t.prepare(module.model), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)
        module.model.to(run.device)
        held = None
        if dm.val_set is not None and len(dm.val_set):
            held = evaluate_lddt(module.model, dm.val_set)["lddt_ca"]
        peak, templates = _tracked_step(module, dm, precision, run.device)
    return rec, held, (peak, _template_note(dm, templates)), precision


def run_training(run: TrainingRun, techniques: Sequence[Technique]) -> None:
    """The training grid: one row group per technique, the reference first (the deviation needs its
    curve); rows go to ``run.store`` as each technique finishes."""
    ref_curve: list[float] = []
    options = run.data_options if run.data_options is not None else template_options(run.data_dir)
    for t in techniques:
        policy = t.policy_json()
        reason = t.skip_reason(SECTION, run.device)
        if run.store.done(SECTION, t.name, "train"):
            ref_curve = ref_curve or [
                r["value"]
                for r in sorted(run.store.get(SECTION, "loss", "reference", "train"), key=lambda r: r["step"])
            ]
            continue
        if reason:
            run.store.add([row(SECTION, t.name, "train", status="skipped", reason=reason, policy=policy)])
            continue
        run.tick(f"train {t.name}")
        try:
            with tempfile.TemporaryDirectory() as tmp:
                rec, held, (peak, template_note), precision = _one(run, t, Path(tmp), options)
        except Exception as exc:  # noqa: BLE001 - one technique failing must not stop the grid
            run.store.add(
                [
                    row(
                        SECTION,
                        t.name,
                        "train",
                        status="failed",
                        policy=policy,
                        reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                    )
                ]
            )
            continue
        if t.name == "reference":
            ref_curve = rec.losses
        common = dict(
            policy={**policy, "trainer_precision": precision},
            config={
                **run.config,
                "steps": run.steps,
                "train_config": train_config(run.seed).to_dict(),
                "template_mmcif_dirs": list(options.template_mmcif_dirs),
            },
        )
        rows = [row(SECTION, t.name, "train", "loss", v, step=i + 1, **common) for i, v in enumerate(rec.losses)]
        devs = [abs(a - b) / abs(b) for a, b in zip(rec.losses, ref_curve) if b]
        rows += [
            row(
                SECTION,
                t.name,
                "train",
                "loss_max_rel_dev",
                max(devs) if devs else None,
                **common,
                reason="" if devs else "no reference curve in this run",
            ),
            row(
                SECTION,
                t.name,
                "train",
                "step_seconds",
                statistics.median(rec.seconds),
                **common,
                reason=f"median of {len(rec.seconds)} steps (the first includes warm-up)",
            ),
            row(SECTION, t.name, "train", "train_peak_bytes", peak, **common, reason=template_note),
            row(
                SECTION,
                t.name,
                "train",
                "heldout_lddt_ca",
                held,
                **common,
                reason="" if held is not None else "no held-out chain in the training data",
            ),
        ]
        run.store.add(rows)
