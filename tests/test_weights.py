"""Weights detection by content and loading: AF2 .npz, OpenFold .pt, our checkpoints
(plain, exported, Lightning, with EMA), and clear one-line errors for anything else."""

import os
import shutil

import numpy as np
import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.weights import WeightsError, detect_format, load_weights, openfold_state_dict, save_checkpoint

from .conftest import TEST_DATA

PARITY_NPZ = TEST_DATA / "parity" / "params.npz"


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(1)
    return AlphaFold(model_config("tiny")).eval()


def _same_params(a: AlphaFold, b: AlphaFold) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=0, msg=k)


def _one_line(exc: pytest.ExceptionInfo, path) -> str:
    text = str(exc.value)
    assert "\n" not in text
    assert text.startswith(os.fspath(path))
    return text


# -- AF2 .npz ------------------------------------------------------------------------------------
def test_af2_npz_detected_by_content(tmp_path):
    assert detect_format(PARITY_NPZ) == "af2-npz"
    renamed = tmp_path / "weights.bin"  # the extension does not matter
    shutil.copy(PARITY_NPZ, renamed)
    assert detect_format(renamed) == "af2-npz"
    loaded = load_weights(renamed)
    assert loaded.format == "af2-npz"
    direct = load_weights(PARITY_NPZ)
    _same_params(loaded.model, direct.model)
    assert not loaded.model.training


def test_npz_without_af2_names_is_refused(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, a=np.zeros(3))
    with pytest.raises(WeightsError) as exc:
        detect_format(path)
    assert "without AlphaFold2 parameter names" in _one_line(exc, path)


# -- OpenFold .pt --------------------------------------------------------------------------------
@pytest.mark.parametrize("wrap", ["plain", "state_dict+module", "ema"])
def test_openfold_checkpoint(tmp_path, tiny_model, wrap):
    sd = openfold_state_dict(tiny_model)
    if wrap == "state_dict+module":
        sd = {"state_dict": {f"module.{k}": v for k, v in sd.items()}}
    elif wrap == "ema":
        sd = {"ema": {"params": sd}, "epoch": 3}
    path = tmp_path / "openfold.ckpt"
    torch.save(sd, path)
    assert detect_format(path) == "openfold"
    loaded = load_weights(path, preset="tiny")
    assert loaded.format == "openfold"
    _same_params(loaded.model, tiny_model)


# -- our checkpoints -----------------------------------------------------------------------------
def test_our_checkpoint_round_trip(tmp_path, tiny_model):
    path = tmp_path / "model.weights"
    save_checkpoint(tiny_model, path)
    assert detect_format(path) == "alphafold-mem"
    loaded = load_weights(path)
    assert loaded.config == tiny_model.config
    _same_params(loaded.model, tiny_model)
    assert load_weights(path, preset="tiny").format == "alphafold-mem"


def test_our_checkpoint_preset_mismatch(tmp_path, tiny_model):
    path = tmp_path / "tiny.pt"
    save_checkpoint(tiny_model, path)
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="demo")
    assert "'tiny' model but preset 'demo'" in _one_line(exc, path)


def test_exported_training_weights_format(tmp_path, tiny_model):
    """The training engineer's export: format/model_config/state_dict/metadata."""
    path = tmp_path / "demo.ckpt"
    torch.save(
        {
            "format": "alphafold_mem.weights/1",
            "model_config": tiny_model.config.to_dict(),
            "state_dict": tiny_model.state_dict(),
            "metadata": {"global_step": 12, "ema": True},
        },
        path,
    )
    loaded = load_weights(path)
    assert loaded.format == "alphafold-mem"
    assert "step 12" in loaded.details and "EMA" in loaded.details
    _same_params(loaded.model, tiny_model)


