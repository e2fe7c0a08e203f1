"""Templates per chain for complexes: each entity's hits (its ``--msa-dir`` folder, or a hmmsearch
against ``--template-db``) become the monomer route's template features for its sequence, placed at
its chain's residues; nothing reaches the other chain. Real data: the 102M hits of tests/data/templates
on a one-residue mutant of 102M (so that 102M and 8F9H are usable templates), with the 1LCD lac
repressor chain (its own alignment, no hits) in front of it, and the mmCIFs of data/."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from alphafold_mem.cli.main import main
from alphafold_mem.config import model_config
from alphafold_mem.data.complex import make_complex
from alphafold_mem.data.features.pipeline import make_features
from alphafold_mem.data.mmcif import parse_mmcif
from alphafold_mem.data.multimer_features import complex_msa_features
from alphafold_mem.model.alphafold import AlphaFold
from alphafold_mem.predict import PredictError
from alphafold_mem.predict.complex_features import complex_batch
from alphafold_mem.predict.complex_run import predict_complexes
from alphafold_mem.predict.complex_templates import complex_templates
from alphafold_mem.predict.stages import PipelineOptions
from alphafold_mem.weights.checkpoints import save_checkpoint

from .conftest import REPO_DATA, TEST_DATA

MMCIF_DIRS = (str(REPO_DATA / "mmcif"), str(REPO_DATA / "search" / "mmcif"))
SEQ_1LCD = "MKPVTLYDVAEYAGVSYQTVSRVVNQASHVSAKTREKVEAAMAELNYIPNR"
MUTANT = "A" + parse_mmcif(REPO_DATA / "mmcif" / "102m.cif").sequence[1:]
KEYS = ("template_aatype", "template_all_atom_positions", "template_all_atom_mask")


def _msa_dir(tmp_path):
    """Folders ``lac`` (1LCD's alignment, no hits) and ``myo`` (102M's hits only)."""
    root = tmp_path / "msas"
    (root / "lac").mkdir(parents=True)
    (root / "myo").mkdir()
    shutil.copy(REPO_DATA / "alignments" / "1lcd_A" / "jackhmmer_pool.a3m", root / "lac" / "jackhmmer_pool.a3m")
    shutil.copy(TEST_DATA / "templates" / "102m_A_hits.hhr", root / "myo" / "pdb70_hits.hhr")
    return root


def _complex():
    return make_complex([("A", SEQ_1LCD, "lac"), ("B", MUTANT, "myo")], name="cx")


def test_chain_templates_sit_in_their_span_and_match_the_monomer_route(tmp_path):
    cx, lines = _complex(), []
    pipeline = PipelineOptions(mmcif_dirs=MMCIF_DIRS, progress=False)
    feats, record = complex_templates(cx, _msa_dir(tmp_path), pipeline, tmp_path / "out", lines.append)
    assert [e["used"] for e in record["entities"]] == [[], ["102m_A", "8f9h_A"]]
    assert record["entities"][0]["hits_file"] is None
    assert record["entities"][1]["hits_file"].endswith("pdb70_hits.hhr")
    assert any(line.startswith("templates: cx chain(s) B: 2 used") for line in lines)
    n_a, n = len(SEQ_1LCD), cx.num_res
    assert feats["template_aatype"].shape == (4, n) and feats["template_all_atom_positions"].shape == (4, n, 37, 3)
    np.testing.assert_array_equal(feats["template_mask"], [1, 1, 0, 0])

    # The monomer route on the chain alone: its hits, its selection, its features.
    selection = pipeline.templates_from("myo", MUTANT, record["entities"][1]["hits_file"])
    mono = make_features(MUTANT, config=model_config("tiny"), mode="predict", templates=selection.templates)
    for key in KEYS:
        np.testing.assert_array_equal(feats[key][:2, n_a:], mono[key].numpy()[:2], err_msg=key)
        assert not feats[key][:, :n_a].any(), key  # the lac chain has no template in any slot
        assert not feats[key][2:].any(), key  # slots past the chain's templates are padding
    assert feats["template_all_atom_mask"][:2, n_a:].sum() > 0

    # Into the multimer batch: the model's slots, the same values.
    processed = {**complex_msa_features(cx, tmp_path / "msas"), **feats}
    batch = complex_batch(cx, processed, model_config("tiny_multimer"))  # 2 template slots
    for key in KEYS:
        assert torch.equal(batch[key], torch.from_numpy(feats[key][:2])), key
    batch = complex_batch(cx, {k: v for k, v in processed.items() if k not in feats}, model_config("tiny_multimer"))
    assert not batch["template_all_atom_mask"].any()


def test_without_mmcif_dirs_hits_are_only_noted(tmp_path):
    lines = []
    feats, record = complex_templates(_complex(), _msa_dir(tmp_path), None, tmp_path, lines.append)
    assert feats == {} and [e["used"] for e in record["entities"]] == [[], []]
    assert any("template hits in" in line and "no --mmcif-dir" in line for line in lines)


def test_template_search_per_entity_is_written_and_reused(tmp_path):
    pytest.importorskip("pyhmmer", reason="pyhmmer is not installed")
    pipeline = PipelineOptions(
        template_db=str(REPO_DATA / "search" / "pdb_seqres.txt"), mmcif_dirs=MMCIF_DIRS, progress=False
    )
    cx, lines, msas = _complex(), [], _msa_dir(tmp_path)
    feats, record = complex_templates(cx, msas, pipeline, tmp_path / "out", lines.append)
    for eid in (1, 2):
        hits = tmp_path / "out" / "cx" / "template_search" / f"entity_{eid}" / "pdb_hits.sto"
        assert record["entities"][eid - 1]["hits_file"] == str(hits) and hits.is_file()
    # 1LCD's profile (its alignment) finds short myoglobin fragments; the mutant's (the query alone)
    # finds 102M and 8F9H over all but the mutated residue, dropped as identical to the query (AF2).
    assert record["entities"][0]["used"]
    mutant_hits = record["entities"][1]["hits"]
    assert mutant_hits and all("identical to the query" in h["reason"] for h in mutant_hits)
    n_a = len(SEQ_1LCD)
    assert feats["template_all_atom_mask"][:, :n_a].any() and not feats["template_all_atom_mask"][:, n_a:].any()
    assert not feats["template_aatype"][:, n_a:].any()
    again = []
    complex_templates(cx, msas, pipeline, tmp_path / "out", again.append)
    assert sum("reusing" in line for line in again) == 2


def test_predict_runs_a_complex_with_chain_templates(tmp_path, capsys):
    torch.manual_seed(0)
    save_checkpoint(AlphaFold(model_config("tiny_multimer")), tmp_path / "multimer.ckpt")
    fasta = tmp_path / "cx.fasta"
    fasta.write_text(f">lac\n{SEQ_1LCD}\n>myo\n{MUTANT}\n")
    out = tmp_path / "out"
    argv = ["predict", str(fasta), "--complex", "--weights", str(tmp_path / "multimer.ckpt")]
    argv += ["--msa-dir", str(_msa_dir(tmp_path)), "--out", str(out), "--device", "cpu", "--num-recycles", "0"]
    argv += ["--save-features"]
    for d in MMCIF_DIRS:
        argv += ["--mmcif-dir", d]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "2 template(s) (102m_A, 8f9h_A)" in err
    target = out / "cx"
    assert (target / "ranked_0.cif").is_file()
    scores = json.loads((target / "cx_scores.json").read_text())
    assert scores["templates"]["used"] == ["102m_A", "8f9h_A"] and scores["templates"]["used_by_model"] is True
    assert [e["chains"] for e in scores["templates"]["entities"]] == [["lac"], ["myo"]]
    assert json.loads((target / "tiny_multimer_pred_0_scores.json").read_text())["templates"] == scores["templates"]
    saved = np.load(target / "cx_features.npz")
    mask = saved["template_all_atom_mask"]
    assert mask.shape[:2] == (4, len(SEQ_1LCD) + len(MUTANT))
    assert not mask[:, : len(SEQ_1LCD)].any() and mask[:2, len(SEQ_1LCD) :].any()


def test_dap_refuses_the_template_search():
    pipeline = PipelineOptions(template_db=str(REPO_DATA / "search" / "pdb_seqres.txt"), progress=False)
    with pytest.raises(PredictError, match="--dap does not run the template search"):
        predict_complexes("in.fasta", "out", dap=2, pipeline=pipeline, log=lambda _: None)
