"""Templates in training (issue 33 item 1): hits read from each chain's alignment folder, templates
featurised from a template mmCIF directory, no template released after its target (AF2: 60 days
before), OpenFold's subsampling, features cropped with the sample; the training memory policy
computes the reference outputs and gradients with these templates present."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
from alphafold_mem.cli import main
from alphafold_mem.data import ProteinChainDataset, build_chain_index, collate, read_structure
from alphafold_mem.data.alignment_db import write_alignment_db
from alphafold_mem.data.training_templates import (
    TemplateSource,
    subsample_templates,
    template_cutoff,
    training_templates,
)
from alphafold_mem.planner.estimate import proxy_loss
from alphafold_mem.train import TrainConfig
from alphafold_mem.train.data_module import AF2DataModule, DataOptions
from alphafold_mem.train.resume import read_saved_run

from .conftest import REPO_DATA

pytestmark = pytest.mark.filterwarnings("ignore")

MMCIF = REPO_DATA / "mmcif"
#: Template hits of 2q2k_A (released 2008-02-05): (template chain, query start, template start, length).
HITS = (("102m_A", 20, 10, 40), ("3u8v_A", 25, 5, 40), ("721p_A", 30, 0, 35))
LATE = "3u8v_A"  # released 2011-11-09, after its target


def _chain(name):
    pdb, chain = name.split("_")
    path = MMCIF / ("721p-assembly1.cif" if pdb == "721p" else f"{pdb}.cif")
    return read_structure(path).chain(chain)


def write_hhr(path, query_name, query, hits):
    """An HH-suite ``.hhr`` with one ungapped alignment block per hit."""
    lines = [f"Query         {query_name}", f"Match_columns {len(query)}", "", " No Hit"]
    for k, (name, q0, t0, n) in enumerate(hits, 1):
        lines.append(f"{k:3d} {name:<30} 100.0 1e-10 1e-11  50.0   0.0 {n:4d} {q0 + 1}-{q0 + n} {t0 + 1}-{t0 + n}")
    lines.append("")
    for k, (name, q0, t0, n) in enumerate(hits, 1):
        t = _chain(name).sequence
        lines += [
            f"No {k}",
            f">{name} mol:protein length:{len(t)}",
            f"Probab=100.00  E-value=1e-10  Score=50.00  Aligned_cols={n}  Identities=30%  Similarity=0.000  "
            f"Sum_probs={n}.0  Template_Neff=1.000",
            "",
            f"Q {query_name:<16} {q0 + 1:>4} {query[q0 : q0 + n]} {q0 + n:>4} ({len(query)})",
            f"T {name:<16} {t0 + 1:>4} {t[t0 : t0 + n]} {t0 + n:>4} ({len(t)})",
            "",
        ]
    path.write_text("\n".join(lines + ["Done!", ""]))


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """2q2k (hits in its alignment folder), 1lcd (alignment, no hit file), 3u8v (no alignment)."""
    if not (MMCIF / "2q2k.cif").is_file():
        pytest.skip("data/ example set not shipped")
    d = tmp_path_factory.mktemp("templates_tree")
    (d / "mmcif").mkdir()
    for name in ("2q2k.cif", "1lcd.cif", "3u8v.cif"):
        shutil.copy(MMCIF / name, d / "mmcif" / name)
    for name in ("2q2k_A", "1lcd_A"):
        shutil.copytree(REPO_DATA / "alignments" / name, d / "alignments" / name)
    (d / "templates").mkdir()  # the template mmCIF directory: <pdb_id>.cif
    for name, src in (("102m", "102m.cif"), ("3u8v", "3u8v.cif"), ("721p", "721p-assembly1.cif")):
        shutil.copy(MMCIF / src, d / "templates" / f"{name}.cif")
    query = _chain("2q2k_A").sequence
    write_hhr(d / "alignments" / "2q2k_A" / "pdb70_hits.hhr", "2q2k_A", query, HITS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_chain_index([d / "mmcif"], d / "alignments", d / "index" / "index.json", cache_dir=d / "index" / "cache")
    return d


def _cfg():
    cfg = model_config("tiny", **{"num_recycles": 0, "data.max_msa_clusters": 8, "data.max_extra_msa": 8})
    assert cfg.template.enabled
    return cfg


def _template_rows(name):
    """Full-length ``template_aatype`` row of each hit's template on 2q2k_A (by hit name)."""
    query = _chain("2q2k_A").sequence
    rows = {}
    for hit, q0, t0, n in HITS:
        row = np.full(len(query), 21)
        row[q0 : q0 + n] = _chain(hit).aatype[t0 : t0 + n]
        rows[hit] = torch.from_numpy(row)
    return rows


