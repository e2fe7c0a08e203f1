"""Training progress a person can read: the progress bar carries loss, lDDT-Cα and step time;
metrics.csv is always written; TensorBoard logs when the optional package is installed."""

from __future__ import annotations

import csv
import importlib.util
import logging
import warnings

import pytest

from alphafold_mem import model_config
from alphafold_mem.train import TrainConfig, train
from alphafold_mem.train.lightning_messages import quiet_lightning
from alphafold_mem.train.progress import make_loggers

from .test_train import data_dir  # noqa: F401  (fixture)

pytestmark = pytest.mark.filterwarnings("ignore")
HAVE_TB = importlib.util.find_spec("tensorboard") is not None


def test_progress_bar_metrics_csv_and_tensorboard(data_dir, tmp_path):  # noqa: F811
    cfg = model_config(
        "tiny", **{"num_recycles": 1, "data.crop_size": 24, "data.max_msa_clusters": 8, "data.max_extra_msa": 8}
    )
    tc = TrainConfig(warmup_steps=2, held_out=("1a8o",), val_every_steps=2)
    module = train(
        cfg,
        tc,
        data_dir,
        tmp_path,
        max_steps=2,
        devices=1,
        accelerator="cpu",
        ckpt_every_steps=10,
        loggers=("tensorboard",) if HAVE_TB else (),
        progress_bar=True,
    )
    bar = module.trainer.progress_bar_metrics
    assert {"train/loss", "train/lddt_ca", "train/step_s", "val/lddt_ca"} <= set(bar), bar
    assert 0 < bar["train/step_s"] < 600
    with open(tmp_path / "logs" / "metrics.csv") as fh:  # written although only tensorboard was asked for
        rows = list(csv.DictReader(fh))
    steps = [r for r in rows if r.get("train/loss")]
    assert len(steps) == 2 and all(float(r["train/step_s"]) > 0 for r in steps)
    assert {"train/lddt_ca", "train/recycling_iterations", "train/lr"} <= set(rows[0])
    if HAVE_TB:
        assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_without_the_package_fails_clearly(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("tensorboard", "tensorboardX") else real(name, *a),
    )
    with pytest.raises(ValueError, match=r"pip install 'alphafold_mem\[tensorboard\]'"):
        make_loggers(tmp_path, ("tensorboard",))
    assert len(make_loggers(tmp_path, ())) == 1  # the CSV logger, always


def test_lightning_noise_is_left_out_by_its_text_and_nothing_else(caplog):
    """The deprecation inside Lightning, the hook note and the logger advertisement are left out; other
    warnings and log lines, of the same categories and loggers, still show."""
    tip = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        with quiet_lightning():
            warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning)
            warnings.warn("You have overridden `transfer_batch_to_device` in `LightningModule` but have passed in a")
            tip.info("💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]")
            warnings.warn("another deprecation", FutureWarning)
            tip.info("GPU available: False, used: False")
        tip.info("💡 Tip: For seamless cloud logging, outside")  # the filter ends with the block
    assert [str(w.message) for w in caught] == ["another deprecation"]
    assert [r.getMessage() for r in caplog.records] == [
        "GPU available: False, used: False",
        "💡 Tip: For seamless cloud logging, outside",
    ]
