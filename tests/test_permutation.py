"""Multi-chain permutation alignment (AF2-Multimer Suppl. 7.3) on toy complexes built from the 3U8V
ground truth (tests/data/parity_loss_multimer/gt.npz): a homodimer A2 and an A2B case whose third
chain is another entity. Symmetric copies cost nothing; heteromer chains are never swapped."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from alphafold_mem.config import MULTIMER_FINETUNING_LOSS, apply_overrides, model_config
from alphafold_mem.geometry import all_atom
from alphafold_mem.losses import AlphaFoldLoss
from alphafold_mem.losses.permutation import (
    choose_anchor,
    kabsch_superposition,
    merge_ground_truth,
    multi_chain_permutation_align,
    permutation_align_batch,
)

from .conftest import TEST_DATA

#: Crop residues (0-based SEQRES positions) taken from every chain; all resolved in 3U8V A and B.
CROP = list(range(20, 40))
REL = 1e-6  # the same sums in another order (fp32)


def _gt(hetero: bool) -> dict[str, torch.Tensor]:
    """Whole-complex ground truth: 3U8V A, B (entity 1; B moved 6 Å along z, so that the complex is
    not C2-symmetric and a swap of A and B is not a rigid motion) and, for A2B, chain C = A moved
    40 Å along x (entity 2)."""
    with np.load(TEST_DATA / "parity_loss_multimer" / "gt.npz") as z:
        gt = {k: torch.from_numpy(z["full." + k]) for k in ("aatype", "all_atom_positions", "all_atom_mask")}
        gt["asym_id"] = torch.from_numpy(z["full.asym_id"])
        gt["entity_id"] = torch.from_numpy(z["full.entity_id"])
    b = gt["asym_id"] == 2
    gt["all_atom_positions"][b] += torch.tensor([0.0, 0.0, 6.0]) * gt["all_atom_mask"][b][..., None]
    if hetero:
        a = gt["asym_id"] == 1
        shift = torch.tensor([40.0, 0.0, 0.0]) * gt["all_atom_mask"][a][..., None]
        gt = {
            "aatype": torch.cat([gt["aatype"], gt["aatype"][a]]),
            "all_atom_positions": torch.cat([gt["all_atom_positions"], gt["all_atom_positions"][a] + shift]),
            "all_atom_mask": torch.cat([gt["all_atom_mask"], gt["all_atom_mask"][a]]),
            "asym_id": torch.cat([gt["asym_id"], torch.full((int(a.sum()),), 3)]),
            "entity_id": torch.cat([gt["entity_id"], torch.full((int(a.sum()),), 2)]),
        }
    return gt


def _crop(gt: dict) -> dict[str, torch.Tensor]:
    chains = [int(c) for c in torch.unique(gt["asym_id"])]
    n = len(CROP)
    crop = {
        "asym_id": torch.tensor([c for c in chains for _ in CROP]),
        "residue_index": torch.tensor(CROP * len(chains)),
        "entity_id": torch.tensor([int(gt["entity_id"][gt["asym_id"] == c][0]) for c in chains for _ in CROP]),
    }
    rows = torch.cat([torch.nonzero(gt["asym_id"] == c).squeeze(-1)[CROP] for c in chains])
    crop["aatype"] = gt["aatype"][rows]
    masks = all_atom.make_atom14_masks(crop["aatype"])
    nres = n * len(chains)
    crop.update(
        seq_mask=torch.ones(nres),
        atom14_atom_exists=masks["atom14_atom_exists"],
        atom37_atom_exists=masks["atom37_atom_exists"],
        true_msa=crop["aatype"][None].clone(),
        bert_mask=torch.zeros(1, nres),
        resolution=torch.tensor(2.0),
        use_clamped_fape=torch.tensor(1.0),
    )
    return crop


def _prediction(gt: dict, crop: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Outputs of a 'model' that predicts the ground truth (identity assignment) rotated, moved and
    with 0.1 Å noise, with seeded random logits."""
    g = torch.Generator().manual_seed(seed)
    labels = merge_ground_truth(gt, crop, [(i, i) for i in range(int(crop["asym_id"].max()))])
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g))
    pos = labels["all_atom_positions"] @ q + torch.tensor([5.0, -3.0, 8.0])
    pos = (pos + 0.1 * torch.randn(pos.shape, generator=g)) * labels["all_atom_mask"][..., None]
    aatype, mask = crop["aatype"], labels["all_atom_mask"]
    frames = all_atom.atom37_to_frames(aatype, pos, mask)["rigidgroups_gt_frames"]
    tors = all_atom.atom37_to_torsion_angles(aatype, pos, mask)["torsion_angles_sin_cos"]
    n = aatype.shape[0]
    return {
        "sm_frames": frames[None, :, 0].expand(2, -1, -1, -1).clone(),
        "sm_sidechain_frames": frames[None].expand(2, -1, -1, -1, -1).clone(),
        "sm_positions": all_atom.make_atom14_gt(aatype, pos, mask)["atom14_gt_positions"][None].expand(2, -1, -1, -1),
        "sm_angles": tors[None].expand(2, -1, -1, -1).clone(),
        "sm_unnormalized_angles": tors[None].expand(2, -1, -1, -1).clone(),
        "final_atom_positions": pos,
        "final_atom_mask": mask,
        "distogram_logits": torch.randn(n, n, 64, generator=g),
        "pae_logits": torch.randn(n, n, 64, generator=g),
        "lddt_logits": torch.randn(n, 50, generator=g),
        "experimentally_resolved_logits": torch.randn(n, 37, generator=g),
        "masked_msa_logits": torch.randn(1, n, 22, generator=g),
    }


