"""MSA and template search with pyhmmer on the small real databases of ``data/search`` (built by
``scripts/build_search_data.py`` from the shipped alignments and mmCIFs), the two template-hit
formats, AF2's template filters, and template features from hits."""

import json
import os

import numpy as np
import pytest
import torch

from alphafold_mem.data import make_template_features, parse_mmcif, parse_msa
from alphafold_mem.data.features.templates import align_template
from alphafold_mem.data.template_hits import parse_hhr, parse_hmmsearch_sto
from alphafold_mem.data.templates_from_hits import parse_obsolete, select_templates

from .conftest import REPO_DATA, TEST_DATA
from .predict_cli import prediction

pytest.importorskip("pyhmmer", reason="pyhmmer is not installed (pip install pyhmmer)")

SEARCH = REPO_DATA / "search"
HOMOLOGS = SEARCH / "homologs.fasta"
SEQRES = SEARCH / "pdb_seqres.txt"
MMCIF_DIRS = [REPO_DATA / "mmcif", SEARCH / "mmcif"]
HITS = TEST_DATA / "templates"
SEQ_1LCD = "MKPVTLYDVAEYAGVSYQTVSRVVNQASHVSAKTREKVEAAMAELNYIPNR"
SEQ_102M = parse_mmcif(REPO_DATA / "mmcif" / "102m.cif").sequence


def _sources(names):
    """The shipped alignment each hit row came from (``source=`` in homologs.fasta)."""
    out = []
    for name in names[1:]:
        src = [w.split("=", 1)[1] for w in name.split() if w.startswith("source=")]
        out.append(src[0] if src else None)
    return out


def test_search_finds_the_shipped_homologs(tmp_path):
    from alphafold_mem.search import JackhmmerSettings, SearchOptions, search_target

    options = SearchOptions((str(HOMOLOGS),), None, JackhmmerSettings(), 1, False)
    outcome = search_target("1lcd_A", SEQ_1LCD, tmp_path, options, log=lambda line: None)
    a3m = tmp_path / "1lcd_A" / "homologs_hits.a3m"
    assert outcome.msa_files == [str(a3m)]
    msa = parse_msa(a3m, query=SEQ_1LCD)
    sto = parse_msa(tmp_path / "1lcd_A" / "homologs_hits.sto", query=SEQ_1LCD)
    assert msa.sequences == sto.sequences and np.array_equal(msa.deletion_matrix, sto.deletion_matrix)
    assert msa.depth > 100 and len(set(msa.sequences)) == msa.depth  # deduplicated, query first
    sources = _sources(msa.descriptions)
    assert sources.count("1lcd_A") == len(sources)  # only lac-repressor homologs, no myoglobin
    in_db = sum(line.endswith("source=1lcd_A") for line in HOMOLOGS.read_text().splitlines())
    assert msa.depth - 1 >= 0.9 * in_db  # nearly every lac-repressor homolog of the database is found
    # cached: a second run reuses the files
    lines = []
    again = search_target("1lcd_A", SEQ_1LCD, tmp_path, options, log=lines.append)
    assert again.reused == ["homologs"] and "reusing" in lines[0]


def test_template_search_finds_the_own_entry_and_date_cutoff_drops_it(tmp_path):
    from alphafold_mem.search.hmmsearch import search_templates

    msa = parse_msa(REPO_DATA / "alignments" / "102m_A" / "non_pairing.a3m", query=SEQ_102M)
    stats = search_templates(msa, SEQRES, tmp_path / "hits.sto")
    hits = parse_hmmsearch_sto(tmp_path / "hits.sto", len(SEQ_102M))
    assert stats["hits"] == len(hits) and [h.name for h in hits][:2] == ["102m_A", "8f9h_A"]
    assert np.array_equal(hits[0].mapping, np.arange(len(SEQ_102M)))
    logged = []
    cut = select_templates(SEQ_102M, hits, MMCIF_DIRS, max_template_date="1998-01-01", log=logged.append)
    assert cut.used == [] and {c.name for c in cut.dropped} >= {"102m_A", "8f9h_A"}
    by_name = {c.name: c.reason for c in cut.dropped}
    assert "released 1998-04-08, after" in by_name["102m_A"] and len(logged) == len(cut.dropped)
    same = select_templates(SEQ_102M, hits, MMCIF_DIRS)  # no cutoff: AF2 drops the query's own sequence
    assert same.used == [] and "identical to the query" in {c.name: c.reason for c in same.dropped}["102m_A"]


def test_hhr_and_hmmsearch_sto_parse_into_the_same_hits():
    for name in ("102m_A", "A0A1A7XAT7"):
        hhr = parse_hhr(HITS / f"{name}_hits.hhr")
        n_res = len(hhr[0].mapping)
        sto = parse_hmmsearch_sto(HITS / f"{name}_hits.sto", n_res)
        assert len(hhr) == len(sto) == 2
        for a, b in zip(hhr, sto):
            assert (a.name, a.pdb_id, a.chain_id, a.hit_start, a.hit_sequence, a.aligned_cols) == (
                b.name,
                b.pdb_id,
                b.chain_id,
                b.hit_start,
                b.hit_sequence,
                b.aligned_cols,
            )
            assert np.array_equal(a.mapping, b.mapping)
    gapped = parse_hhr(HITS / "A0A1A7XAT7_hits.hhr")[0]
    assert gapped.mapping[0] == -1 and gapped.mapping[1] == 2 and gapped.aligned_cols == 150