def test_template_cutoff_is_60_days_before_the_target():
    assert template_cutoff(None, "2008-02-05") == "2007-12-07"
    assert template_cutoff("2000-01-01", "2008-02-05") == "2000-01-01"
    assert template_cutoff("2010-01-01", None) == "2010-01-01" and template_cutoff(None, None) is None


def test_training_templates_drop_later_releases_and_subsample(tree):
    entry_folder = tree / "alignments" / "2q2k_A"
    query = _chain("2q2k_A").sequence
    source = TemplateSource([tree / "templates"], max_hits=4)
    got, selection = training_templates(
        query, entry_folder, "2008-02-05", source, train=False, rng=np.random.default_rng(0)
    )
    assert selection.used == ["102m_A", "721p_A"]
    (late,) = [c for c in selection.dropped if c.name == LATE]
    assert "after --max-template-date 2007-12-07" in late.reason
    assert [c.chain_id for c, _ in got] == ["A", "A"]
    # --max-template-date earlier than the target: only the 1994 template remains.
    _, sel = training_templates(
        query,
        entry_folder,
        "2008-02-05",
        TemplateSource([tree / "templates"], "1995-01-01"),
        train=False,
        rng=np.random.default_rng(0),
    )
    assert sel.used == ["721p_A"]
    # Subsampling (OpenFold data_transforms.random_crop_to_size): k uniform in 0..n, random order. k = 0
    # is drawn too, as OpenFold does (templates_crop_start = randint(0, n) with n included keeps n - start
    # templates): a chain with n = 3 usable templates trains without any in about 1 draw of 4.
    counts = np.bincount([len(subsample_templates(list("abc"), np.random.default_rng(s))) for s in range(800)])
    assert len(counts) == 4 and counts.min() > 150
    assert abs(counts[0] / 800 - 1 / 4) < 0.05
    assert subsample_templates([], np.random.default_rng(0)) == []
    assert {tuple(subsample_templates(list("abc"), np.random.default_rng(s))) for s in range(200)} >= {
        ("a", "b", "c"),
        ("c", "b", "a"),
    }


def test_batches_hold_templates_for_chains_with_hits(tree):
    """Every training draw of 2q2k (A, and B through A's folder) carries templates from its hits (none
    released after it), cropped with the sample; chains without hits carry one masked placeholder."""
    cfg = _cfg()
    source = TemplateSource([tree / "templates"], subsample=False, max_hits=cfg.template.max_templates)
    ds = ProteinChainDataset(tree / "index" / "index.json", cfg, seed=3, templates=source, recycling_slices=1)
    rows = _template_rows("2q2k_A")
    by_name = {e["name"]: i for i, e in enumerate(ds.entries)}
    for epoch in range(3):
        ds.set_epoch(epoch)
        for name, i in by_name.items():
            f = ds[i].features
            mask = f["template_mask"][..., 0]
            if not name.startswith("2q2k"):  # 2q2k_B uses the folder of 2q2k_A (same sequence)
                assert mask.sum() == 0, name
                continue
            assert mask.sum() == 2  # 102m_A and 721p_A (tiny: max_templates 2)
            crop = f["residue_index"][..., 0]
            assert len(crop) <= cfg.data.crop_size
            seen = {hit for hit, row in rows.items() for t in f["template_aatype"][..., 0] if torch.equal(t, row[crop])}
            assert seen == {"102m_A", "721p_A"}, seen
    batch = collate([ds[by_name["2q2k_A"]], ds[by_name["1lcd_A"]]])
    assert batch.features["template_mask"][..., 0].sum(-1).tolist() == [2.0, 0.0]


