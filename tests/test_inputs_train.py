"""Issue 16 in training: resume restores what the checkpoint saved (flags given again are logged
overrides, or refused where they would break exact resume), dropped data is reported at start-up
(one counted line per reason, the full list in the run directory), and a bad input value is caught
before the forward pass (dataset and training step) naming the feature, sample and position."""

import json
import logging
import shutil

import numpy as np
import pytest
import torch

from alphafold_mem import model_config
from alphafold_mem.cli import main
from alphafold_mem.data import InputError, ProteinChainDataset, build_chain_index
from alphafold_mem.train import AF2DataModule, TrainConfig
from alphafold_mem.train.resume import read_saved_run, resume_overrides

from .conftest import REPO_DATA
from .test_inputs_parsers import _cif
from .test_train import _fit, data_dir  # noqa: F401  (module-scoped training directory: 2Q2K + 1A8O)

pytestmark = pytest.mark.filterwarnings("ignore")

FLAGS = [
    "--preset",
    "tiny",
    "--max-steps",
    "3",
    "--ckpt-every",
    "1",
    "--warmup-steps",
    "3",
    "--lr",
    "2e-3",
    "--train-set",
    "ema_decay=0.9",
    "--held-out",
    "1a8o",
    "--set",
    "num_recycles=0",
    "--set",
    "data.crop_size=16",
    "--set",
    "data.max_msa_clusters=4",
    "--set",
    "data.max_extra_msa=4",
    "--val-every",
    "0",
    "--memory-policy",
    "reference",
]
RUNTIME = ["--no-progress", "--accelerator", "cpu"]


@pytest.fixture(scope="module")
def full_run(data_dir, tmp_path_factory):  # noqa: F811
    """3 uninterrupted steps with non-default settings; step=1.ckpt is the state of a run interrupted
    after its first step (a different schedule shows from the second resumed step on: the first one
    uses the rate the checkpoint's optimiser holds)."""
    out = tmp_path_factory.mktemp("full")
    assert main(["train", "--data", str(data_dir), *FLAGS, "--out", str(out), *RUNTIME]) == 0
    return out


def _resume_from_step1(full_run, run_dir, *extra):
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(full_run / "checkpoints" / "step=1.ckpt", run_dir / "checkpoints" / "step=1.ckpt")
    return main(["train", "--resume", str(run_dir / "checkpoints" / "step=1.ckpt"), *extra, *RUNTIME])


def _weights(path):
    ckpt = torch.load(path, weights_only=False)
    return ckpt["state_dict"], ckpt["alphafold_mem"]["ema"]["shadow"]


def test_resume_without_repeating_flags_equals_uninterrupted(full_run, tmp_path, capsys):
    assert _resume_from_step1(full_run, tmp_path / "part") == 0  # no --data, no settings: all from the checkpoint
    err = capsys.readouterr().err
    assert "override:" not in err
    (full_sd, full_ema), (sd, ema) = (
        _weights(full_run / "checkpoints" / "last.ckpt"),
        _weights(tmp_path / "part" / "checkpoints" / "last.ckpt"),
    )
    assert all(torch.equal(full_sd[k], sd[k]) for k in full_sd) and all(torch.equal(full_ema[k], ema[k]) for k in ema)
    saved = read_saved_run(tmp_path / "part" / "checkpoints" / "last.ckpt")
    assert (saved.train_config.warmup_steps, saved.train_config.lr, saved.train_config.ema_decay) == (3, 2e-3, 0.9)
    assert (
        saved.run["max_steps"] == 3 and saved.run["ckpt_every_steps"] == 1 and saved.run["memory_policy"] == "reference"
    )
    # the control: the same resume with AF2's default warm-up given explicitly is a logged override and differs
    assert _resume_from_step1(full_run, tmp_path / "other", "--warmup-steps", "1000") == 0
    assert "override: train config warmup_steps: 3 (checkpoint) -> 1000" in capsys.readouterr().err
    sd_other, _ = _weights(tmp_path / "other" / "checkpoints" / "last.ckpt")
    assert not all(torch.equal(full_sd[k], sd_other[k]) for k in full_sd)


@pytest.fixture(scope="module")
def saved_ckpt(tmp_path_factory):
    """A checkpoint holding only what resume reads (configs and run settings): no training needed."""
    from alphafold_mem.train.resume import RUN_KEY

    path = tmp_path_factory.mktemp("ckpt") / "checkpoints" / "step=1.ckpt"
    path.parent.mkdir()
    tc = TrainConfig(lr=2e-3, warmup_steps=3, ema_decay=0.9, held_out=("1a8o",))
    torch.save(
        {
            "alphafold_mem": {"model_config": model_config("tiny").to_dict(), "train_config": tc.to_dict()},
            RUN_KEY: {
                "data_dir": str(path.parent),
                "max_steps": 3,
                "precision": "32",
                "ckpt_every_steps": 1,
                "memory_policy": "reference",
                "memory_overrides": [],
                "out_dir": str(path.parent.parent),
            },
        },
        path,
    )
    return path


