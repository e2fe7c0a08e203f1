"""Training step and validation for the multimer presets (AF2-Multimer, Evans et al. 2022).

:class:`MultimerLightning` is :class:`~.lightning_module.AlphaFoldLightning` with two changes:

* before the losses, the ground-truth chains of each entity are matched to the predicted chains
  (:func:`alphafold_mem.losses.permutation.permutation_align_batch`, Suppl. 7.3) against each
  sample's whole-complex ground truth (:class:`~.multimer_data.ComplexBatch`); the anchor draw of
  step ``k`` uses ``random.Random`` seeded from ``(seed, k)``, so a resumed run draws alike; the
  other targets (atom14, frames, chi angles, pseudo-β) are then derived from the aligned atoms;
* validation runs whole complexes and reports, after the same alignment, the backbone FAPE
  (intra-chain ``val/fape_backbone`` and inter-chain ``val/fape_interface``, unclamped weights as the
  loss config gives them), lDDT-Cα and interface lDDT-Cα (:func:`interface_lddt_ca`), the model's
  own ipTM (``val/iptm``, the PAE head's; not logged by a config without ``heads.iptm_enabled``)
  and the DockQ terms ``val/dockq``, ``val/fnat``, ``val/irmsd``, ``val/lrmsd`` (Å)
  (:func:`alphafold_mem.metrics_interface.dockq_complex`: the mean over the chain pairs in contact
  in the ground truth; a sample without such a pair is logged with weight 0, so every process
  logs the same keys under DDP and the epoch mean is over the samples with an interface, NaN when
  none has one).

The loss weights are the config's; :func:`multimer_training_config` gives a multimer preset the
fine-tuning weights (:data:`alphafold_mem.config.MULTIMER_FINETUNING_LOSS`) when its config has none.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..config import MULTIMER_FINETUNING_LOSS, ModelConfig, apply_overrides
from ..geometry import residue_constants as rc
from ..losses import add_ground_truth_features
from ..losses.permutation import permutation_align_batch
from ..metrics import lddt_ca
from ..metrics_interface import dockq_complex
from .lightning_module import AlphaFoldLightning
from .multimer_data import ComplexBatch

__all__ = ["MultimerLightning", "interface_lddt_ca", "multimer_training_config", "align_targets"]

_CA = rc.atom_order["CA"]
#: Draw number of the validation alignments (apart from every training step's).
_VALIDATION_STREAM = 2**48
_DOCKQ_KEYS = ("dockq", "fnat", "irmsd", "lrmsd")


def multimer_training_config(config: ModelConfig) -> ModelConfig:
    """``config`` with :data:`~alphafold_mem.config.MULTIMER_FINETUNING_LOSS` applied when it is a
    multimer config without multimer loss weights (``loss.interface_fape_weight`` 0); else unchanged."""
    if config.multimer and not config.loss.interface_fape_weight:
        return apply_overrides(config, MULTIMER_FINETUNING_LOSS)
    return config


def interface_lddt_ca(pred: Tensor, true: Tensor, mask: Tensor, asym_id: Tensor, cutoff: float = 15.0) -> Tensor:
    """lDDT-Cα over the pairs of residues in different chains only (reference distance < ``cutoff``).

    Args:
        pred, true: ``[*, N, 37, 3]`` (Å); mask ``[*, N, 37]``; asym_id ``[*, N]``.

    Returns:
        ``[*]`` in [0, 1]; 0 where no inter-chain pair is within the cutoff.
    """
    p, t, m = pred[..., _CA, :], true[..., _CA, :], mask[..., _CA]
    d_t = torch.cdist(t, t)
    d_p = torch.cdist(p, p)
    pair = (d_t < cutoff) & (asym_id[..., :, None] != asym_id[..., None, :]) & (m[..., :, None] * m[..., None, :] > 0)
    err = (d_t - d_p).abs()
    score = sum((err < c).float() for c in (0.5, 1.0, 2.0, 4.0)) / 4.0
    pair = pair.float()
    n = pair.sum((-1, -2))
    return torch.where(n > 0, (score * pair).sum((-1, -2)) / n.clamp(min=1), torch.zeros_like(n))


def align_targets(out: dict, feats: dict, ground_truth: list, seed: int, k: int) -> dict:
    """Permutation-aligned loss batch of step ``k`` (``k >= 0``): ``feats`` with ``all_atom_positions``
    / ``all_atom_mask`` gathered from the ground-truth chains matched to the predicted ones, then the
    derived targets; ``asym_id`` / ``entity_id`` stay the crop's."""
    rng = random.Random(int(np.random.default_rng([seed, 19, k]).integers(2**62)))
    gts = [
        {key: g[key] for key in ("asym_id", "entity_id", "all_atom_positions", "all_atom_mask")} for g in ground_truth
    ]
    aligned = permutation_align_batch(out, feats, gts, rng)
    aligned["asym_id"], aligned["entity_id"] = feats["asym_id"], feats["entity_id"]  # the crop's own numbering
    return add_ground_truth_features(aligned)


