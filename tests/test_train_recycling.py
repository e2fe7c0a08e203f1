"""Recycling as AF2 trains (Suppl. 1.10): one MSA cluster sample and masked-MSA target per
recycling slice, a sampled number of iterations per step (a function of seed and step, so a
resumed run draws the same), validation on all iterations."""

from __future__ import annotations

import glob

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from alphafold_mem import model_config
from alphafold_mem.data.features import collate, make_features
from alphafold_mem.data.msa import parse_msa
from alphafold_mem.data.structure_io import read_structure
from alphafold_mem.train import AlphaFoldLightning, TrainConfig
from alphafold_mem.train.recycling import sample_num_iterations

from .conftest import REPO_DATA
from .test_train import _fit, data_dir  # noqa: F401  (fixture)

pytestmark = pytest.mark.filterwarnings("ignore")
MSA_KEYS = {
    "msa_feat",
    "true_msa",
    "bert_mask",
    "msa_mask",
    "extra_msa",
    "extra_msa_mask",
    "extra_has_deletion",
    "extra_deletion_value",
}


def test_each_recycling_slice_has_its_own_msa_sample():
    cif = REPO_DATA / "mmcif" / "2q2k.cif"
    if not cif.is_file():
        pytest.skip("data/ example set not shipped")
    chain = read_structure(cif).chain("A")
    msas = [parse_msa(p, query=chain.sequence) for p in sorted(glob.glob(str(REPO_DATA / "alignments/2q2k_A/*")))]
    cfg = model_config("tiny")
    single = make_features(chain, msas, cfg, train=True, structure=chain, seed=4)
    sliced = make_features(chain, msas, cfg, train=True, structure=chain, seed=4, recycling_slices=3)
    assert set(sliced) == set(single)
    for key, value in sliced.items():
        assert value.shape == single[key].shape + (3,), key
        assert torch.equal(value[..., 0], single[key]), key  # slice 0 is the one-draw sample
        if key not in MSA_KEYS:  # crop, ground truth, masks: the same in every slice
            assert torch.equal(value[..., 1], value[..., 0]) and torch.equal(value[..., 2], value[..., 0]), key
    for key in ("msa_feat", "true_msa", "bert_mask"):  # resampled and re-masked per slice
        assert not torch.equal(sliced[key][..., 1], sliced[key][..., 0]), key
    bert = sliced["bert_mask"]
    assert 0.05 < float(bert.mean()) < 0.3  # 15 % of the positions, in every slice
    batch = collate([sliced, sliced]).features  # the batch dim goes first, the recycling dim stays last
    assert batch["msa_feat"].shape == (2,) + sliced["msa_feat"].shape


def test_iteration_draws():
    draws = [sample_num_iterations(0, k, 4) for k in range(400)]
    assert sorted(set(draws)) == [1, 2, 3, 4]
    assert draws == [sample_num_iterations(0, k, 4) for k in range(400)]
    assert draws != [sample_num_iterations(1, k, 4) for k in range(400)]
    assert {sample_num_iterations(0, k, 4, uniform=False) for k in range(20)} == {4}
    assert {sample_num_iterations(0, k, 1) for k in range(20)} == {1}
    with pytest.raises(ValueError):
        sample_num_iterations(0, 0, 0)


class _Iterations(Callback):
    def __init__(self):
        self.train = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.train.append(pl_module.last_num_iterations)


def test_resume_reproduces_the_sampled_iterations(data_dir, tmp_path):  # noqa: F811
    """num_recycles 2: 3 uninterrupted steps == 2 steps + resume + 1 step: counts, losses and weights."""
    cfg = model_config(
        "tiny", **{"num_recycles": 2, "data.crop_size": 32, "data.max_msa_clusters": 8, "data.max_extra_msa": 8}
    )
    tc = TrainConfig(warmup_steps=3, held_out=("1a8o",), val_every_steps=0, seed=1)
    runs = {}
    for name, steps, resume in (
        ("full", 3, None),
        ("part", 2, None),
        ("part", 3, str(tmp_path / "part" / "checkpoints" / "last.ckpt")),
    ):
        rec = _Iterations()
        torch.manual_seed(0)  # the same initial weights in every run
        module, losses = _fit(
            data_dir, tmp_path / name, steps, resume=resume, tc=tc, module=AlphaFoldLightning(cfg, tc), callbacks=[rec]
        )
        runs.setdefault(name, []).append((module, losses, rec.train))
    ((full, full_losses, full_iters),) = runs["full"]
    (_, l1, i1), (resumed, l2, i2) = runs["part"]
    assert full_iters == i1 + i2 and len(full_iters) == 3
    assert full_iters == [sample_num_iterations(1, k, 3) for k in range(3)]
    assert full_iters == [1, 2, 3]  # seed 1: the resumed step draws a count the first two did not
    assert full_losses == l1 + l2
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k


def test_validation_runs_every_iteration(data_dir, tmp_path):  # noqa: F811
    """Validation features carry no recycling dim: the model runs all num_recycles + 1 iterations."""
    cfg = model_config("tiny", **{"num_recycles": 2, "data.crop_size": 32})
    tc = TrainConfig(held_out=("1a8o",))
    module = AlphaFoldLightning(cfg, tc)
    from alphafold_mem.train import AF2DataModule

    dm = AF2DataModule(data_dir, cfg, tc, cache_dir=tmp_path / "idx")
    dm.prepare_data()
    dm.setup()
    val = next(iter(dm.val_dataloader()))
    train = next(iter(dm.train_dataloader()))
    assert val.features["aatype"].dim() == 2 and train.features["aatype"].shape[-1] == 3
    with torch.no_grad():
        out = module.eval().model(val.features)
    assert int(out["num_recycles"]) == 3
    assert np.isfinite(out["final_atom_positions"].numpy()).all()
