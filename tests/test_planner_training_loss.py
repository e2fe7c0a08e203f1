"""The planner's training estimate counts the real AF2 loss (fake ground truth of the right shapes),
not a stand-in: equal to the measured step, loss included, and it moves with the loss terms."""

from __future__ import annotations

import torch

from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
from alphafold_mem.memory import track_peak
from alphafold_mem.planner import estimate_breakdown
from alphafold_mem.planner.training_loss import ground_truth_batch, training_loss
from alphafold_mem.testing import random_features

N_RES, N_SEQ, N_EXTRA = 40, 6, 10


def _measured(cfg, policy) -> int:
    torch.manual_seed(0)
    model = bind(AlphaFold(cfg), policy).train()
    batch = {**random_features(cfg, N_RES, N_SEQ, N_EXTRA), **ground_truth_batch(cfg, N_RES, N_SEQ)}
    with track_peak() as mem:  # the outputs stay alive through backward, as in the training step
        out = model(batch)
        loss = training_loss(cfg, out, batch)
        loss.backward()
        del out
    assert torch.isfinite(loss)
    return mem.peak


def test_training_estimate_runs_the_real_loss():
    """With the violation (clash) terms on, the loss's [N_res, N_res, 14, 14] transients set the
    peak of this small model: the estimate follows them and equals the counter within 1 %."""
    base = {"num_recycles": 0, "template.enabled": False, "structure_module.dropout_rate": 0.0}
    plain = model_config("tiny", **base)
    viol = model_config("tiny", **base, **{"loss.violation_weight": 1.0, "loss.experimentally_resolved_weight": 0.01})
    policy = MemoryPolicy.training()
    est = {
        name: estimate_breakdown(c, policy, N_RES, N_SEQ, N_EXTRA, 0, training=True).activations
        for name, c in (("plain", plain), ("viol", viol))
    }
    meas = {"plain": _measured(plain, policy), "viol": _measured(viol, policy)}
    for name in est:
        assert abs(est[name] - meas[name]) <= 0.01 * meas[name], (name, est[name], meas[name])
    assert est["viol"] > 1.2 * est["plain"]  # the clash terms are large at this size: no stand-in has them


def test_ground_truth_batch_shapes_match_the_feature_table():
    from alphafold_mem.data.features.spec import FEATURES, check_features

    gt = ground_truth_batch(model_config("tiny"), 12, 5)
    sizes = check_features(gt)
    assert sizes == {"N_res": 12, "N_seq": 5}
    assert {k for k, s in FEATURES.items() if s.group == "ground_truth"} <= set(gt) | {"resolution"}