def test_lightning_checkpoint_prefers_ema(tmp_path, tiny_model):
    live = {f"model.{k}": v for k, v in tiny_model.state_dict().items()}
    ema = {k: v + 1.0 for k, v in tiny_model.state_dict().items()}
    path = tmp_path / "last.ckpt"
    torch.save(
        {
            "state_dict": live,
            "pytorch-lightning_version": "2.4.0",
            "global_step": 5,
            "hyper_parameters": {"preset": "tiny"},
            "alphafold_mem": {
                "model_config": tiny_model.config.to_dict(),
                "ema": {"shadow": ema},
                "rng": np.random.get_state(),
            },
        },
        path,
    )
    assert detect_format(path) == "lightning"
    loaded = load_weights(path)
    assert "EMA" in loaded.details
    for k, v in loaded.model.state_dict().items():
        torch.testing.assert_close(v, ema[k], rtol=0, atol=0)


def test_real_lightning_checkpoint(tmp_path, tiny_model):
    """A checkpoint written by Lightning itself (hyper_parameters from save_hyperparameters)."""
    L = pytest.importorskip("lightning")

    class Module(L.LightningModule):
        def __init__(self, config):
            super().__init__()
            self.save_hyperparameters()
            self.model = AlphaFold(model_config("tiny"))

        def training_step(self, batch, idx):
            return sum(p.sum() for p in self.parameters()) * 0.0

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    module = Module(config=model_config("tiny").to_dict())
    module.model.load_state_dict(tiny_model.state_dict())
    trainer = L.Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, torch.utils.data.DataLoader([0], batch_size=1))
    path = tmp_path / "real.ckpt"
    trainer.save_checkpoint(path)
    assert detect_format(path) == "lightning"
    _same_params(load_weights(path).model, tiny_model)


def test_state_dict_without_config_needs_preset(tmp_path, tiny_model):
    path = tmp_path / "bare.pt"
    torch.save(tiny_model.state_dict(), path)
    with pytest.raises(WeightsError) as exc:
        load_weights(path)
    assert "--preset" in _one_line(exc, path)
    _same_params(load_weights(path, preset="tiny").model, tiny_model)


def test_checkpoint_that_does_not_fit_its_config(tmp_path, tiny_model):
    sd = dict(tiny_model.state_dict())
    sd.pop("structure_module.initial_projection.bias")
    path = tmp_path / "broken.pt"
    torch.save({"config": tiny_model.config.to_dict(), "state_dict": sd}, path)
    with pytest.raises(WeightsError) as exc:
        load_weights(path)
    assert "structure_module.initial_projection.bias" in _one_line(exc, path)


# -- garbage -------------------------------------------------------------------------------------
class _Evil:
    def __reduce__(self):
        return (print, ("should never run",))


@pytest.mark.parametrize(
    "kind", ["text", "empty", "npy", "zip", "list", "unknown-names", "unsafe-object", "missing", "directory"]
)
def test_unusable_files_give_one_clear_line(tmp_path, kind):
    path = tmp_path / "weights.pt"
    if kind == "text":
        path.write_text("this is not a weights file\n")
        expect = "not a recognised weights file"
    elif kind == "empty":
        path.write_bytes(b"")
        expect = "empty file"
    elif kind == "npy":
        np.save(open(path, "wb"), np.zeros(3))
        expect = "single numpy array"
    elif kind == "zip":
        import zipfile

        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("readme.txt", "hello")
        expect = "neither a numpy .npz nor a torch.save file"
    elif kind == "list":
        torch.save([torch.zeros(1)], path)
        expect = "holds a list"
    elif kind == "unknown-names":
        torch.save({"encoder.weight": torch.zeros(2)}, path)
        expect = "unknown parameter names (first: 'encoder.weight')"
    elif kind == "unsafe-object":
        torch.save({"state_dict": {}, "x": _Evil()}, path)
        expect = "cannot be loaded safely"
    elif kind == "missing":
        path = tmp_path / "nope.ckpt"
        expect = "not found"
    else:
        path = tmp_path
        expect = "is a directory"
    with pytest.raises(WeightsError) as exc:
        load_weights(path)
    assert expect in _one_line(exc, path)
