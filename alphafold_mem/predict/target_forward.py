"""The run stage of one target: its features (:func:`features`) and the model's forward, with the
arrays the outputs need brought back to the host (:func:`forward`)."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..data import make_features, parse_msa
from ..data.alignment_layout import msa_row_cap
from ..data.features.values import check_feature_values
from .progress import ForwardProgress
from .run_context import LoadedModel, RunContext, TargetRun
from .unknown_residues import fill_unknown_backbone

__all__ = ["OUTPUT_KEYS", "features", "forward", "placeholder_templates"]

#: The model outputs a prediction's files are written from.
OUTPUT_KEYS = (
    "final_atom_positions",
    "final_atom_mask",
    "plddt",
    "predicted_aligned_error",
    "max_predicted_aligned_error",
    "ptm",
)


def placeholder_templates(n_res: int) -> dict[str, torch.Tensor]:
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


def features(ctx: RunContext, run: TargetRun, cfg) -> dict[str, torch.Tensor]:
    """The target's features on the device (its MSAs parsed again, templates chosen by the pipeline),
    checked before the model sees them.

    Raises:
        InputError: a feature value the model must not see (non-finite, a mask not 0/1...).
    """
    t = run.target

    def build():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # already reported during validation
            msas = [parse_msa(f, query=t.sequence, max_sequences=msa_row_cap(f)) for f in t.msa_files]
        run.templates = ctx.pipeline.templates(t) if ctx.pipeline is not None else None
        batch = make_features(
            t.sequence,
            msa=msas or None,
            config=cfg,
            mode="predict",
            seed=ctx.seed,
            templates=run.templates.templates if run.templates else (),
        )
        if cfg.template.enabled and "template_aatype" not in batch:
            batch.update(placeholder_templates(len(t.sequence)))
        return batch

    with ctx.clock.stage("features"):
        batch = ctx.stages.run(f"{t.name}/features", build)
        check_feature_values(batch, record=t.name, file=t.source)  # finite, masks 0/1, tokens in range
        return {k: v.to(ctx.device) for k, v in batch.items()}


def forward(ctx: RunContext, run: TargetRun, lm: LoadedModel, batch: dict, expected_seconds=None) -> dict:
    """The model's forward on ``batch`` (progress lines with an ETA, :mod:`.progress`) and the arrays of
    :data:`OUTPUT_KEYS` as float numpy arrays on the host (``ptm``, ``max_predicted_aligned_error``:
    floats), ``aatype``, the unknown residues' backbone filled; sets ``recycles_run`` and the early-stop
    message of ``run.result``.

    Raises:
        FloatingPointError: the model produced non-finite coordinates or pLDDT.
    """
    r, model, cfg = run.result, lm.model, lm.config

    def call():
        torch.manual_seed(ctx.seed)
        with torch.inference_mode():  # precision: the model enters its one autocast itself
            return model(batch)

    r.phase = "collectives"  # under DAP a failure from here to the gather ends the run on every rank
    with ctx.clock.stage("model"):
        with ForwardProgress(model, run.name, expected_seconds=expected_seconds).attached():
            out = ctx.stages.run(f"{run.name}/model", call, forward=True)
        arrays = {k: v.detach().float().cpu().numpy() for k, v in ctx.par.gather(model, out, OUTPUT_KEYS).items()}
    r.phase = ""
    arrays["aatype"] = batch["aatype"].cpu().numpy()
    fill_unknown_backbone(arrays, out)  # X: N, CA, C, O from the final frame and psi
    r.recycles_run = int(out["num_recycles"]) - 1
    if r.recycles_run < cfg.num_recycles:  # stopped early (AF2 v2.3)
        r.message = (
            f"recycling stopped early after {r.recycles_run} of {cfg.num_recycles} recycle(s) (Cα distance "
            f"change {float(out['recycle_ca_change']):.3f} Å <= tolerance {cfg.recycle_early_stop_tolerance} Å)"
        )
    for key in ("ptm", "max_predicted_aligned_error"):
        if key in arrays:
            arrays[key] = float(arrays[key])
    if not np.all(np.isfinite(arrays["plddt"])) or not np.all(np.isfinite(arrays["final_atom_positions"])):
        raise FloatingPointError("the model produced non-finite coordinates or pLDDT")
    r.mean_plddt = float(arrays["plddt"].mean())
    r.ptm = arrays.get("ptm")
    return arrays