class MultimerLightning(AlphaFoldLightning):
    """The training wrapper for multimer presets (module docstring); arguments as
    :class:`~.lightning_module.AlphaFoldLightning`.

    Raises:
        ValueError: ``model_config`` is not a multimer config.
    """

    def __init__(self, model_config: ModelConfig, *args: Any, **kwargs: Any):
        if not model_config.multimer:
            raise ValueError("MultimerLightning needs a multimer preset (e.g. --preset tiny_multimer)")
        super().__init__(model_config, *args, **kwargs)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if isinstance(batch, ComplexBatch):
            return batch.to(device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def prepare_targets(self, out: dict, feats: dict, batch: ComplexBatch, k: int) -> dict:
        return align_targets(out, feats, batch.ground_truth, self.train_config.seed, k)

    @torch.no_grad()
    def validation_metrics(self, batch: ComplexBatch) -> dict[str, Tensor]:
        """Backbone FAPE terms, lDDT-Cα, interface lDDT-Cα, ipTM and DockQ terms of a whole complex
        (module docstring)."""
        f = dict(batch.features)
        out = self.model(f)
        f = align_targets(out, f, batch.ground_truth, self.train_config.seed, _VALIDATION_STREAM)
        f["use_clamped_fape"] = torch.zeros(f["aatype"].shape[0], device=f["aatype"].device)
        _, terms = self.loss_fn(out, f)
        pred = out["final_atom_positions"].float()
        mask = f["all_atom_mask"] * f["seq_mask"][..., None]
        metrics = {
            "fape_backbone": terms["fape_backbone"].mean(),
            "fape_interface": terms.get("fape_interface", torch.zeros(())).mean(),
            "lddt_ca": lddt_ca(pred, f["all_atom_positions"], mask).mean(),
            "interface_lddt_ca": interface_lddt_ca(pred, f["all_atom_positions"], mask, f["asym_id"]).mean(),
        }
        if "iptm" in out:
            metrics["iptm"] = out["iptm"].float().mean()
        mask = mask * out["final_atom_mask"] if "final_atom_mask" in out else mask
        per_sample = [dockq_complex(*x) for x in zip(pred, f["all_atom_positions"], mask, f["asym_id"])]
        per_sample = [s for s in per_sample if s is not None]
        for key in _DOCKQ_KEYS if per_sample else ():
            metrics[key] = torch.stack([s[key] for s in per_sample]).mean().float()
        return metrics

    def validation_step(self, batch: ComplexBatch, batch_idx: int) -> None:
        metrics = self.validation_metrics(batch)
        for name in _DOCKQ_KEYS:  # weight 0 without an interface (module docstring)
            v = metrics.pop(name, None)
            zero = torch.zeros((), device=metrics["lddt_ca"].device)
            self.log(f"val/{name}", zero if v is None else v, batch_size=0 if v is None else 1, sync_dist=True)
        for name, v in metrics.items():
            self.log(f"val/{name}", v, prog_bar=name == "lddt_ca", batch_size=1, sync_dist=True)
