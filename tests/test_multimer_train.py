"""Training on complexes: the multimer step aligns the ground-truth chains before the multimer
losses, draws are seeded, and ``alphafold-mem train --preset tiny_multimer`` runs on the dev complexes."""

from __future__ import annotations

import csv
import warnings

import numpy as np
import pytest
import torch

from alphafold_mem.config import MULTIMER_FINETUNING_LOSS, model_config
from alphafold_mem.data.complex_examples import load_complex_examples
from alphafold_mem.data.multimer_crop import MultimerCrop
from alphafold_mem.train import TrainConfig
from alphafold_mem.train import multimer_module as mm
from alphafold_mem.train.multimer_data import ComplexDraws, collate_complexes
from alphafold_mem.train.multimer_module import MultimerLightning, multimer_training_config

from .conftest import REPO_DATA


@pytest.fixture(scope="module")
def setup():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        examples, _ = load_complex_examples(REPO_DATA / "mmcif")
    cfg = multimer_training_config(model_config("tiny_multimer", **{"data.crop_size": 24}))
    torch.manual_seed(0)
    module = MultimerLightning(cfg, TrainConfig(seed=3))
    draws = ComplexDraws(examples, cfg, seed=3, msa_dir=REPO_DATA / "alignments", crop=MultimerCrop(24))
    return examples, cfg, module, draws


def test_multimer_preset_trains_with_multimer_loss_weights(setup):
    _, cfg, module, _ = setup
    for key, value in MULTIMER_FINETUNING_LOSS.items():
        assert getattr(cfg.loss, key.split(".", 1)[1]) == value, key
    assert module.loss_fn.cfg.interface_fape_weight == 0.5
    assert multimer_training_config(cfg) is cfg  # weights already there: unchanged
    with pytest.raises(ValueError, match="multimer preset"):
        MultimerLightning(model_config("tiny"))


def test_draws_are_a_function_of_seed_and_draw_number(setup):
    examples, cfg, _, draws = setup
    again = ComplexDraws(examples, cfg, seed=3, msa_dir=REPO_DATA / "alignments", crop=MultimerCrop(24))
    a, b = draws[5], again[5]
    assert a.sample_id == b.sample_id
    assert all(torch.equal(a.features[k], b.features[k]) for k in a.features)
    assert {draws[k].sample_id for k in range(12)} == {"2q2k", "3u8v", "721p"}


def test_step_aligns_chains_before_the_losses(setup, monkeypatch):
    """The training step's targets go through permutation_align_batch: with a homodimer whose copy
    B is copy A moved 30 Å (no symmetry that makes two assignments fit alike) and a prediction at
    the crop's true atoms (plus 0.1 Å noise), the aligned targets are the prediction's chains and
    swapping the two ground-truth chains changes neither them nor the loss."""
    _, _, module, draws = setup
    k = next(
        k for k in range(50) if draws[k].sample_id == "3u8v" and len(set(draws[k].features["asym_id"].tolist())) == 2
    )
    batch = collate_complexes([draws[k]])
    gt0 = batch.ground_truth[0]
    n = int((gt0["asym_id"] == 1).sum())
    pos_a, mask_a = gt0["all_atom_positions"][:n], gt0["all_atom_mask"][:n]
    gt = dict(gt0)
    gt["all_atom_positions"] = torch.cat([pos_a, (pos_a + torch.tensor([30.0, 0.0, 0.0])) * mask_a[..., None]])
    gt["all_atom_mask"] = torch.cat([mask_a, mask_a])
    swapped = dict(gt)
    for key in ("all_atom_positions", "all_atom_mask"):
        swapped[key] = torch.cat([gt[key][n:], gt[key][:n]])
    asym, ri = batch.features["asym_id"][0], batch.features["residue_index"][0]
    rows = (asym - 1) * n + ri  # the crop's residues in the whole complex
    true_pos, true_mask = gt["all_atom_positions"][rows][None], gt["all_atom_mask"][rows][None]
    with torch.no_grad():
        out = dict(module.model(batch.features))
    g = torch.Generator().manual_seed(0)
    out["final_atom_positions"] = true_pos + 0.1 * torch.randn(true_pos.shape, generator=g)
    out["final_atom_mask"] = true_mask
    calls = []
    real = mm.permutation_align_batch
    monkeypatch.setattr(mm, "permutation_align_batch", lambda *a, **kw: calls.append(1) or real(*a, **kw))

    def loss_with(truth):
        feats = dict(batch.features)
        feats = module.prepare_targets(out, feats, type(batch)(batch.sample_ids, batch.features, [truth]), k)
        assert torch.equal(feats["all_atom_positions"], true_pos) and torch.equal(feats["asym_id"], asym[None])
        feats["use_clamped_fape"] = torch.ones(1)
        loss, terms = module.loss_fn(out, feats)
        return float(loss), terms

    l1, terms = loss_with(gt)
    l2, _ = loss_with(swapped)
    assert len(calls) == 2
    assert {"fape_interface", "chain_center_of_mass", "violation"} <= set(terms)
    assert np.isfinite(l1) and l1 == pytest.approx(l2, rel=1e-6)