def _loss_fn() -> AlphaFoldLoss:
    cfg = apply_overrides(model_config("tiny_multimer"), MULTIMER_FINETUNING_LOSS)
    return AlphaFoldLoss(cfg.loss, cfg.heads)


#: python random seeds whose anchor draws cover both entity-1 chains (A2) / the single entity-2 chain
SEEDS = (0, 1, 2, 3)


def _terms(out: dict, crop: dict, gt: dict, align: bool = True, seed: int = 0):
    if align:
        res = multi_chain_permutation_align(
            out["final_atom_positions"], out["final_atom_mask"], crop, gt, random.Random(seed)
        )
        labels, pairs = res.labels, res.align
    else:
        pairs = [(i, i) for i in range(int(crop["asym_id"].max()))]
        labels = merge_ground_truth(gt, crop, pairs)
    with torch.no_grad():
        _, terms = _loss_fn()({k: v for k, v in out.items()}, {**crop, **labels})
    return {k: float(v) for k, v in terms.items()}, pairs


def _swap_gt_chains(gt: dict, a: int, b: int) -> dict:
    """Exchange every per-residue array between ground-truth chains a and b (asym/entity ids stay)."""
    ra, rb = (torch.nonzero(gt["asym_id"] == c).squeeze(-1) for c in (a, b))
    perm = torch.arange(gt["asym_id"].shape[0])
    perm[ra], perm[rb] = rb, ra
    return {k: v if k in ("asym_id", "entity_id") else v[perm] for k, v in gt.items()}


def _swap_prediction_chains(out: dict, crop: dict, a: int, b: int) -> dict:
    """The same prediction with predicted chains a and b exchanged (equal crops: same residues)."""
    ra, rb = (torch.nonzero(crop["asym_id"] == c).squeeze(-1) for c in (a, b))
    perm = torch.arange(crop["asym_id"].shape[0])
    perm[ra], perm[rb] = rb, ra
    res_dims = {"distogram_logits": (0, 1), "pae_logits": (0, 1), "masked_msa_logits": (1,)}
    swapped = {}
    for k, v in out.items():
        dims = res_dims.get(k, (1,) if k.startswith("sm_") else (0,))
        for d in dims:
            v = v.index_select(d, perm)
        swapped[k] = v
    return swapped


def _assert_equal_terms(x: dict, y: dict):
    assert x.keys() == y.keys()
    for k in x:
        assert x[k] == pytest.approx(y[k], rel=REL, abs=1e-7), k


@pytest.mark.parametrize("hetero", [False, True], ids=["A2", "A2B"])
def test_swapping_identical_ground_truth_chains_leaves_the_loss(hetero):
    gt = _gt(hetero)
    crop = _crop(gt)
    out = _prediction(gt, crop)
    swapped_gt = _swap_gt_chains(gt, 1, 2)
    base, align = _terms(out, crop, gt)
    assert align[:2] == [(0, 0), (1, 1)]
    for seed in SEEDS:
        swapped, align_swapped = _terms(out, crop, swapped_gt, seed=seed)
        assert align_swapped[:2] == [(0, 1), (1, 0)]
        _assert_equal_terms(base, swapped)
    # without the alignment the swap costs: the test can fail
    unaligned, _ = _terms(out, crop, swapped_gt, align=False)
    assert unaligned["fape_interface"] > 3 * base["fape_interface"]


