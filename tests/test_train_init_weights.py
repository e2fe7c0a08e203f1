"""``train --init-weights FILE``: AF2 .npz, OpenFold .pt and our checkpoints load into the training
module with the EMA starting from them; fine-tuning the shipped demo weights on one chain lowers
its loss."""

from __future__ import annotations

import shutil

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.data import ChainIndex, ProteinChainDataset, collate
from alphafold_mem.train import AF2DataModule, AlphaFoldLightning, TrainConfig, build_trainer
from alphafold_mem.train.init_weights import init_from_weights, weights_config
from alphafold_mem.weights import export_af2_params, save_checkpoint
from alphafold_mem.weights.openfold import openfold_state_dict

from .conftest import REPO_DATA

pytestmark = pytest.mark.filterwarnings("ignore")
DEMO = REPO_DATA / "demo_weights" / "demo.ckpt"


def _assert_ema_is(module, sd):
    for k, v in sd.items():
        assert torch.equal(module.model.state_dict()[k], v), k
        if v.is_floating_point():
            assert torch.equal(module.ema.shadow[k], v.float()), k


@pytest.mark.parametrize("fmt", ["af2-npz", "openfold", "alphafold-mem"])
def test_init_weights_loads_every_format_and_restarts_the_ema(tmp_path, fmt):
    torch.manual_seed(1)
    source = AlphaFold(model_config("tiny"))
    with torch.no_grad():  # every tensor differs from any initialisation (biases start at 0, norms at 1)
        for p in source.parameters():
            p.add_(0.01 * torch.randn_like(p))
    path = tmp_path / {"af2-npz": "params_model_1_ptm.npz", "openfold": "of.pt", "alphafold-mem": "w.ckpt"}[fmt]
    if fmt == "af2-npz":
        export_af2_params(source, path)
    elif fmt == "openfold":
        torch.save(openfold_state_dict(source), path)
    else:
        save_checkpoint(source, path)
    torch.manual_seed(2)
    module = AlphaFoldLightning(model_config("tiny"), TrainConfig())
    before = sum(torch.equal(module.ema.shadow[k], v) for k, v in source.state_dict().items() if k in module.ema.shadow)
    assert before == 0  # the EMA of a fresh module is its random initialisation
    description = init_from_weights(module, path)
    assert fmt in description
    _assert_ema_is(module, source.state_dict())  # step 0: EMA == loaded weights
    assert weights_config(path, "tiny").c_m == 16


def test_init_weights_of_another_architecture_fails_clearly():
    module = AlphaFoldLightning(model_config("tiny"), TrainConfig())
    with pytest.raises(ValueError, match=r"--init-weights file was saved for preset 'demo'.*c_m \(32 vs 16\)"):
        init_from_weights(module, DEMO)


def test_init_weights_and_resume_exclude_each_other(tmp_path, capsys):
    from alphafold_mem.cli import main

    rc = main(
        ["train", "--data", "nowhere", "--init-weights", str(DEMO), "--resume", str(DEMO), "--out", str(tmp_path)]
    )
    assert rc == 2 and "give one" in capsys.readouterr().err


def _chain_loss(module, feats) -> float:
    module.model.eval()
    with torch.no_grad():
        out = module.model(feats)
        loss, _ = module.loss_fn(out, {**feats, "use_clamped_fape": torch.ones(1)})
    module.model.train()
    return float(loss)


def test_finetuning_the_demo_weights_on_one_chain_lowers_its_loss(tmp_path):
    """Demo weights (EMA), 1A8O alone (70 residues, no MSA), 6 steps of lr 5e-4 without warm-up: the
    chain's loss (eval mode, all iterations, full chain) goes down."""
    src = REPO_DATA / "mmcif" / "1a8o.cif"
    if not (src.is_file() and DEMO.is_file()):
        pytest.skip("data/ example set or demo weights not shipped")
    d = tmp_path / "one"
    (d / "mmcif").mkdir(parents=True)
    shutil.copy(src, d / "mmcif" / src.name)
    cfg = weights_config(DEMO)
    tc = TrainConfig(lr=5e-4, warmup_steps=0, held_out=(), val_every_steps=0, ema_decay=0.9)
    torch.manual_seed(0)
    module = AlphaFoldLightning(cfg, tc)
    init_from_weights(module, DEMO)
    dm = AF2DataModule(d, cfg, tc, cache_dir=tmp_path / "idx", max_steps=6)
    dm.prepare_data()
    ev = ProteinChainDataset(ChainIndex.load(dm.index_path), cfg, mode="eval")
    feats = collate([ev[0]]).features
    before = _chain_loss(module, feats)
    trainer = build_trainer(
        tmp_path,
        6,
        devices=1,
        accelerator="cpu",
        val_every_steps=None,
        ckpt_every_steps=10**6,
        loggers=(),
        progress_bar=False,
    )
    trainer.fit(module, datamodule=dm)
    after = _chain_loss(module, feats)
    print(f"1A8O loss with the demo weights: {before:.2f} -> {after:.2f} after 6 steps")
    assert after < before, (before, after)