def test_cli_trains_tiny_multimer_on_dev_complexes(tmp_path):
    from alphafold_mem.cli import main

    out = tmp_path / "run"
    lines: list[str] = []
    args = ["train", "--preset", "tiny_multimer", "--data", str(REPO_DATA), "--out", str(out), "--max-steps", "3"]
    args += ["--val-every", "0", "--no-progress", "--accelerator", "cpu", "--set", "data.crop_size=16"]
    args += ["--set", "num_recycles=0", "--num-workers", "0"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import alphafold_mem.train.runner as runner

        real = runner.MultimerDataModule

        class Logged(real):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.log = lines.append

        runner.MultimerDataModule = Logged
        try:
            assert main(args) == 0
        finally:
            runner.MultimerDataModule = real
    assert lines[0] == "complexes: 3 for training, 0 held out"
    assert any(line.startswith("left out: nucleic-acid chain left out: 3") for line in lines), lines
    rows = [r for r in csv.DictReader((out / "logs" / "metrics.csv").open()) if r.get("train/loss")]
    assert len(rows) == 3
    assert all(np.isfinite(float(r["train/loss"])) and float(r["train/fape_interface"]) >= 0 for r in rows)
    assert (out / "checkpoints" / "last.ckpt").is_file()


def test_multimer_resume_reproduces_the_uninterrupted_run(tmp_path):
    """4 steps straight and 2 + 2 resumed from the checkpoint give the same weights bit for bit (draws,
    crops and permutation anchors are functions of the seed and the step)."""
    from alphafold_mem.train import train

    cfg = model_config("tiny_multimer", **{"data.crop_size": 16, "num_recycles": 0})
    tc = TrainConfig(warmup_steps=2, held_out=(), val_every_steps=0, seed=1)
    kw = dict(progress_bar=False, accelerator="cpu", devices=1, num_workers=0, log=lambda line: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        full = train(cfg, tc, REPO_DATA, tmp_path / "full", 4, **kw)
        torch.manual_seed(0)
        train(cfg, tc, REPO_DATA, tmp_path / "part", 2, ckpt_every_steps=2, **kw)
        resumed = train(
            cfg, tc, REPO_DATA, tmp_path / "part", 4, resume=str(tmp_path / "part" / "checkpoints" / "last.ckpt"), **kw
        )
    assert resumed.batches_seen == full.batches_seen == 4
    import lightning as L

    L.seed_everything(1, verbose=False)  # the untrained model of these runs: training changed it
    fresh = MultimerLightning(multimer_training_config(cfg), tc)
    assert any(not torch.equal(a, b) for a, b in zip(fresh.model.parameters(), full.model.parameters()))
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
