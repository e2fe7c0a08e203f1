"""Bug-log cases of templates, relaxation and training data (issue 35 item 7), inputs in
``tests/data/faults``: obsolete chains followed to the end, a damaged hit file degrading to no
templates, undated templates under a cut-off, NaN models refused before OpenMM, and the reason of
each dropped training chain in words."""

import re

import numpy as np
import pytest

from alphafold_mem.data import ChainIndex, ProteinChainDataset, build_chain_index, parse_mmcif, read_structure
from alphafold_mem.data.errors import InputError
from alphafold_mem.data.template_hits import parse_hmmsearch_sto
from alphafold_mem.data.templates_from_hits import parse_obsolete, select_templates, templates_from_hit_file

from .conftest import REPO_DATA, TEST_DATA

pytestmark = pytest.mark.filterwarnings("ignore")

FAULTS = TEST_DATA / "faults"
MMCIF_DIRS = [REPO_DATA / "mmcif", REPO_DATA / "search" / "mmcif"]
SEQ_102M = parse_mmcif(REPO_DATA / "mmcif" / "102m.cif").sequence
MUTANT = "A" + SEQ_102M[1:]  # not identical to 102M, so its own entry is a usable template


def _hits():
    return parse_hmmsearch_sto(TEST_DATA / "templates" / "102m_A_hits.sto", len(MUTANT))


def test_obsolete_chain_followed_to_the_end_and_loops_dropped():
    table = parse_obsolete(FAULTS / "obsolete_chain.dat")
    out = select_templates(MUTANT, _hits(), MMCIF_DIRS, obsolete=table)
    assert out.used == ["102m_A", "8f9h_A"]
    assert out.choices[1].reason.startswith("obsolete 8f9h -> 9aaa -> 9bbb replaced by 102m")
    loop = select_templates(MUTANT, _hits(), MMCIF_DIRS, obsolete=parse_obsolete(FAULTS / "obsolete_loop.dat"))
    assert loop.used == ["102m_A"] and "loop (8f9h -> 9aaa -> 8f9h" in loop.dropped[0].reason


def test_damaged_hit_file_degrades_to_no_templates_with_a_warning():
    lines = []
    out = templates_from_hit_file(MUTANT, FAULTS / "damaged_102m_A_hits.hhr", MMCIF_DIRS, log=lines.append)
    assert out is None
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "damaged_102m_A_hits.hhr" in lines[0]
    assert lines[0].endswith("running without templates")
    good = templates_from_hit_file(MUTANT, TEST_DATA / "templates" / "102m_A_hits.hhr", MMCIF_DIRS, log=lines.append)
    assert good.used == ["102m_A", "8f9h_A"]


def test_undated_template_is_dropped_under_a_cutoff(tmp_path):
    text = (REPO_DATA / "mmcif" / "102m.cif").read_text()
    # the same entry with no date anywhere (revision history, deposition date)
    undated = re.sub(r"\d{4}-\d{2}-\d{2}", "?", text)
    (tmp_path / "102m.cif").write_text(undated)
    assert read_structure(tmp_path / "102m.cif").release_date is None
    logged = []
    out = select_templates(MUTANT, _hits()[:1], [tmp_path], max_template_date="2020-01-01", log=logged.append)
    assert out.used == [] and "no release date" in out.dropped[0].reason and "dropped" in logged[0]
    assert select_templates(MUTANT, _hits()[:1], [tmp_path]).used == ["102m_A"]  # no cut-off: used


def test_relax_refuses_non_finite_coordinates_in_one_line(tmp_path):
    pytest.importorskip("openmm")
    from alphafold_mem.predict.outputs import write_pdb
    from alphafold_mem.predict.relax import RelaxError, relax_structure

    chain = parse_mmcif(REPO_DATA / "mmcif" / "1a8o.cif")
    pos = chain.atom37_positions.copy()
    pos[5, 1] = np.nan
    write_pdb(tmp_path / "nan.pdb", chain.name, chain.aatype, pos, chain.atom37_mask, chain.atom37_mask[:, 1] * 50)
    with pytest.raises(RelaxError) as exc:
        relax_structure(tmp_path / "nan.pdb", tmp_path / "out.pdb")
    text = str(exc.value)
    assert "\n" not in text and "non-finite" in text and f"first A:{chain.sequence[5]}6 CA" in text
    assert not (tmp_path / "out.pdb").exists()


