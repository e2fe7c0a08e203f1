"""OpenFold's data layout read as it is: mmCIF folder, alignment folders or alignment database,
chain_data_cache.json, mmcif_cache.json, duplicate_pdb_chains.txt; the parallel, incremental index."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

import alphafold_mem.data.chain_index as chain_index_module
from alphafold_mem.config import model_config
from alphafold_mem.data import ChainIndex, ProteinChainDataset, build_chain_index
from alphafold_mem.data.alignment_db import AlignmentDb, write_alignment_db

from .test_train_templates import HITS, write_hhr

DATA = Path(__file__).resolve().parents[1] / "data"
STRUCTURES = ("102m", "1a8o", "1lcd", "2q2k")


def _chain_seq(name: str) -> str:
    from alphafold_mem.data import read_structure

    pdb, chain = name.split("_")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_structure(DATA / "mmcif" / f"{pdb}.cif").chain(chain, id_type="auth").sequence


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """An OpenProteinSet-like tree from the shipped files.

    - 102m_A: its own folder; 1lcd_A: its MSA stored under 1lcd_X, listed with it in
      duplicate_pdb_chains.txt; 2q2k_A: its MSA and template hits (pdb70_hits.hhr) stored under
      9zzz_A, found by sequence through chain_data_cache.json (no alignment is opened for that);
      1a8o_A: no alignment.
    """
    if not all((DATA / "mmcif" / f"{s}.cif").is_file() for s in STRUCTURES):
        pytest.skip("data/ example set not shipped")
    root = tmp_path_factory.mktemp("openfold_tree")
    (root / "pdb_mmcif").mkdir()
    for s in STRUCTURES:
        shutil.copy(DATA / "mmcif" / f"{s}.cif", root / "pdb_mmcif" / f"{s}.cif")
    ali = root / "alignments"
    shutil.copytree(DATA / "alignments" / "102m_A", ali / "102m_A")
    shutil.copytree(DATA / "alignments" / "1lcd_A", ali / "1lcd_X")
    shutil.copytree(DATA / "alignments" / "2q2k_A", ali / "9zzz_A")
    write_hhr(ali / "9zzz_A" / "pdb70_hits.hhr", "2q2k_A", _chain_seq("2q2k_A"), HITS)
    (root / "duplicate_pdb_chains.txt").write_text("1lcd_X 1lcd_A\n102m_A\n")
    cache = {
        "9zzz_A": {"release_date": "2000-01-01", "seq": _chain_seq("2q2k_A"), "resolution": 2.0, "cluster_size": 1},
        "1a8o_A": {"release_date": "1998-01-01", "seq": _chain_seq("1a8o_A"), "resolution": 1.7, "cluster_size": 1},
    }
    (root / "chain_data_cache.json").write_text(json.dumps(cache))
    (root / "mmcif_cache.json").write_text(json.dumps({"1a8o": {"release_date": "1998-01-01", "no_chains": 1}}))
    write_alignment_db(ali, root / "alignment_db", shards=2, duplicate_chains=root / "duplicate_pdb_chains.txt")
    return root


def _build(tree: Path, out: Path, *, via_db: bool, workers: int = 1) -> ChainIndex:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_chain_index(
            [tree / "pdb_mmcif"],
            None if via_db else tree / "alignments",
            out / "index.json",
            cache_dir=out / "cache",
            workers=workers,
            alignment_index=(tree / "alignment_db" / "alignment_db.index") if via_db else None,
            duplicate_chains=tree / "duplicate_pdb_chains.txt",
            chain_data_cache=tree / "chain_data_cache.json",
            mmcif_cache=tree / "mmcif_cache.json",
        )


def test_alignment_db_format(tree):
    index = json.loads((tree / "alignment_db" / "alignment_db.index").read_text())
    assert set(index) == {"102m_A", "1lcd_X", "1lcd_A", "9zzz_A"}  # the duplicate added (super index)
    assert index["1lcd_A"] == index["1lcd_X"]
    assert {v["db"] for v in index.values()} == {"alignment_db_0.db", "alignment_db_1.db"}
    for chain, entry in index.items():
        folder = tree / "alignments" / ("1lcd_X" if chain == "1lcd_A" else chain)
        data = (tree / "alignment_db" / entry["db"]).read_bytes()
        assert [f[0] for f in entry["files"]] == sorted(p.name for p in folder.iterdir())
        for name, start, size in entry["files"]:
            assert data[start : start + size] == (folder / name).read_bytes()


def test_sources_resolved_without_opening_other_folders(tree, tmp_path, monkeypatch):
    opened = []
    real = chain_index_module.first_row

    def spy(job):
        opened.append(job)
        return real(job)

    monkeypatch.setattr(chain_index_module, "first_row", spy)
    # an orphan folder: nothing names it; every chain without a folder is found without it
    shutil.copytree(tree / "alignments", tmp_path / "alignments")
    shutil.copytree(DATA / "alignments" / "102m_A", tmp_path / "alignments" / "5orp_A")
    local = tmp_path / "tree"
    local.mkdir()
    for f in ("pdb_mmcif", "duplicate_pdb_chains.txt", "chain_data_cache.json", "mmcif_cache.json"):
        src = tree / f
        (shutil.copytree if src.is_dir() else shutil.copy)(src, local / f)
    (local / "alignments").symlink_to(tmp_path / "alignments")
    (local / "pdb_mmcif" / "1a8o.cif").unlink()  # every chain left has an alignment source
    index = _build(local, tmp_path / "idx", via_db=False)
    by_name = {e["name"]: e for e in index.entries}
    assert by_name["102m_A"]["alignment_dir"].endswith("102m_A")
    assert by_name["1lcd_A"]["alignment_dir"].endswith("1lcd_X")  # duplicate_pdb_chains.txt
    assert by_name["2q2k_A"]["alignment_dir"].endswith("9zzz_A")  # chain_data_cache.json sequence
    assert opened and not any("5orp_A" in str(job[0]) for job in opened)  # only used folders' first rows
    assert any(s["reason"] == "alignment folder without a structure" and s["item"] == "5orp_A" for s in index.skipped)


def test_folders_and_db_give_identical_batches(tree, tmp_path):
    folders = _build(tree, tmp_path / "folders", via_db=False)
    db = _build(tree, tmp_path / "db", via_db=True)
    names = [e["name"] for e in folders.entries]
    assert names == [e["name"] for e in db.entries]
    assert all(e.get("alignment_db") and not e["alignment_dir"] for e in db.entries if e["name"] != "1a8o_A")
    by_name = {e["name"]: e for e in db.entries}
    assert by_name["1a8o_A"]["release_date"] and by_name["1a8o_A"].get("alignment_db") is None
    cfg = model_config("tiny")
    a = ProteinChainDataset(folders, cfg, mode="train", seed=3, recycling_slices=2)
    b = ProteinChainDataset(db, cfg, mode="train", seed=3, recycling_slices=2)
    deep = set()
    for i in range(len(a)):
        a.set_epoch(5)
        b.set_epoch(5)
        sa, sb = a[i], b[i]
        assert sa.sample_id == sb.sample_id
        assert sa.features.keys() == sb.features.keys()
        for k in sa.features:
            assert torch.equal(sa.features[k], sb.features[k]), (sa.sample_id, k)
        if a.load_msas(a.entries[i]):
            deep.add(sa.sample_id)
    assert deep == {"102m_A", "1lcd_A", "2q2k_A", "2q2k_B"}  # own folder, duplicate, by sequence (A and B)
    msas = b.load_msas(by_name["2q2k_A"])
    assert [m.depth for m in msas] == [m.depth for m in a.load_msas({**by_name["2q2k_A"], **_folder_of(folders)})]


def _folder_of(index: ChainIndex) -> dict:
    e = next(e for e in index.entries if e["name"] == "2q2k_A")
    return {"alignment_dir": e["alignment_dir"], "alignment_db": None}


def test_parallel_index_equals_serial_and_rebuild_is_incremental(tree, tmp_path, monkeypatch):
    serial = _build(tree, tmp_path / "one", via_db=True)
    parallel = _build(tree, tmp_path / "two", via_db=True, workers=2)
    strip = lambda idx: [{k: v for k, v in e.items() if k != "cache"} for e in idx.entries]  # noqa: E731
    assert strip(serial) == strip(parallel)
    assert serial.skipped == parallel.skipped
    assert len(parallel.timings) == len(STRUCTURES)

    parsed = []
    real = chain_index_module.parse_structure

    def spy(job):
        parsed.append(Path(job[0]).name)
        return real(job)

    monkeypatch.setattr(chain_index_module, "parse_structure", spy)
    again = _build(tree, tmp_path / "one", via_db=True)  # nothing changed: nothing parsed
    assert parsed == [] and strip(again) == strip(serial)
    local = tmp_path / "tree"
    shutil.copytree(tree, local, symlinks=True)
    _build(local, tmp_path / "three", via_db=True)
    parsed.clear()
    shutil.copy(DATA / "mmcif" / "3u8v.cif", local / "pdb_mmcif" / "3u8v.cif")
    grown = _build(local, tmp_path / "three", via_db=True)
    assert parsed == ["3u8v.cif"]  # only the added structure
    assert {e["pdb_id"].lower() for e in grown.entries} >= {"3u8v", *STRUCTURES}
    reloaded = ChainIndex.load(tmp_path / "three" / "index.json")
    assert [e["name"] for e in reloaded.entries] == [e["name"] for e in grown.entries]


def test_db_index_errors_are_one_line(tmp_path):
    from alphafold_mem.data.errors import InputError

    (tmp_path / "bad.index").write_text('{"1abc_A": {"files": []}}')
    with pytest.raises(InputError, match=r"bad.index: not an OpenFold alignment database index"):
        AlignmentDb(tmp_path / "bad.index")
    (tmp_path / "x.db").write_bytes(b">q\nMK\n")
    from alphafold_mem.data.msa import parse_msa

    with pytest.raises(InputError, match=r"outside the database file \(6 bytes\)"):
        parse_msa(tmp_path / "x.db", span=(2, 10), name="a.a3m")
    (tmp_path / "ok.index").write_text(
        '{"1abc_A": {"db": "x.db", "files": []}, "2abc_A": {"db": "gone_1.db", "files": []}}'
    )
    with pytest.raises(
        InputError, match=r"ok.index: alignment database shard\(s\) named by the index not found in .*: gone_1.db"
    ):
        AlignmentDb(tmp_path / "ok.index")


def test_alignment_db_writer_reads_the_duplicates_first_and_needs_folders(tree, tmp_path):
    """A missing duplicates file fails before any shard is written; a directory without chain folders
    is an error, not an empty database."""
    from alphafold_mem.data.errors import InputError

    with pytest.raises(InputError, match=r"nope.txt: cannot read duplicate chains file"):
        write_alignment_db(tree / "alignments", tmp_path / "db", duplicate_chains=tmp_path / "nope.txt")
    assert not (tmp_path / "db").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: no alignment folders"):
        write_alignment_db(tmp_path / "empty", tmp_path / "db2")


def test_cli_alignment_db_index_and_train(tree, tmp_path):
    from alphafold_mem.cli import main

    assert main(["alignment-db", str(tree / "alignments"), str(tmp_path / "db"), "--shards", "3"]) == 0
    assert len(list((tmp_path / "db").glob("alignment_db_*.db"))) == 3
    out = tmp_path / "index" / "index.json"
    flags = ["--alignment-index", str(tree / "alignment_db" / "alignment_db.index")]
    flags += ["--chain-data-cache", str(tree / "chain_data_cache.json")]
    flags += ["--duplicate-chains", str(tree / "duplicate_pdb_chains.txt")]
    flags += ["--mmcif-cache", str(tree / "mmcif_cache.json")]
    assert main(["index", "--mmcif-dir", str(tree / "pdb_mmcif"), *flags, "--workers", "2", "--out", str(out)]) == 0
    assert len(ChainIndex.load(out)) == 5
    run = ["train", "--preset", "tiny", "--max-steps", "2", "--no-progress", "--accelerator", "cpu"]
    run += ["--held-out", "1a8o", "--set", "num_recycles=0", "--set", "data.crop_size=16"]
    run += ["--set", "data.max_msa_clusters=4", "--num-workers", "0", "--out", str(tmp_path / "run")]
    run += ["--template-mmcif-dir", str(tree / "pdb_mmcif")]  # 2q2k's hits are read from the database
    index_dir = tmp_path / "stable_index"
    rc = main([*run, "--mmcif-dir", str(tree / "pdb_mmcif"), *flags, "--index-dir", str(index_dir)])
    assert rc == 0 and (index_dir / "index.json").is_file()
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    assert {n["item"] for n in report["notes"] if n["reason"] == "no template hit file"} == {"102m_A", "1lcd_A"}
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "run" / "chain_index").exists()  # the index lives in its own place, not under --out
    # another run rewrites the shared index from other sources (folders, no chain_data_cache: 2q2k_A has
    # no alignment then); --resume without the source flags rebuilds it from the checkpoint's sources
    other = ["index", "--mmcif-dir", str(tree / "pdb_mmcif"), "--alignment-dir", str(tree / "alignments")]
    assert main([*other, "--index-dir", str(index_dir)]) == 0
    via = {e["name"]: bool(e.get("alignment_db")) for e in ChainIndex.load(index_dir / "index.json").entries}
    assert not any(via.values())
    from alphafold_mem.train.resume import read_saved_run

    saved = read_saved_run(tmp_path / "run" / "checkpoints" / "last.ckpt").run["index_sources"]
    assert saved["alignment_index"] == str((tree / "alignment_db" / "alignment_db.index").resolve())
    resume = ["train", "--resume", str(tmp_path / "run" / "checkpoints" / "last.ckpt"), "--max-steps", "3"]
    assert main([*resume, "--no-progress", "--accelerator", "cpu"]) == 0
    via = {e["name"]: bool(e.get("alignment_db")) for e in ChainIndex.load(index_dir / "index.json").entries}
    assert via["2q2k_A"] and via["102m_A"]  # the checkpoint's sources again


def test_train_data_dir_index_lives_in_the_data_dir(tmp_path, monkeypatch):
    import alphafold_mem.train.data_module as data_module
    from alphafold_mem.train.data_module import resolve_index

    monkeypatch.setattr(data_module, "default_num_workers", lambda: 0)  # one process: the spy below sees the parses
    data = tmp_path / "data"
    (data / "mmcif").mkdir(parents=True)
    shutil.copy(DATA / "mmcif" / "1a8o.cif", data / "mmcif" / "1a8o.cif")
    first = resolve_index(data, tmp_path / "run1" / "chain_index")
    assert first == data / ".alphafold_mem_index" / "index.json" and first.is_file()
    parsed = []
    real = chain_index_module.parse_structure
    monkeypatch.setattr(chain_index_module, "parse_structure", lambda job: parsed.append(job[0]) or real(job))
    shutil.copy(DATA / "mmcif" / "102m.cif", data / "mmcif" / "102m.cif")
    again = resolve_index(data, tmp_path / "run2" / "chain_index")  # another --out: same index, brought up to date
    assert again == first and [Path(p).name for p in parsed] == ["102m.cif"]
    assert {e["name"] for e in ChainIndex.load(again).entries} == {"1a8o_A", "102m_A"}
    assert not (tmp_path / "run1").exists() and not (tmp_path / "run2").exists()


def test_require_alignments_keeps_chains_with_database_alignments(tree, tmp_path):
    """``--require-alignments`` counts an alignment-database entry as alignments: the same chains are
    kept whether the alignments are read from folders or from the database; only 1a8o_A (none) is
    dropped, under "no alignment folder"."""
    from alphafold_mem.data.sampling import NO_ALIGNMENT_REASON, ChainFilters

    cfg = model_config("tiny")
    for via_db in (False, True):
        index = _build(tree, tmp_path / str(via_db), via_db=via_db)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = ProteinChainDataset(index, cfg, filters=ChainFilters(require_alignments=True))
        assert {e["name"] for e in ds.entries} == {"102m_A", "1lcd_A", "2q2k_A", "2q2k_B"}, via_db
        assert [(r["reason"], r["item"]) for r in ds.rejected] == [(NO_ALIGNMENT_REASON, "1a8o_A")], via_db
        if via_db:
            assert all(e.get("alignment_db") and not e.get("alignment_dir") for e in ds.entries)


def test_a_missing_index_file_is_named_as_such(tmp_path):
    from alphafold_mem.train.data_module import resolve_index

    with pytest.raises(FileNotFoundError, match=r"chain index file not found: .*missing/index.json"):
        resolve_index(tmp_path / "missing" / "index.json")
    with pytest.raises(FileNotFoundError, match=r"training data directory not found: .*nodir"):
        resolve_index(tmp_path / "nodir")


def test_index_of_a_folder_without_structures_is_an_error(tmp_path, capsys):
    from alphafold_mem.cli import main

    (tmp_path / "fasta").mkdir()
    (tmp_path / "fasta" / "a.fasta").write_text(">a\nMKV\n")
    assert main(["index", "--structures", str(tmp_path / "fasta"), "--out", str(tmp_path / "i.json")]) == 1
    err = capsys.readouterr().err
    assert f"i.json: no chain indexed from {tmp_path / 'fasta'} (no structure files found)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