def test_template_features_from_hits_equal_those_from_the_structure():
    chain = parse_mmcif(REPO_DATA / "mmcif" / "102m.cif")
    hits = parse_hmmsearch_sto(HITS / "A0A1A7XAT7_hits.sto", 154)
    query = (SEARCH / "A0A1A7XAT7.fasta").read_text().split("\n", 1)[1].replace("\n", "")
    chosen = select_templates(query, hits, MMCIF_DIRS, max_template_date="2000-01-01")
    assert chosen.used == ["102m_A"] and [c.name for c in chosen.dropped] == ["8f9h_A"]
    from_hits = make_template_features(query, chosen.templates)
    direct = make_template_features(query, [chain])  # the structure given directly (global alignment)
    m_hit, m_direct = chosen.templates[0][1], align_template(query, chain.sequence)
    same = np.flatnonzero((m_hit == m_direct) & (m_hit >= 0))
    assert len(same) > 100
    for key in (
        "template_aatype",
        "template_all_atom_positions",
        "template_all_atom_mask",
        "template_pseudo_beta",
        "template_pseudo_beta_mask",
    ):
        torch.testing.assert_close(from_hits[key][:, same], direct[key][:, same], rtol=0, atol=0)
    # a point mutant of 102M A: its own entry is no longer identical and is used over its full length
    mutant = SEQ_102M[:9] + ("A" if SEQ_102M[9] != "A" else "G") + SEQ_102M[10:]
    own = select_templates(mutant, parse_hmmsearch_sto(HITS / "102m_A_hits.sto", 154), MMCIF_DIRS, max_templates=1)
    assert own.used == ["102m_A"]
    a, b = make_template_features(mutant, own.templates), make_template_features(mutant, [chain])
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_obsolete_ids_are_mapped_or_dropped(tmp_path):
    obsolete = tmp_path / "obsolete.dat"
    obsolete.write_text(
        " LIST OF OBSOLETE COORDINATE ENTRIES AND SUCCESSORS\n"
        "OBSLTE    31-JUL-94 116L     216L\n"
        "OBSLTE    08-NOV-23 8F9H     102M\n"
        "OBSLTE    01-JAN-99 102M\n"
    )
    table = parse_obsolete(obsolete)
    assert table == {"116l": "216l", "8f9h": "102m", "102m": None}
    hits = parse_hmmsearch_sto(HITS / "102m_A_hits.sto", 154)
    mutant = "A" + SEQ_102M[1:]
    out = select_templates(mutant, hits, MMCIF_DIRS, obsolete={"8f9h": "102m"})
    assert out.used == ["102m_A", "8f9h_A"] and "replaced by 102m" in out.choices[1].reason
    out = select_templates(mutant, hits, MMCIF_DIRS, obsolete={"102m": None})
    assert "obsolete without a successor" in out.choices[0].reason and out.used == ["8f9h_A"]


def test_search_cli_and_missing_database(tmp_path, capsys):
    from alphafold_mem.cli import main

    fasta = REPO_DATA / "fasta" / "per_entry" / "1lcd.fasta"
    rc = main(
        [
            "search",
            str(fasta),
            "--db",
            str(HOMOLOGS),
            "--template-db",
            str(SEQRES),
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    folder = tmp_path / "1lcd_A"
    assert sorted(os.listdir(folder)) == ["homologs_hits.a3m", "homologs_hits.sto", "pdb_hits.sto", "search.json"]
    assert [h.name for h in parse_hmmsearch_sto(folder / "pdb_hits.sto", 51)][0] == "1lcd_A"
    rc = main(["search", str(fasta), "--db", str(tmp_path / "nope.fasta"), "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "nope.fasta: sequence database not found" in err


def test_predict_uses_templates_from_the_search(tmp_path):
    """Tiny weights (templates on): the homolog query's hit 102M A reaches the model."""
    from alphafold_mem import AlphaFold, model_config
    from alphafold_mem.predict import predict
    from alphafold_mem.predict.stages import PipelineOptions
    from alphafold_mem.weights import save_checkpoint

    torch.manual_seed(0)
    save_checkpoint(AlphaFold(model_config("tiny")), tmp_path / "tiny.ckpt")
    lines = []
    pipeline = PipelineOptions(
        databases=(str(HOMOLOGS),),
        template_db=str(SEQRES),
        mmcif_dirs=tuple(map(str, MMCIF_DIRS)),
        max_template_date="2000-01-01",
        progress=False,
    )
    run = predict(
        SEARCH / "A0A1A7XAT7.fasta",
        tmp_path / "out",
        weights=tmp_path / "tiny.ckpt",
        pipeline=pipeline,
        num_recycles=0,  # what is checked is the template input: one pass of the model reads it
        track_memory=False,
        log=lines.append,
    )
    assert run.exit_code == 0
    scores = json.loads(prediction(tmp_path / "out", "A0A1A7XAT7", "_scores.json").read_text())
    assert scores["templates"]["used"] == ["102m_A"] and scores["templates"]["used_by_model"] is True
    assert any("8f9h_A" in line and "dropped: released 2023-11-08" in line for line in lines)