def test_data_module_draws_templates_and_reports_missing_hits(tree, tmp_path):
    """Through the data module (OpenFold's subsampling on): draws of 3u8v (no alignment folder) never
    hold a template, draws of 2q2k (hits in its folder, shared by 2q2k_B) do, in some draws."""
    cfg = _cfg()
    tc = TrainConfig(held_out=("1lcd",), seed=0)
    opts = DataOptions(template_mmcif_dirs=(str(tree / "templates"),))
    lines = []
    dm = AF2DataModule(
        tree / "index", cfg, tc, tmp_path / "idx", max_steps=12, report_dir=tmp_path, log=lines.append, options=opts
    )
    dm.setup()
    assert dm.train_set.templates is not None and dm.val_set.templates is not None
    sums = {}
    for batch in dm.train_dataloader():
        (name,) = batch.sample_ids
        sums.setdefault(name[:4], []).append(float(batch.features["template_mask"][0, :, 0].sum()))
    assert set(sums) == {"2q2k", "3u8v"}, sums
    assert max(sums["3u8v"]) == 0 and max(sums["2q2k"]) > 0, sums
    assert any(line.startswith("data: no template hit file: 2 (3u8v_A") for line in lines), lines
    val = next(iter(dm.val_dataloader()))  # 1lcd_A: no hits -> one masked placeholder, full length
    assert val.features["template_mask"].sum() == 0 and val.features["aatype"].shape[-1] == 51


def test_training_policy_matches_reference_with_templates(tree):
    """Training-path equivalence with the template stack: the training memory policy (every block
    checkpointed, low-memory attention) gives the reference outputs and parameter gradients on a
    real batch holding two templates (and the masked placeholder of a chain without hits)."""
    cfg = _cfg()
    source = TemplateSource([tree / "templates"], subsample=False, max_hits=cfg.template.max_templates)
    ds = ProteinChainDataset(tree / "index" / "index.json", cfg, seed=1, templates=source, recycling_slices=1)
    names = [e["name"] for e in ds.entries]
    batch = collate([ds[names.index("2q2k_A")], ds[names.index("1lcd_A")]]).features
    assert batch["template_mask"].sum() == 2
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval()  # no dropout: the policies agree to rounding
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)

    def run(policy):
        bind(model, policy)
        model.zero_grad(set_to_none=True)
        out = model(batch, recycle_dim=-1)
        proxy_loss(out).backward()
        return {k: v.detach() for k, v in out.items()}, {
            n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
        }

    ref_out, ref_grads = run(MemoryPolicy.reference())
    out, grads = run(MemoryPolicy.training())
    bind(model, MemoryPolicy.reference())
    assert (out["final_atom_positions"] - ref_out["final_atom_positions"]).abs().max() <= 1e-4
    assert (out["plddt"] - ref_out["plddt"]).abs().max() <= 1e-4
    template_grads = [n for n in ref_grads if n.startswith("template") or ".template" in n]
    assert template_grads and any(ref_grads[n].norm() > 0 for n in template_grads)
    floor = 1e-6 * max(g.norm().item() for g in ref_grads.values())
    for n, g in ref_grads.items():
        if g.norm().item() > floor:
            assert (grads[n] - g).norm() / g.norm() <= 1e-4, n


def test_train_command_runs_with_templates(tree, tmp_path):
    """``alphafold-mem train --max-steps 2`` with templates from the chains' hit files (tiny preset,
    validation with the default workers); the flags travel in the checkpoint's run settings."""
    out = tmp_path / "run"
    flags = ["--preset", "tiny", "--max-steps", "2", "--held-out", "1lcd", "--val-every", "2", "--ckpt-every", "2"]
    flags += ["--set", "num_recycles=0", "--set", "data.crop_size=24", "--set", "data.max_msa_clusters=4"]
    flags += ["--set", "data.max_extra_msa=4", "--memory-policy", "reference"]
    templates = ["--template-mmcif-dir", str(tree / "templates"), "--max-template-date", "2021-10-10"]
    runtime = ["--no-progress", "--accelerator", "cpu", "--out", str(out)]
    assert main(["train", "--data", str(tree), *flags, *templates, *runtime]) == 0
    report = json.loads((out / "data_report.json").read_text())
    assert {n["item"] for n in report["notes"] if n["reason"] == "no template hit file"} == {"3u8v_A", "3u8v_B"}
    saved = read_saved_run(out / "checkpoints" / "last.ckpt")
    assert saved.run["data_options"]["template_mmcif_dir"] == [str(tree / "templates")]
    assert (out / "logs" / "metrics.csv").read_text().count("\n") >= 2


