"""AF2-Multimer cropping (Suppl. 7.2) and complex training examples from mmCIF entries."""

from __future__ import annotations

import math
import shutil
import warnings

import numpy as np
import pytest

from alphafold_mem.config import model_config
from alphafold_mem.data.complex_examples import ComplexFilters, load_complex_example, load_complex_examples
from alphafold_mem.data.drops import counted_lines
from alphafold_mem.data.multimer_crop import (
    MultimerCrop,
    apply_crop,
    choose_crop,
    contiguous_crop,
    interface_residues,
)
from alphafold_mem.data.multimer_training import complex_raw_features, make_complex_training_features

from .conftest import REPO_DATA, TEST_DATA

MMCIF = REPO_DATA / "mmcif"
DRAWS = 1000


@pytest.fixture(scope="module")
def dimer():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex, _ = load_complex_example(MMCIF / "3u8v.cif")
    return ex


def _has_interface(gt: dict, index: np.ndarray, threshold: float) -> bool:
    sub = {k: gt[k][index] for k in ("all_atom_positions", "all_atom_mask", "asym_id")}
    return interface_residues(sub["all_atom_positions"], sub["all_atom_mask"], sub["asym_id"], threshold).size > 0


def test_interface_fraction_matches_published_probability(dimer):
    """Over 1,000 seeded draws: spatial crops in the fraction 0.5 (4 binomial sd), every spatial crop
    holds its interface residue and an interface, and the fraction of crops holding an interface is
    0.5 + 0.5 q, q measured on 1,000 contiguous-only draws."""
    gt = dimer.ground_truth()
    settings = MultimerCrop(crop_size=48)
    pos, mask, asym = gt["all_atom_positions"], gt["all_atom_mask"], gt["asym_id"]
    assert interface_residues(pos, mask, asym, 10.0).size > 0
    modes, with_interface = [], []
    for s in range(DRAWS):
        c = choose_crop(pos, mask, asym, settings, np.random.default_rng(s))
        assert c.index.size == 48
        modes.append(c.mode)
        has = _has_interface(gt, c.index, settings.interface_threshold)
        with_interface.append(has)
        if c.mode == "spatial":
            assert has and c.centre in c.index
    p = settings.spatial_crop_prob
    tol = 4 * math.sqrt(p * (1 - p) / DRAWS)
    frac_spatial = modes.count("spatial") / DRAWS
    assert abs(frac_spatial - p) < tol, frac_spatial
    q = np.mean(
        [_has_interface(gt, contiguous_crop(asym, 48, np.random.default_rng(10_000 + s)), 10.0) for s in range(DRAWS)]
    )
    assert q < 0.9  # contiguous crops of this dimer miss the interface often: the test can tell
    expected = p + (1 - p) * q
    assert abs(np.mean(with_interface) - expected) < 4 * math.sqrt(expected * (1 - expected) / DRAWS) + tol


def test_contiguous_crop_fills_budget_with_one_run_per_chain():
    asym = np.repeat([1, 2, 3], [30, 5, 50])
    for s in range(200):
        idx = contiguous_crop(asym, 40, np.random.default_rng(s))
        assert idx.size == 40 and np.all(np.diff(idx) > 0)
        for a in (1, 2, 3):
            rows = idx[asym[idx] == a]
            assert rows.size == 0 or np.all(np.diff(rows) == 1)
    assert np.array_equal(contiguous_crop(asym, 200, np.random.default_rng(0)), np.arange(85))


def test_crop_is_deterministic_under_the_seed(dimer):
    gt = dimer.ground_truth()
    args = (gt["all_atom_positions"], gt["all_atom_mask"], gt["asym_id"], MultimerCrop(40))
    a = [choose_crop(*args, np.random.default_rng(s)).index for s in range(20)]
    b = [choose_crop(*args, np.random.default_rng(s)).index for s in range(20)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert len({x.tobytes() for x in a}) > 10


def test_crop_keeps_every_residue_feature_together(dimer):
    """Each cropped residue's atoms, aatype, chain ids and MSA column are those of one residue of
    the ground truth: the one its asym_id and residue_index name."""
    cfg = model_config("tiny_multimer")
    raw = complex_raw_features(dimer, REPO_DATA / "alignments")
    gt = dimer.ground_truth()
    rows = {a: np.flatnonzero(gt["asym_id"] == a) for a in np.unique(gt["asym_id"])}
    for s in range(10):
        f, mode = make_complex_training_features(raw, cfg, np.random.default_rng(s), MultimerCrop(50))
        assert mode in ("spatial", "contiguous") and f["aatype"].shape[0] == 50
        asym, ri = f["asym_id"].numpy(), f["residue_index"].numpy()
        src = np.array([rows[a][r] for a, r in zip(asym, ri)])
        assert np.array_equal(f["aatype"].numpy(), gt["aatype"][src])
        assert np.array_equal(f["entity_id"].numpy(), gt["entity_id"][src])
        assert np.array_equal(f["sym_id"].numpy(), gt["sym_id"][src])
        assert np.array_equal(f["all_atom_positions"].numpy(), gt["all_atom_positions"][src])
        assert np.array_equal(f["all_atom_mask"].numpy(), gt["all_atom_mask"][src])
        # the MSA's query row (kept first) is the cropped sequence
        assert np.array_equal(f["true_msa"][0].numpy(), gt["aatype"][src])
    cropped = apply_crop(raw, np.array([0, 5, 100]))
    assert np.array_equal(cropped["msa"], raw["msa"][:, [0, 5, 100]])
    with pytest.raises(ValueError, match="outside a complex"):
        apply_crop(raw, np.array([len(raw["aatype"])]))


def test_complex_entries_filtered_and_counted_by_reason(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex, drops = load_complex_examples(MMCIF)
        names = sorted(e.name for e in ex)
        assert names == ["2q2k", "3u8v", "721p"]
        lines = counted_lines(drops)
        assert any(line.startswith("nucleic-acid chain left out: 3") for line in lines), lines  # 1lcd B, C; 2q2k F
        assert any(line.startswith("fewer than two protein chains: 3") for line in lines), lines  # 102m, 1a8o, 1lcd
        two = next(e for e in ex if e.name == "2q2k")
        assert [c.entity_id for c in two.complex.chains] == [1, 1] and [c.sym_id for c in two.complex.chains] == [1, 2]
        gt = two.ground_truth()
        assert gt["all_atom_positions"].shape == (140, 37, 3) and list(np.unique(gt["asym_id"])) == [1, 2]
        _, d = load_complex_example(MMCIF / "2q2k.cif", ComplexFilters(min_chain_length=80))
        assert [x["reason"] for x in d].count("chain shorter than the minimum") == 2
        _, d = load_complex_example(MMCIF / "2q2k.cif", ComplexFilters(max_resolution=2.5))
        assert d[-1]["reason"] == "resolution above the limit"
        _, d = load_complex_example(MMCIF / "3u8v.cif", ComplexFilters(max_chains=1))
        assert d[-1]["reason"] == "more chains than the limit"
        shutil.copy(TEST_DATA / "faults" / "truncated_1a8o.cif", tmp_path / "bad.cif")
        ex, d = load_complex_example(tmp_path / "bad.cif")
        assert ex is None and d[0]["reason"] == "unreadable structure"