@pytest.mark.parametrize("hetero", [False, True], ids=["A2", "A2B"])
def test_prediction_with_identical_chains_swapped_gets_the_unswapped_loss(hetero):
    gt = _gt(hetero)
    crop = _crop(gt)
    out = _prediction(gt, crop)
    base, _ = _terms(out, crop, gt)
    swapped_out = _swap_prediction_chains(out, crop, 1, 2)
    for seed in SEEDS:
        swapped, align = _terms(swapped_out, crop, gt, seed=seed)
        assert align[:2] == [(0, 1), (1, 0)]
        _assert_equal_terms(base, swapped)
    assert _terms(swapped_out, crop, gt, align=False)[0]["fape_interface"] > 3 * base["fape_interface"]


def test_heteromer_chains_are_never_swapped():
    """Predicted chain A sits where the ground truth has C (another entity) and C where A is: the
    alignment still gives C its own ground truth and A one of the entity-1 chains."""
    gt = _gt(True)
    crop = _crop(gt)
    out = _swap_prediction_chains(_prediction(gt, crop), crop, 1, 3)
    for seed in SEEDS:
        _, align = _terms(out, crop, gt, seed=seed)
        assert (2, 2) in align
        assert {j for i, j in align if i in (0, 1)} == {0, 1}


def test_anchor_is_the_entity_with_fewest_chains():
    gt = _gt(True)
    crop = _crop(gt)
    for seed in SEEDS:
        assert choose_anchor(gt, crop["asym_id"], random.Random(seed)) == (3, [3])
    homo = _gt(False)
    homo_crop = _crop(homo)["asym_id"]
    draws = [choose_anchor(homo, homo_crop, random.Random(s)) for s in SEEDS]
    assert {g for g, _ in draws} == {1, 2} and all(p == [1, 2] for _, p in draws)
    # the homodimer's chain 1 not in the crop: chain 2 is the only predicted anchor
    assert choose_anchor(homo, homo_crop[homo_crop != 1], random.Random(0))[1] == [2]


def test_kabsch_recovers_a_rigid_motion():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 3, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    if torch.det(q) < 0:
        q = -q
    y = x @ q + torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    mask = torch.ones(30)
    mask[:5] = 0
    y[:5] += 50.0  # masked points do not count
    r, t = kabsch_superposition(x, y, mask)
    assert torch.allclose(r, q, atol=1e-10) and torch.allclose(x[5:] @ r + t, y[5:], atol=1e-10)
    assert torch.det(r) == pytest.approx(1.0)


def test_one_chain_is_the_identity():
    gt = _gt(False)
    crop = {k: v[: len(CROP)] for k, v in _crop(gt).items() if k in ("asym_id", "entity_id", "residue_index")}
    res = multi_chain_permutation_align(
        gt["all_atom_positions"][: len(CROP)], gt["all_atom_mask"][: len(CROP)], crop, gt
    )
    assert res.align == [(0, 0)] and res.candidates == []
    rows = torch.nonzero(gt["asym_id"] == 1).squeeze(-1)[CROP]
    assert torch.equal(res.labels["all_atom_positions"], gt["all_atom_positions"][rows])


def _pad(x: torch.Tensor, dims: tuple[int, ...], n: int) -> torch.Tensor:
    for d in dims:
        shape = list(x.shape)
        shape[d] = n
        x = torch.cat([x, x.new_zeros(shape)], d)
    return x


def test_padding_changes_no_term():
    """A crop padded as the data pipeline pads (asym_id 0, masks 0, zero outputs) scores the same."""
    gt = _gt(True)
    crop = _crop(gt)
    out = _prediction(gt, crop)
    base, align = _terms(out, crop, gt)
    pad = 5
    padded_crop = {
        k: v if v.dim() == 0 else _pad(v, (1,) if k in ("true_msa", "bert_mask") else (0,), pad)
        for k, v in crop.items()
    }
    res_dims = {"distogram_logits": (0, 1), "pae_logits": (0, 1), "masked_msa_logits": (1,)}
    padded_out = {k: _pad(v, res_dims.get(k, (1,) if k.startswith("sm_") else (0,)), pad) for k, v in out.items()}
    padded, padded_align = _terms(padded_out, padded_crop, gt)
    assert padded_align == align
    _assert_equal_terms(base, padded)


