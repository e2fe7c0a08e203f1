"""Sampling as published (issue 33 items 4, 5): cluster-file weights, self-distillation mixing and its
pLDDT mask, the chain filters and their counts in data_report.json, a separate validation set, and
worker counts that do not change a sample."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from alphafold_mem import model_config
from alphafold_mem.cli.train import _data_options, _restore_run_settings, register
from alphafold_mem.data import InputError, build_chain_index, read_structure
from alphafold_mem.data.sampling import (
    ChainFilters,
    cluster_sizes,
    length_factor,
    mask_low_plddt,
    read_cluster_file,
)
from alphafold_mem.train import TrainConfig
from alphafold_mem.train.data_module import AF2DataModule, DataOptions, default_num_workers
from alphafold_mem.train.draws import Draws as _Draws

from .conftest import REPO_DATA

pytestmark = pytest.mark.filterwarnings("ignore")

MMCIF = REPO_DATA / "mmcif"


def _cfg():
    return model_config(
        "tiny",
        **{"num_recycles": 0, "data.crop_size": 32, "data.max_msa_clusters": 8, "data.max_extra_msa": 8},
    )


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    """Index of every data/mmcif structure with data/alignments (102m_A, 1lcd_A, 2q2k_A/B aligned)."""
    if not (MMCIF / "2q2k.cif").is_file():
        pytest.skip("data/ example set not shipped")
    d = tmp_path_factory.mktemp("sampling_index")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_chain_index([MMCIF], REPO_DATA / "alignments", d / "index.json", cache_dir=d / "cache")
    return d


def _module(data, tmp_path, options=None, num_workers=0, held_out=(), max_steps=4, log=None):
    tc = TrainConfig(held_out=held_out, seed=0, val_every_steps=0)
    return AF2DataModule(
        data,
        _cfg(),
        tc,
        tmp_path / "idx",
        max_steps=max_steps,
        num_workers=num_workers,
        report_dir=tmp_path,
        log=log or (lambda line: None),
        options=options,
    )


def test_cluster_weights_are_one_over_the_cluster_size(index_dir, tmp_path):
    (tmp_path / "clusters.txt").write_text("2q2k_A 2Q2K_B 9xyz_A\n102m_A\n\n721p_A 721p_B 1lcd_A 1a8o_A\n")
    clusters = read_cluster_file(tmp_path / "clusters.txt")
    assert cluster_sizes(clusters) == {
        "2q2k_A": 3,
        "2q2k_B": 3,
        "9xyz_A": 3,
        "102m_A": 1,
        "721p_A": 4,
        "721p_B": 4,
        "1lcd_A": 4,
        "1a8o_A": 4,
    }
    dm = _module(index_dir, tmp_path, DataOptions(cluster_file=str(tmp_path / "clusters.txt")))
    dm.setup()
    ds = dm.train_set
    w = ds.sample_weights().numpy()
    sizes = {"2q2k": 3, "102m": 1, "721p": 4, "1lcd": 4, "1a8o": 4, "3u8v": 1}  # 3u8v: in no cluster
    for e, weight in zip(ds.entries, w):
        assert weight == pytest.approx(length_factor(e["length"]) / sizes[e["name"][:4]]), e["name"]
    notes = [n["item"] for n in dm.report.notes if n["reason"] == "not in the cluster file"]
    assert notes == ["3u8v_A", "3u8v_B"]
    (tmp_path / "bad.txt").write_text("1abc_A 1abc_B\n1abc_A\n")
    with pytest.raises(InputError, match="1abc_A is in two clusters"):
        read_cluster_file(tmp_path / "bad.txt")


def test_every_filter_drops_what_it_says_and_is_counted(index_dir, tmp_path):
    (tmp_path / "chains.txt").write_text("# chains to train on\n102m_A\n1a8o_A\n1lcd_A\n2q2k_A\n2q2k_B\n3u8v_A 2.0\n")
    (tmp_path / "obsolete.dat").write_text("LIST OF OBSOLETE COORDINATE ENTRIES AND SUCCESSORS\n")
    with open(tmp_path / "obsolete.dat", "a") as fh:
        fh.write("OBSLTE    31-JUL-99 1A8O     9A8O\n")
    options = DataOptions(
        max_resolution=2.5,
        max_release_date="2010-01-01",
        filter_file=str(tmp_path / "chains.txt"),
        obsolete=str(tmp_path / "obsolete.dat"),
        require_alignments=True,
    )
    dm = _module(index_dir, tmp_path, options)
    dm.setup()
    assert sorted(e["name"] for e in dm.train_set.entries) == ["102m_A", "1lcd_A"]  # 1lcd: NMR, unknown resolution
    report = json.loads((tmp_path / "data_report.json").read_text())
    by_reason: dict = {}
    for entry in report["dropped"]:
        by_reason.setdefault(entry["reason"], []).append(entry["item"])
    assert by_reason == {
        "resolution above the limit": ["2q2k_A", "2q2k_B"],
        "released after the cut-off": ["3u8v_A", "3u8v_B"],
        "not in the chain list": ["721p_A", "721p_B"],
        "obsolete entry": ["1a8o_A"],
    }
    assert report["counts"]["train"] == 2
    # Without --require-alignments a chain without an alignment folder is used and noted.
    dm = _module(index_dir, tmp_path / "b", DataOptions())
    dm.setup()
    noted = sorted(n["item"] for n in dm.report.notes if n["reason"] == "no alignment folder")
    assert noted == ["1a8o_A", "3u8v_A", "3u8v_B", "721p_A", "721p_B"]
    dm = _module(index_dir, tmp_path / "c", DataOptions(require_alignments=True, max_resolution=2.5))
    dm.setup()
    dropped = sorted(d["item"] for d in dm.report.dropped if d["reason"] == "no alignment folder")
    assert dropped == ["1a8o_A", "3u8v_A", "3u8v_B", "721p_A", "721p_B"]


def test_chain_filters_unit():
    f = ChainFilters(max_release_date="2000-01-01")
    assert f.reason({"name": "1abc_A", "release_date": None})[0] == "no release date"
    assert f.reason({"name": "1abc_A", "release_date": "1999-12-31", "resolution": None}) is None
    assert ChainFilters().reason({"name": "1abc_A", "resolution": 9.5})[0] == "resolution above the limit"
    with pytest.raises(InputError, match="expected YYYY-MM-DD"):
        ChainFilters(max_release_date="2000/01/01")


def _predicted_copy(path, out, low_residues):
    """A PDB file as a predictor writes it: pLDDT in the B-factor column (40 for ``low_residues``,
    90 elsewhere)."""
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith(("ATOM", "HETATM")):
            res = int(line[22:26])
            line = f"{line[:60]}{(40.0 if res in low_residues else 90.0):6.2f}{line[66:]}"
        lines.append(line)
    out.write_text("\n".join(lines) + "\n")


def test_distillation_draws_converge_and_low_plddt_is_masked(index_dir, tmp_path):
    pdb = REPO_DATA / "pdb" / "1a8o.pdb"
    dist = tmp_path / "distillation"
    (dist / "pdb").mkdir(parents=True)
    residue_numbers = sorted({int(line[22:26]) for line in pdb.read_text().splitlines() if line.startswith("ATOM")})
    low = set(residue_numbers[:10])
    _predicted_copy(pdb, dist / "pdb" / "1a8o.pdb", low)
    dm = _module(index_dir, tmp_path, DataOptions(distillation_dir=str(dist), distillation_prob=0.75))
    dm.setup()
    d = dm.distillation_set
    assert len(d) == 1 and dm.report.counts["distillation"] == 1
    draws = _Draws(dm.train_set, 0, d, 0.75)
    share = np.mean([draws.choose(k)[0] is d for k in range(1000)])
    assert abs(share - 0.75) < 0.04, share
    plain = _Draws(dm.train_set, 0)  # without a distillation set the draws are unchanged
    assert [plain.choose(k)[1] for k in range(50)] == [
        int(np.random.default_rng([0, 7, k]).choice(len(plain.p), p=plain.p)) for k in range(50)
    ]
    chain = d.load_chain(d.entries[0])
    raw = read_structure(dist / "pdb" / "1a8o.pdb").chain(d.entries[0]["chain_id"], id_type="auth")
    low_idx = (raw.b_factors * raw.atom37_mask).max(-1) == 40.0
    assert low_idx.sum() == 10 and raw.atom37_mask[low_idx].sum() > 0
    assert chain.atom37_mask[low_idx].sum() == 0  # pLDDT 40: out of the loss
    assert np.array_equal(chain.atom37_mask[~low_idx], raw.atom37_mask[~low_idx])
    mask, plddt = mask_low_plddt(np.ones((3, 37)), np.array([[69.9] * 37, [70.0] * 37, [95.0] * 37]))
    assert mask.sum(-1).tolist() == [0.0, 37.0, 37.0] and plddt.tolist() == pytest.approx([69.9, 70.0, 95.0])
    sample = next(iter(dm.train_dataloader()))
    assert sample.sample_ids  # the mixed stream yields batches
    with pytest.raises(ValueError, match="distillation-prob"):
        DataOptions(distillation_prob=1.5)


def _batches(dm, n):
    out = []
    for i, batch in enumerate(dm.train_dataloader()):
        out.append(batch)
        if i + 1 == n:
            break
    return out


def test_samples_equal_with_0_and_2_workers(index_dir, tmp_path):
    """Training draws and validation batches are the same with 0 and with 2 worker processes."""
    runs = []
    for workers in (0, 2):
        dm = _module(index_dir, tmp_path / str(workers), num_workers=workers, held_out=("1a8o",), max_steps=3)
        dm.setup()
        runs.append((_batches(dm, 3), list(dm.val_dataloader())))
    (train0, val0), (train2, val2) = runs
    assert len(train0) == len(train2) == 3 and len(val0) == len(val2) == 1
    for a, b in zip(train0 + val0, train2 + val2):
        assert a.sample_ids == b.sample_ids
        assert a.features.keys() == b.features.keys()
        for k in a.features:
            assert torch.equal(a.features[k], b.features[k]), k


def test_default_workers_and_separate_validation_data(index_dir, tmp_path):
    assert [default_num_workers(c) for c in (1, 2, 3, 8, 64)] == [0, 1, 2, 4, 4]
    assert _module(index_dir, tmp_path, num_workers=None).num_workers == default_num_workers()
    val = tmp_path / "val"
    (val / "mmcif").mkdir(parents=True)
    shutil.copy(MMCIF / "1a8o.cif", val / "mmcif" / "1a8o.cif")
    dm = _module(index_dir, tmp_path, DataOptions(val_data=str(val)))
    dm.setup()
    assert [e["name"] for e in dm.val_set.entries] == ["1a8o_A"]
    assert "1a8o_A" not in {e["name"] for e in dm.train_set.entries}  # same sequence: out of training
    assert len(dm.train_set) == 8 and dm.report.counts["validation"] == 1


def test_train_command_line_gives_the_data_options():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["train", "--cluster-file", "c.txt", "--distillation-dir", "d", "--distillation-prob", "0.5"]
        + ["--max-resolution", "3", "--max-release-date", "2021-10-10", "--filter-file", "f.txt"]
        + ["--obsolete", "o.dat", "--require-alignments", "--template-mmcif-dir", "a", "--template-mmcif-dir", "b"]
        + ["--max-template-date", "2021-10-10", "--val-data", "v"]
    )
    assert args.num_workers is None  # resolved by the data module: default_num_workers()
    run = _restore_run_settings(args, None)
    expected = DataOptions(
        val_data="v",
        cluster_file="c.txt",
        distillation_dir="d",
        distillation_prob=0.5,
        max_resolution=3.0,
        max_release_date="2021-10-10",
        filter_file="f.txt",
        obsolete="o.dat",
        require_alignments=True,
        template_mmcif_dirs=("a", "b"),
        max_template_date="2021-10-10",
    )
    assert _data_options(args) == expected
    # --resume: the checkpoint's run settings give the flags not repeated; a flag given again wins.
    resumed = parser.parse_args(["train", "--distillation-prob", "0.6", "--resume", "run/checkpoints/last.ckpt"])
    _restore_run_settings(resumed, argparse.Namespace(run=run))
    assert _data_options(resumed) == dataclasses.replace(expected, distillation_prob=0.6)
    fresh = parser.parse_args(["train"])
    _restore_run_settings(fresh, None)
    assert _data_options(fresh) == DataOptions()


def test_filters_that_leave_out_every_validation_chain_leave_training_without_validation(index_dir, tmp_path):
    """The chain list keeps no held-out chain: training runs, without validation, and one line says so;
    the validation chain is counted among the dropped by its reason."""
    (tmp_path / "chains.txt").write_text("102m_A\n")
    lines: list[str] = []
    dm = _module(
        index_dir, tmp_path, DataOptions(filter_file=str(tmp_path / "chains.txt")), held_out=("1a8o",), log=lines.append
    )
    dm.setup()
    assert [e["name"] for e in dm.train_set.entries] == ["102m_A"] and dm.val_set is None
    assert dm.val_dataloader() == []
    assert any(d["item"] == "1a8o_A" and d["reason"] == "not in the chain list" for d in dm.report.dropped)
    assert any(line.startswith("validation: the filters left out all 1 validation chain(s)") for line in lines), lines