def test_training_drop_reasons_in_words(tmp_path):
    structures = tmp_path / "structures"
    structures.mkdir()
    for name in ("truncated_1a8o.cif", "one_residue.cif"):
        (structures / name).write_bytes((FAULTS / name).read_bytes())
    (structures / "2q2k.cif").write_bytes((REPO_DATA / "mmcif" / "2q2k.cif").read_bytes())
    with pytest.raises(InputError, match="truncated file: the _atom_site table ends inside a row"):
        read_structure(FAULTS / "truncated_1a8o.cif")
    index = build_chain_index([structures], None, tmp_path / "index.json")
    (skip,) = index.skipped
    assert skip["reason"] == "unreadable structure" and skip["detail"].startswith("truncated file")
    from alphafold_mem import model_config

    ds = ProteinChainDataset(ChainIndex.load(tmp_path / "index.json"), model_config("tiny"))
    reasons = {r["item"]: r["reason"] for r in ds.rejected}
    assert reasons == {"one_residue_A": "too short"}


def test_alignment_with_another_query_is_counted_at_start_up_and_not_warned_per_draw(tmp_path):
    from alphafold_mem import model_config
    from alphafold_mem.train.data_report import DataReport

    (tmp_path / "mmcif").mkdir()
    (tmp_path / "mmcif" / "2q2k.cif").write_bytes((REPO_DATA / "mmcif" / "2q2k.cif").read_bytes())
    folder = tmp_path / "alignments" / "2q2k_A"
    folder.mkdir(parents=True)
    (folder / "uniref90_hits.sto").write_bytes((REPO_DATA / "alignments" / "2q2k_A" / "uniref90_hits.sto").read_bytes())
    (folder / "bfd_uniclust_hits.a3m").write_bytes((FAULTS / "2q2k_A_wrong_query.a3m").read_bytes())
    index = build_chain_index([tmp_path / "mmcif"], tmp_path / "alignments", tmp_path / "index.json")
    mismatch = [s for s in index.skipped if s["reason"] == "alignment query differs from the chain"]
    assert [s["item"] for s in mismatch] == ["2q2k_A", "2q2k_B"]  # B shares A's folder (same sequence)
    assert "bfd_uniclust_hits.a3m: first row differs from the query at position 5" in mismatch[0]["detail"]
    report = DataReport()
    report.add_index(index)
    assert report.dropped == [] and report.notes == mismatch
    assert any(line.startswith("data: alignment query differs from the chain: 2 (") for line in report.lines())
    ds = ProteinChainDataset(ChainIndex.load(tmp_path / "index.json"), model_config("tiny"))
    entry = next(e for e in ds.entries if e["name"] == "2q2k_A")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            msas = ds.load_msas(entry)
    assert len(msas) == 1 and str(msas[0].path).endswith("uniref90_hits.sto")
    assert not [w for w in caught if "bfd_uniclust_hits" in str(w.message)]
    assert ds.num_skipped_files == 0


def test_predict_with_a_damaged_hit_file_runs_the_target_without_templates(tmp_path):
    import json

    import torch

    from alphafold_mem import AlphaFold, model_config
    from alphafold_mem.predict import predict
    from alphafold_mem.predict.stages import PipelineOptions
    from alphafold_mem.weights import save_checkpoint

    torch.manual_seed(0)
    save_checkpoint(AlphaFold(model_config("tiny")), tmp_path / "tiny.ckpt")
    folder = tmp_path / "102m_A"
    folder.mkdir()
    a3m = folder / "non_pairing.a3m"
    a3m.write_bytes((REPO_DATA / "alignments" / "102m_A" / "non_pairing.a3m").read_bytes())
    (folder / "pdb70_hits.hhr").write_bytes((FAULTS / "damaged_102m_A_hits.hhr").read_bytes())
    fasta = tmp_path / "102m.fasta"
    fasta.write_text(f">102m_A\n{SEQ_102M}\n")
    lines = []
    run = predict(
        fasta,
        tmp_path / "out",
        weights=tmp_path / "tiny.ckpt",
        msa=a3m,
        pipeline=PipelineOptions(mmcif_dirs=tuple(map(str, MMCIF_DIRS)), progress=False),
        track_memory=False,
        num_recycles=0,
        log=lines.append,
    )
    assert run.exit_code == 0, lines
    warned = [line for line in lines if line.startswith("warning:") and "pdb70_hits.hhr" in line]
    assert len(warned) == 1 and warned[0].endswith("running without templates")
    scores = json.loads((tmp_path / "out" / "102m_A" / "tiny_seed_0_scores.json").read_text())
    assert scores["templates"]["used"] == [] and scores["templates"]["used_by_model"] is False
