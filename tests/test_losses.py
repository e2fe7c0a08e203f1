"""Tests for alphafold_mem.losses on real structures from data/ and on hand-made cases."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from alphafold_mem.geometry import residue_constants as rc
from alphafold_mem.geometry.rigid import Rigid, quat_to_rot
from alphafold_mem.losses import (
    AlphaFoldLoss,
    add_ground_truth_features,
    backbone_fape,
    compute_fape,
    distogram_loss,
    find_structural_violations,
    masked_msa_loss,
    plddt_loss,
    rename_symmetric_ground_truth,
    sidechain_fape,
    supervised_chi_loss,
    tm_loss,
    violation_fraction,
    violation_loss,
)

from .conftest import REPO_DATA


def _chain(name: str):
    from alphafold_mem.data import parse_mmcif

    path = REPO_DATA / "mmcif" / name
    if not path.is_file():
        pytest.skip(f"{path} not shipped")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_mmcif(path)


@pytest.fixture(scope="module")
def myoglobin():
    """102M (X-ray 1.84 Å, 154 residues, all observed) with its derived training targets."""
    ch = _chain("102m.cif")
    b = {
        "aatype": torch.tensor(ch.aatype),
        "all_atom_positions": torch.tensor(ch.atom37_positions),
        "all_atom_mask": torch.tensor(ch.atom37_mask),
        "residue_index": torch.arange(len(ch.aatype)),
        "seq_mask": torch.ones(len(ch.aatype)),
    }
    return add_ground_truth_features(b)


def _random_rigid(seed=0, scale=30.0) -> Rigid:
    g = torch.Generator().manual_seed(seed)
    return Rigid(quat_to_rot(torch.randn(4, generator=g)), scale * torch.randn(3, generator=g))


def _move_frames(t: Rigid, frames: Rigid) -> Rigid:
    return Rigid(t.rots @ frames.rots, t.apply(frames.trans))


def _sidechain_inputs(b):
    frames = Rigid.from_tensor_4x4(b["rigidgroups_gt_frames"].flatten(-4, -3))
    return (
        frames,
        b["rigidgroups_gt_exists"].flatten(-2),
        b["atom14_gt_positions"].flatten(-3, -2),
        b["atom14_gt_exists"].flatten(-2),
    )


def test_fape_of_identical_structures_is_zero(myoglobin):
    frames, fmask, pos, pmask = _sidechain_inputs(myoglobin)
    exact = compute_fape(frames, frames, fmask, pos, pos, pmask, 10.0, 10.0, eps=0.0)
    assert exact.item() == 0.0
    # With AF2's eps = 1e-4 Å² under the square root the floor is sqrt(eps) / Z = 1e-3.
    floor = compute_fape(frames, frames, fmask, pos, pos, pmask, 10.0, 10.0)
    assert floor.item() == pytest.approx(math.sqrt(1e-4) / 10.0, rel=1e-3)


def test_fape_invariant_to_global_rigid_transform(myoglobin):
    frames, fmask, pos, pmask = _sidechain_inputs(myoglobin)
    g = torch.Generator().manual_seed(1)
    noisy = pos + 1.5 * torch.randn(pos.shape, generator=g)
    noisy_frames = Rigid(frames.rots, frames.trans + torch.randn(frames.trans.shape, generator=g))
    ref = compute_fape(noisy_frames, frames, fmask, noisy, pos, pmask, 10.0, 10.0)
    assert ref.item() > 0.05
    t1, t2 = _random_rigid(2), _random_rigid(3)
    # transform the prediction only, the truth only, and both with different motions
    a = compute_fape(_move_frames(t1, noisy_frames), frames, fmask, t1.apply(noisy), pos, pmask, 10.0, 10.0)
    b = compute_fape(noisy_frames, _move_frames(t2, frames), fmask, noisy, t2.apply(pos), pmask, 10.0, 10.0)
    c = compute_fape(
        _move_frames(t1, noisy_frames),
        _move_frames(t2, frames),
        fmask,
        t1.apply(noisy),
        t2.apply(pos),
        pmask,
        10.0,
        10.0,
    )
    for x in (a, b, c):
        torch.testing.assert_close(x, ref, rtol=1e-4, atol=1e-5)


def test_fape_clamp_and_mask():
    frames = Rigid.identity((1,))
    pred = torch.tensor([[0.0, 0.0, 0.0], [100.0, 0.0, 0.0]])
    true = torch.zeros(2, 3)
    one = torch.ones(1)
    clamped = compute_fape(frames, frames, one, pred, true, torch.ones(2), 10.0, 10.0, eps=0.0)
    assert clamped.item() == pytest.approx((0 + 10.0) / 2 / 10.0)
    unclamped = compute_fape(frames, frames, one, pred, true, torch.ones(2), 10.0, None, eps=0.0)
    assert unclamped.item() == pytest.approx(100.0 / 2 / 10.0)
    masked = compute_fape(frames, frames, one, pred, true, torch.tensor([1.0, 0.0]), 10.0, None, eps=0.0)
    assert masked.item() == 0.0


def test_backbone_fape_clamp_mixture(myoglobin):
    true = myoglobin["backbone_rigid_tensor"]
    mask = myoglobin["backbone_rigid_mask"]
    pred = true.clone()
    pred[..., :3, 3] += 15.0 * torch.randn(pred[..., :3, 3].shape)
    traj = torch.stack([pred, pred])  # [L=2, N, 4, 4]
    c = backbone_fape(traj, true, mask, 10.0, 10.0, torch.tensor(1.0))
    u = backbone_fape(traj, true, mask, 10.0, 10.0, torch.tensor(0.0))
    assert c < u
    assert c.item() <= 1.0 + 1e-6
    torch.testing.assert_close(backbone_fape(traj, true, mask, 10.0, 10.0, torch.tensor(0.25)), 0.25 * c + 0.75 * u)


def test_violation_loss_zero_on_real_structure(myoglobin):
    b = myoglobin
    v = find_structural_violations(b["atom14_gt_positions"], b["atom14_gt_exists"], b["residue_index"], b["aatype"])
    assert violation_loss(v, b["atom14_gt_exists"]).item() < 1e-3
    assert violation_fraction(v, b["seq_mask"]).item() == 0.0


def test_violation_loss_detects_broken_geometry(myoglobin):
    b = myoglobin
    pos = b["atom14_gt_positions"].clone()
    pos[50:] += torch.tensor([2.0, 0.0, 0.0])  # stretch the peptide bond 49-50 by ~2 Å
    pos[10, 1] = pos[80, 1]  # a CA on top of another residue's CA: a clash
    v = find_structural_violations(pos, b["atom14_gt_exists"], b["residue_index"], b["aatype"])
    assert v["bonds"]["c_n_loss_mean"].item() > 0
    assert v["clashes"]["per_atom_loss_sum"][10, 1].item() > 1.0
    assert violation_loss(v, b["atom14_gt_exists"]).item() > 1e-3
    flagged = torch.nonzero(v["per_residue_violation_mask"]).flatten().tolist()
    assert {49, 50, 10, 80} <= set(flagged)
    # a chain break in residue_index means no peptide bond is expected
    ri = b["residue_index"].clone()
    ri[50:] += 5
    v2 = find_structural_violations(pos, b["atom14_gt_exists"], ri, b["aatype"])
    assert v2["bonds"]["c_n_loss_mean"].item() == pytest.approx(0.0, abs=1e-6)


def test_rename_symmetric_ground_truth_picks_alt_naming(myoglobin):
    b = myoglobin
    swapped_pred = b["atom14_alt_gt_positions"]  # the prediction uses the other naming everywhere
    r = rename_symmetric_ground_truth(
        swapped_pred,
        b["atom14_gt_positions"],
        b["atom14_alt_gt_positions"],
        b["atom14_gt_exists"],
        b["atom14_alt_gt_exists"],
        b["atom14_atom_is_ambiguous"],
    )
    amb_res = b["atom14_atom_is_ambiguous"].amax(-1) > 0
    assert amb_res.any()
    assert torch.equal(r["alt_naming_is_better"].bool(), amb_res)
    torch.testing.assert_close(r["renamed_atom14_gt_positions"], swapped_pred)
    # side-chain FAPE against the renamed truth is at the eps floor
    sc = sidechain_fape(
        b["rigidgroups_alt_gt_frames"],
        swapped_pred,
        b["rigidgroups_gt_frames"],
        b["rigidgroups_alt_gt_frames"],
        b["rigidgroups_gt_exists"],
        r,
        10.0,
        10.0,
        eps=0.0,
    )
    assert sc.item() < 1e-4


def test_supervised_chi_loss(myoglobin):
    b = myoglobin
    n = b["aatype"].shape[0]
    angles = torch.zeros(2, n, 7, 2)
    angles[..., 1] = 1.0
    angles[:, :, 3:] = torch.where(b["chi_mask"][..., None] > 0, b["chi_angles_sin_cos"], angles[:, :, 3:])
    chi, norm = supervised_chi_loss(
        angles, angles, b["aatype"], b["seq_mask"], b["chi_mask"], b["chi_angles_sin_cos"], 0.5, 0.01
    )
    assert chi.item() < 1e-6 and norm.item() < 1e-3
    # pi-periodic chis (ASP chi2, PHE chi2, ...) rotated by pi cost nothing
    periodic = torch.tensor(rc.chi_pi_periodic)[b["aatype"]]  # [N, 4]
    assert periodic.sum() > 0
    flipped = angles.clone()
    flipped[:, :, 3:] *= (1 - 2 * periodic)[None, ..., None]
    chi_f, _ = supervised_chi_loss(
        flipped, flipped, b["aatype"], b["seq_mask"], b["chi_mask"], b["chi_angles_sin_cos"], 0.5, 0.01
    )
    assert chi_f.item() < 1e-6
    wrong = angles.clone()
    wrong[:, :, 3:] *= -1
    assert (
        supervised_chi_loss(
            wrong, wrong, b["aatype"], b["seq_mask"], b["chi_mask"], b["chi_angles_sin_cos"], 0.5, 0.01
        )[0].item()
        > 0.1
    )


def test_head_losses_minimal_for_correct_logits(myoglobin):
    b = myoglobin
    pb, pbm = b["pseudo_beta"], b["pseudo_beta_mask"]
    edges = torch.linspace(2.3125, 21.6875, 63)
    d = torch.cdist(pb, pb)
    bins = (d[..., None] > edges).sum(-1)
    good = 50.0 * torch.nn.functional.one_hot(bins, 64).float()
    assert distogram_loss(good, pb, pbm, 2.3125, 21.6875).item() < 1e-6
    assert distogram_loss(torch.zeros_like(good), pb, pbm, 2.3125, 21.6875).item() == pytest.approx(
        math.log(64), rel=1e-5
    )

    true_msa = torch.randint(0, 22, (5, 20))
    bert = (torch.rand(5, 20) < 0.3).float()
    logits = 50.0 * torch.nn.functional.one_hot(true_msa, 23).float()
    assert masked_msa_loss(logits, true_msa, bert).item() < 1e-6
    assert masked_msa_loss(torch.zeros(5, 20, 23), true_msa, bert).item() == pytest.approx(math.log(23), rel=1e-5)

    pos, mask = b["all_atom_positions"], b["all_atom_mask"]
    top = torch.zeros(pos.shape[0], 50)
    top[:, -1] = 50.0  # perfect prediction -> lDDT 1 -> last bin
    res = torch.tensor(1.84)
    assert plddt_loss(top, pos, pos, mask, res).item() < 1e-6
    assert plddt_loss(top, pos, pos, mask, torch.tensor(3.5)).item() == 0.0  # outside 0.1-3.0 Å

    frames = b["backbone_rigid_tensor"]
    pae = torch.zeros(pos.shape[0], pos.shape[0], 64)
    pae[..., 0] = 50.0  # zero error -> first bin
    assert tm_loss(pae, frames, frames, b["backbone_rigid_mask"], res).item() < 1e-6


def test_alphafold_loss_on_model_outputs_fp32_under_bf16(tiny_config):
    from alphafold_mem import AlphaFold, model_config
    from alphafold_mem.testing import random_features

    cfg = model_config(
        "tiny", **{"loss.violation_weight": 1.0, "loss.experimentally_resolved_weight": 0.01, "loss.pae_weight": 0.1}
    )
    model = AlphaFold(cfg)
    feats = random_features(cfg, n_res=11, n_seq=5, n_extra_seq=7, seed=1)
    n = 11
    ca = torch.cumsum(torch.nn.functional.normalize(torch.randn(n, 3), dim=-1) * 3.8, 0)
    pos = ca[:, None, :] + torch.randn(n, 37, 3)
    feats.update(
        all_atom_positions=pos,
        all_atom_mask=feats["atom37_atom_exists"],
        resolution=torch.tensor(2.0),
        true_msa=torch.randint(0, 22, (5, n)),
        bert_mask=(torch.rand(5, n) < 0.15).float(),
        use_clamped_fape=torch.tensor(1.0),
    )
    loss_fn = AlphaFoldLoss(cfg.loss, cfg.heads)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(feats)
        loss, terms = loss_fn(out, feats)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert {
        "fape_backbone",
        "fape_sidechain",
        "chi",
        "angle_norm",
        "distogram",
        "masked_msa",
        "plddt",
        "experimentally_resolved",
        "violation",
        "tm",
        "total",
    } <= set(terms)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_ground_truth_derivation_matches_data_pipeline():
    """add_ground_truth_features gives the same targets as the data pipeline's features."""
    from alphafold_mem.data import make_features

    ch = _chain("1a8o.cif")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = make_features(ch, [], None, structure=ch, mode="eval", seed=0)
    derived = add_ground_truth_features({k: f[k] for k in ("aatype", "all_atom_positions", "all_atom_mask")})
    for k in ("atom14_gt_positions", "backbone_rigid_tensor", "chi_mask", "pseudo_beta", "rigidgroups_gt_exists"):
        torch.testing.assert_close(derived[k], f[k].float(), msg=k)