def test_multimer_loss_has_finite_gradients():
    gt = _gt(True)
    crop = _crop(gt)
    out = _prediction(gt, crop)
    # chain C predicted most of the way onto chain A: the centre-of-mass term is active
    pos, a, c = out["final_atom_positions"], crop["asym_id"] == 1, crop["asym_id"] == 3
    pos[c] += 0.8 * (pos[a][:, 1].mean(0) - pos[c][:, 1].mean(0))
    out = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in out.items()}
    res = multi_chain_permutation_align(out["final_atom_positions"], out["final_atom_mask"], crop, gt)
    loss, terms = _loss_fn()(out, {**crop, **res.labels})
    loss.backward()
    assert {"fape_interface", "chain_center_of_mass", "violation", "tm"} <= set(terms)
    assert terms["chain_center_of_mass"] > 0
    for k in ("sm_frames", "sm_positions", "final_atom_positions", "distogram_logits", "pae_logits"):
        g = out[k].grad
        assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0, k


def test_multimer_loss_runs_on_fake_tensors():
    """The memory planner traces the loss under FakeTensorMode: no multimer term may need data."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gt = _gt(True)
    crop = _crop(gt)
    out = _prediction(gt, crop)
    batch = {
        **crop,
        **multi_chain_permutation_align(out["final_atom_positions"], out["final_atom_mask"], crop, gt).labels,
    }
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_out = {k: mode.from_tensor(v) for k, v in out.items()}
        fake_batch = {k: mode.from_tensor(v) for k, v in batch.items()}
        loss, terms = _loss_fn()(fake_out, fake_batch)
    assert loss.shape == () and {"fape_interface", "chain_center_of_mass"} <= set(terms)


def test_batched_alignment_equals_one_example_at_a_time():
    gts = [_gt(False), _gt(True)]
    crops = [_crop(g) for g in gts]
    outs = [_prediction(g, c, seed=i) for i, (g, c) in enumerate(zip(gts, crops))]
    outs[1] = _swap_prediction_chains(outs[1], crops[1], 1, 2)
    n = len(CROP) * 3  # pad the dimer's crop to the trimer's length
    keys = ("asym_id", "entity_id", "residue_index")
    batch = {k: torch.stack([_pad(crops[0][k], (0,), n - len(crops[0][k])), crops[1][k]]) for k in keys}
    outputs = {
        k: torch.stack([_pad(outs[0][k], (0,), n - len(outs[0][k])), outs[1][k]])
        for k in ("final_atom_positions", "final_atom_mask")
    }
    aligned = permutation_align_batch(outputs, batch, gts, random.Random(0))
    for b in range(2):
        one = multi_chain_permutation_align(
            outputs["final_atom_positions"][b], outputs["final_atom_mask"][b], {k: batch[k][b] for k in keys}, gts[b],
            random.Random(0),
        ).labels  # fmt: skip
        for k, v in one.items():
            assert torch.equal(aligned[k][b], v), (b, k)
    assert aligned["asym_id"][1].tolist()[: len(CROP)] == [2] * len(CROP)  # chain 1 took chain 2's truth
    with pytest.raises(ValueError, match="2 ground truths for a batch of 1"):
        permutation_align_batch({k: v[:1] for k, v in outputs.items()}, {k: v[:1] for k, v in batch.items()}, gts)


def test_crop_that_does_not_fit_the_ground_truth_is_named():
    gt = _gt(False)
    crop = _crop(gt)
    out = _prediction(gt, crop)
    pos, mask = out["final_atom_positions"], out["final_atom_mask"]
    bad = {**crop, "residue_index": crop["residue_index"] + 80}
    with pytest.raises(ValueError, match="asym_id 1 has residue_index 119, beyond ground-truth chain"):
        multi_chain_permutation_align(pos, mask, bad, gt)
    other = {**crop, "asym_id": crop["asym_id"] + 5}
    with pytest.raises(ValueError, match="crop chain asym_id 6 .entity 1. is not in the ground truth"):
        multi_chain_permutation_align(pos, mask, other, gt)