@pytest.mark.parametrize("flag, value, field", [("--batch-size", "2", "batch_size"), ("--seed", "7", "seed")])
def test_resume_refuses_settings_that_break_exact_resume(saved_ckpt, capsys, flag, value, field):
    assert main(["train", "--resume", str(saved_ckpt), flag, value, *RUNTIME]) == 2
    err = capsys.readouterr().err
    assert f"{field} is " in err and "cannot change on resume" in err and "start a new run" in err
    assert not (saved_ckpt.parent / "last.ckpt").exists()


def test_api_resume_logs_each_override(saved_ckpt):
    import dataclasses

    saved = read_saved_run(saved_ckpt)
    tc = dataclasses.replace(saved.train_config, lr=5e-4, grad_clip_norm=1.0)
    cfg = dataclasses.replace(
        saved.model_config, loss=dataclasses.replace(saved.model_config.loss, violation_weight=1.0)
    )
    lines = resume_overrides(
        saved_ckpt, cfg, tc, dict(saved.run, max_steps=10, out_dir="/elsewhere"), log=lambda _: None
    )
    assert lines == [
        "override: train config grad_clip_norm: 0.1 (checkpoint) -> 1.0",
        "override: train config lr: 0.002 (checkpoint) -> 0.0005",
        "override: model config loss.violation_weight: 0.0 (checkpoint) -> 1.0",
        "override: max_steps: 3 (checkpoint) -> 10",
    ]
    assert resume_overrides(saved_ckpt, saved.model_config, saved.train_config, saved.run, log=lambda _: None) == []


# -- dropped data at start-up ----------------------------------------------------------------------------
def _messy_data(root):
    """2Q2K + 1A8O (and 1A8O again as PDB), an unreadable file, a chain without atoms, a poly-Gly chain
    and an alignment folder without a structure."""
    (root / "mmcif").mkdir(parents=True)
    (root / "pdb").mkdir()
    for name in ("2q2k.cif", "1a8o.cif"):
        shutil.copy(REPO_DATA / "mmcif" / name, root / "mmcif" / name)
    shutil.copy(REPO_DATA / "pdb" / "1a8o.pdb", root / "pdb" / "1a8o.pdb")
    (root / "mmcif" / "broken.cif").write_text("data_x\nloop_\n_atom_site.id\n")
    extra = (
        "_entity_poly.entity_id 1\n_entity_poly.type 'polypeptide(L)'\n_entity_poly.pdbx_strand_id A,B\n#\n"
        "loop_\n_entity_poly_seq.entity_id\n_entity_poly_seq.num\n_entity_poly_seq.mon_id\n"
        "1 1 MET\n1 2 LYS\n1 3 GLY\n#"
    )
    (root / "mmcif" / "9nob.cif").write_text(
        _cif([("A", 1, "", "MET"), ("A", 2, "", "LYS"), ("A", 3, "", "GLY")], entity="1", extra=extra, seq_id="auto")
    )
    (root / "mmcif" / "9gly.cif").write_text(_cif([("A", i, "", "GLY") for i in range(1, 13)]))
    shutil.copytree(REPO_DATA / "alignments" / "2q2k_A", root / "alignments" / "2q2k_A")
    (root / "alignments" / "9zzz_A").mkdir()
    (root / "alignments" / "9zzz_A" / "x.a3m").write_text(">q\nMKV\n")


def test_dropped_data_is_counted_by_reason_at_start_up(tmp_path):
    _messy_data(tmp_path / "data")
    lines = []
    cfg = model_config("tiny")
    dm = AF2DataModule(
        tmp_path / "data",
        cfg,
        TrainConfig(held_out=("1a8o",)),
        cache_dir=tmp_path / "run" / "idx",
        report_dir=tmp_path / "run",
        log=lines.append,
    )
    dm.prepare_data()
    dm.setup()
    text = "\n".join(lines)
    assert lines[0] == (
        "data: 5 chains indexed (4 more left out while indexing), 3 used for training, 1 for validation, "
        "1 left out by the filters"
    )  # 5 = 3 + 1 + 1
    for expected in (
        "mmcif/broken.cif: no _atom_site coordinates)",
        "data: dropped: protein chain without modelled atoms: 1 (9nob_B: no modelled atoms)",
        "data: dropped: duplicate chain: 1 (1a8o_A: already indexed from ",
        "data: dropped: alignment folder without a structure: 1 (9zzz_A: no indexed chain uses it)",
        "data: dropped: one residue type dominates: 1 (9gly_A: ",
        "data: validation: held out for validation: 1 (1a8o_A)",
        "data: parser notes: 2 (1a8o.cif: record 'A': modified residues mapped to their parents: MSE->MET"
        " (4); 1a8o.pdb: record 'A': modified residues",
        f"data: full list in {tmp_path / 'run' / 'data_report.json'}",
    ):
        assert expected in text, (expected, text)
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    assert sorted(e["reason"] for e in report["dropped"]) == [
        "alignment folder without a structure",
        "duplicate chain",
        "one residue type dominates",
        "protein chain without modelled atoms",
        "unreadable structure",
    ]
    assert report["counts"] == {"indexed": 5, "train": 3, "validation": 1}