def _index_through_db(tree, tmp_path):
    """The chain index of ``tree``'s mmCIFs with alignments read from ``tmp_path/db``'s database."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_chain_index(
            [tree / "mmcif"],
            None,
            tmp_path / "index" / "index.json",
            cache_dir=tmp_path / "index" / "cache",
            alignment_index=tmp_path / "db" / "alignment_db.index",
        )


def test_templates_from_the_alignment_database_equal_those_from_the_folders(tree, tmp_path):
    """The tree's alignment folders written into OpenFold's alignment database (hit files included):
    indexed through the database, every chain's hit file is read from the ``.db`` shard by seek, and
    every draw (training mode, OpenFold's shuffle and subsampling on) equals the draw from the
    folders, feature by feature; 2q2k's draws hold templates, the others none."""
    write_alignment_db(tree / "alignments", tmp_path / "db", shards=2)
    via_db = _index_through_db(tree, tmp_path)
    cfg = _cfg()
    source = TemplateSource([tree / "templates"], max_hits=cfg.template.max_templates)
    folders = ProteinChainDataset(tree / "index" / "index.json", cfg, seed=5, templates=source, recycling_slices=1)
    stored = ProteinChainDataset(via_db, cfg, seed=5, templates=source, recycling_slices=1)
    names = [e["name"] for e in folders.entries]
    assert names == [e["name"] for e in stored.entries]
    assert stored.notes == folders.notes  # the same chains lack a hit file ("no template hit file")
    hit_file = stored.hit_file(stored.entries[names.index("2q2k_A")])
    assert hit_file.span is not None and str(hit_file).endswith(".db[pdb70_hits.hhr]")
    assert all(not e.get("alignment_dir") for e in stored.entries)
    with_templates = set()
    for epoch in range(4):
        folders.set_epoch(epoch)
        stored.set_epoch(epoch)
        for i, name in enumerate(names):
            a, b = folders[i].features, stored[i].features
            assert a.keys() == b.keys()
            for k in a:
                assert torch.equal(a[k], b[k]), (name, epoch, k)
            if a["template_mask"].sum() > 0:
                with_templates.add(name)
    assert with_templates == {"2q2k_A", "2q2k_B"}


def test_hmmsearch_and_hhr_hits_read_from_a_database_span(tmp_path):
    """Both hit formats read from bytes of a database file give the hits read from the file itself."""
    from alphafold_mem.data.template_hits import read_template_hits

    src = REPO_DATA.parent / "tests" / "data" / "templates"
    names = ("102m_A_hits.sto", "102m_A_hits.hhr")
    blobs = [b"padding before\n", *((src / n).read_bytes() for n in names)]
    (tmp_path / "x.db").write_bytes(b"".join(blobs))
    start = len(blobs[0])
    n_res = len(_chain("102m_A").sequence)
    for name, blob in zip(names, blobs[1:]):
        stored_name = "hmm_output.sto" if name.endswith(".sto") else "pdb70_hits.hhr"
        got = read_template_hits(tmp_path / "x.db", n_res, span=(start, len(blob)), name=stored_name)
        want = read_template_hits(src / name, n_res)
        assert [h.name for h in got] == [h.name for h in want] and len(got) == 2
        assert all(np.array_equal(g.mapping, w.mapping) for g, w in zip(got, want))
        assert all(g.source.startswith(f"{tmp_path / 'x.db'}[{stored_name}]") for g in got)
        start += len(blob)


def test_unreadable_stored_hit_file_is_warned_once_and_the_chain_trains_without_templates(tree, tmp_path):
    """A hit file stored in the alignment database that is not text: one warning naming the shard and
    the stored file, the chain's draws carry no template, the other draws are unaffected."""
    shutil.copytree(tree / "alignments", tmp_path / "alignments")
    (tmp_path / "alignments" / "2q2k_A" / "pdb70_hits.hhr").write_bytes(b"\x00\x01\x02 not an hhr")
    write_alignment_db(tmp_path / "alignments", tmp_path / "db")
    index = _index_through_db(tree, tmp_path)
    cfg = _cfg()
    source = TemplateSource([tree / "templates"], subsample=False, max_hits=cfg.template.max_templates)
    ds = ProteinChainDataset(index, cfg, seed=0, templates=source, recycling_slices=1)
    i = [e["name"] for e in ds.entries].index("2q2k_A")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(2):
            ds.set_epoch(epoch)
            assert ds[i].features["template_mask"].sum() == 0
    lines = [str(w.message) for w in caught if "pdb70_hits.hhr" in str(w.message)]
    assert len(lines) == 1 and "alignment_db_0.db[pdb70_hits.hhr]" in lines[0] and "binary content" in lines[0], lines
    assert ds.num_skipped == 0
