"""The real AlphaFold training loss for memory estimates: fake ground truth of the right shapes and
the loss of :class:`alphafold_mem.losses.AlphaFoldLoss` (Jumper et al. 2021, Suppl. 1.9).

The training-step estimate (:func:`alphafold_mem.planner.estimate_peak` with ``training=True``) and
the benchmarks that check it run the model and then THIS loss, forward and backward, so the
loss's own transients count: at AF2's fine-tuning crop (N_res 384) its all-atom pieces are large
(pairwise atom14 distances ``[N_res, N_res, 14, 14]`` for the clash and renaming terms, side-chain
FAPE ``[8 N_res, 14 N_res, 3]``). The ground truth's values do not matter for memory (every term
reads all of its inputs whatever their values), only their shapes and dtypes: identity frames,
zero coordinates, all-ones masks. Under :class:`~torch._subclasses.fake_tensor.FakeTensorMode`
nothing is allocated.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import ModelConfig
from ..losses import AlphaFoldLoss

__all__ = ["ground_truth_batch", "training_loss"]


def ground_truth_batch(
    config: ModelConfig, n_res: int, n_seq: int, device: torch.device | str = "cpu"
) -> dict[str, Tensor]:
    """Training targets with the shapes and dtypes of :mod:`alphafold_mem.data.features.spec` (no
    batch dim; fp32 as the data pipeline makes them): ``all_atom_positions [N_res, 37, 3]``,
    ``atom14_gt_positions [N_res, 14, 3]``, ``rigidgroups_gt_frames [N_res, 8, 4, 4]``,
    ``backbone_rigid_tensor [N_res, 4, 4]``, ``chi_angles_sin_cos [N_res, 4, 2]``, ``pseudo_beta
    [N_res, 3]``, ``true_msa``/``bert_mask [N_seq, N_res]``, their masks, ``resolution []`` and
    ``use_clamped_fape []``. Works under FakeTensorMode."""
    n, s = n_res, n_seq

    def ones(*shape):
        return torch.ones(*shape, dtype=torch.float32, device=device)

    def zeros(*shape):
        return torch.zeros(*shape, dtype=torch.float32, device=device)

    def frames(*shape):
        return torch.eye(4, dtype=torch.float32, device=device).expand(*shape, 4, 4).clone()

    return {
        "all_atom_positions": zeros(n, 37, 3),
        "all_atom_mask": ones(n, 37),
        "atom14_gt_positions": zeros(n, 14, 3),
        "atom14_alt_gt_positions": zeros(n, 14, 3),
        "atom14_gt_exists": ones(n, 14),
        "atom14_alt_gt_exists": ones(n, 14),
        "atom14_atom_is_ambiguous": zeros(n, 14),
        "atom14_atom_exists": ones(n, 14),
        "rigidgroups_gt_frames": frames(n, 8),
        "rigidgroups_alt_gt_frames": frames(n, 8),
        "rigidgroups_gt_exists": ones(n, 8),
        "rigidgroups_group_exists": ones(n, 8),
        "rigidgroups_group_is_ambiguous": zeros(n, 8),
        "backbone_rigid_tensor": frames(n),
        "backbone_rigid_mask": ones(n),
        "chi_angles_sin_cos": zeros(n, 4, 2),
        "chi_mask": ones(n, 4),
        "pseudo_beta": zeros(n, 3),
        "pseudo_beta_mask": ones(n),
        "true_msa": torch.zeros(s, n, dtype=torch.long, device=device),
        "bert_mask": ones(s, n),
        "resolution": torch.full((), 2.0, dtype=torch.float32, device=device),  # inside 0.1-3 Å: every term on
        "use_clamped_fape": ones(()),
    }


def training_loss(config: ModelConfig, outputs: dict[str, Tensor], batch: dict[str, Tensor]) -> Tensor:
    """The scalar AF2 loss of ``outputs`` against ``batch`` (features + :func:`ground_truth_batch`),
    with the loss weights of ``config`` (terms with weight 0 are not computed, as in training)."""
    loss, _ = AlphaFoldLoss(config.loss, config.heads)(outputs, batch)
    return loss