def test_an_index_with_nothing_usable_fails_with_its_reasons(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "broken.cif").write_text("not an mmCIF at all\n")
    (tmp_path / "d" / "9gly.cif").write_text(_cif([("A", i, "", "GLY") for i in range(1, 13)]))
    index = build_chain_index([tmp_path / "d"], None, tmp_path / "idx" / "index.json")
    with pytest.raises(
        InputError,
        match=r"no usable chains in the index \(1 indexed, 1 left out here, 1 skipped while "
        r"indexing; unreadable structure: 1 \(.*broken.cif.*\); one residue type "
        r"dominates: 1 \(9gly_A",
    ):
        ProteinChainDataset(index, model_config("tiny"))


# -- input values before the forward pass ------------------------------------------------------------------
def test_dataset_skips_a_sample_with_non_finite_coordinates(data_dir, tmp_path):  # noqa: F811
    index = build_chain_index([data_dir / "mmcif"], None, tmp_path / "index.json", cache_dir=tmp_path / "cache")
    cache = index.resolve(next(e["cache"] for e in index.entries if e["name"] == "2q2k_A"))
    arrays = dict(np.load(cache))
    arrays["atom37_positions"][30, 1, 0] = np.nan
    np.savez(cache, **arrays)
    ds = ProteinChainDataset(index, model_config("tiny"), mode="eval")
    names = [e["name"] for e in ds.entries]
    with pytest.warns(
        UserWarning,
        match=r"skipping sample .*record '2q2k_A': feature 'all_atom_positions': "
        r"non-finite value nan at residue 31, atom CA, x",
    ):
        sample = ds[names.index("2q2k_A")]
    assert sample.sample_id != "2q2k_A"


def test_training_step_skips_a_batch_with_a_bad_input_value(data_dir, tmp_path, monkeypatch, caplog):  # noqa: F811
    import alphafold_mem.train.data_module as dm_module

    original, calls = dm_module.collate, []

    def collate(samples):
        batch = original(samples)
        calls.append(1)
        if len(calls) == 1:
            batch.features["msa_mask"][0, 0, 3] = 0.5
        return batch

    monkeypatch.setattr(dm_module, "collate", collate)
    with caplog.at_level(logging.WARNING, logger="alphafold_mem.train"):
        module, losses = _fit(data_dir, tmp_path, 2)
    assert losses[0] is None and losses[1] is not None and module.skipped_steps == 1
    (msg,) = [r.getMessage() for r in caplog.records if "out-of-range input" in r.getMessage()]
    assert "feature 'msa_mask': value 0.5 in a mask (expected 0 or 1) at sample '2q2k_A', MSA row 1, residue 4" in msg


def test_overrides_take_effect_after_lightnings_restore():
    """Lightning restores lr, betas, eps and the EMA decay from the checkpoint; ApplyTrainConfig puts the
    run's values back (lr = new base rate x the schedule's factor at the restored step)."""
    import dataclasses
    from types import SimpleNamespace

    from alphafold_mem.train import AlphaFoldLightning
    from alphafold_mem.train.resume import ApplyTrainConfig
    from alphafold_mem.train.schedules import af2_lr_factor

    tc = TrainConfig(lr=2e-3, warmup_steps=3)
    module = AlphaFoldLightning(model_config("tiny"), tc)
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    opt.step(), sched.step(), sched.step()  # two steps done, as restored from a checkpoint
    trainer = SimpleNamespace(lr_scheduler_configs=[SimpleNamespace(scheduler=sched)], optimizers=[opt])
    ApplyTrainConfig().on_train_start(trainer, module)  # no override: the very same rate
    assert opt.param_groups[0]["lr"] == 2e-3 * af2_lr_factor(2, 3, 50_000, 50_000, 0.95)
    module.train_config = dataclasses.replace(tc, lr=5e-4, warmup_steps=10, adam_eps=1e-8, ema_decay=0.5)
    sched.lr_lambdas = [lambda s: af2_lr_factor(s, 10, 50_000, 50_000, 0.95)]  # as configure_optimizers builds it
    ApplyTrainConfig().on_train_start(trainer, module)
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4 * 3 / 10) and opt.param_groups[0]["eps"] == 1e-8
    assert module.ema.decay == 0.5 and sched.base_lrs == [5e-4]
