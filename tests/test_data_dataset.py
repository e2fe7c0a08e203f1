"""Chain index + training dataset over the shipped data/ set; bad entries are skipped and counted."""

import importlib.util
import pathlib
import shutil
import warnings

import pytest
import torch

from alphafold_mem.data import (
    ChainIndex,
    InputError,
    InputWarning,
    ProteinChainDataset,
    build_chain_index,
    check_features,
    collate,
)

ROOT = pathlib.Path(__file__).parent.parent
DATA = ROOT / "data"


@pytest.fixture(scope="module")
def index_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("index")
    with pytest.warns(InputWarning, match="duplicate chain 1a8o_A"):  # 1a8o is shipped as .cif and .pdb
        build_chain_index(
            [DATA / "mmcif", DATA / "pdb"], DATA / "alignments", out / "index.json", cache_dir=out / "cache"
        )
    return out / "index.json"


def test_index_contents(index_path):
    index = ChainIndex.load(index_path)
    names = [e["name"] for e in index.entries]
    assert len(names) == 12 and len(set(names)) == 12
    assert len(index.skipped) == 1 and index.skipped[0]["structure"].endswith("1a8o.pdb")
    by_name = {e["name"]: e for e in index.entries}
    assert by_name["2q2k_B"]["alignment_dir"].endswith("2q2k_A")  # shared folder found by sequence
    assert by_name["1lcd_A"]["alignment_dir"].endswith("1lcd_A") and by_name["1a8o_A"]["alignment_dir"] is None
    assert by_name["1lcd_A"]["resolution"] is None and by_name["102m_A"]["length"] == 154
    assert all(index.resolve(e["cache"]).is_file() for e in index.entries)


def test_dataset_iterates_with_crops(index_path, tiny_config):
    ds = ProteinChainDataset(index_path, tiny_config, seed=1)
    assert len(ds) == 12 and ds.sample_weights().shape == (12,)
    crop = tiny_config.data.crop_size
    samples = [ds[i] for i in range(len(ds))]
    assert ds.num_skipped == 0
    for s in samples:
        sizes = check_features(s.features)
        assert sizes["N_res"] <= crop and "all_atom_positions" in s.features
    assert max(check_features(s.features)["N_res"] for s in samples) == crop
    loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=collate, shuffle=False)
    batch = next(iter(loader))
    assert len(batch.sample_ids) == 3 and batch.features["aatype"].shape[0] == 3
    check_features(batch.features, batched=True)
    ds.set_epoch(1)
    assert not torch.equal(ds[4].features["msa_feat"], samples[4].features["msa_feat"])


def test_corrupted_entry_is_skipped_and_counted(tmp_path, tiny_config):
    for name in ("1a8o.cif", "2q2k.cif", "3u8v.cif"):
        shutil.copy(DATA / "mmcif" / name, tmp_path / name)
    build_chain_index([tmp_path], DATA / "alignments", tmp_path / "index.json")  # no cache: parse on load
    (tmp_path / "2q2k.cif").write_text("data_broken\nloop_\n_atom_site.id\n")  # corrupt after indexing
    (tmp_path / "3u8v.cif").unlink()  # missing at start-up
    with pytest.warns(InputWarning) as record:
        ds = ProteinChainDataset(tmp_path / "index.json", tiny_config)
    assert len(ds) == 3 and ds.num_skipped == 2  # 3u8v A and B rejected at start-up
    assert sum("structure file not found" in str(w.message) for w in record) == 2
    with pytest.warns(InputWarning, match="skipping sample"):
        got = [ds[i].sample_id for i in range(len(ds))]
    # ds[1]: 2q2k_A and 2q2k_B fail, 1a8o_A (wrapping round) serves; ds[2]: 2q2k_B fails again.
    assert ds.num_skipped == 2 + 3 and got == ["1a8o_A"] * 3


def test_startup_validation(tmp_path, tiny_config):
    with pytest.raises(InputError, match="chain index not found"):
        ProteinChainDataset(tmp_path / "missing.json", tiny_config)
    with pytest.raises(InputError, match="structure directory not found"):
        build_chain_index([tmp_path / "nope"], None, tmp_path / "i.json")
    (tmp_path / "bad.cif").write_text("not a cif")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        index = build_chain_index([tmp_path], None, tmp_path / "i.json")
    assert len(index.skipped) == 1 and not index.entries
    with pytest.raises(InputError, match="no usable chains"):
        ProteinChainDataset(tmp_path / "i.json", tiny_config)


def test_build_script(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("build_chain_index", ROOT / "scripts/build_chain_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rc = module.main(
        [
            "--structures",
            str(DATA / "mmcif"),
            "--alignments",
            str(DATA / "alignments"),
            "--out",
            str(tmp_path / "index.json"),
        ]
    )
    assert rc == 0 and (tmp_path / "index.json").is_file()
    assert "protein chains" in capsys.readouterr().out
