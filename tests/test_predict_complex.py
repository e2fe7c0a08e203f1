"""``alphafold-mem predict`` on complexes (issue 43 items 1, 4, 5): the PDB complexes of
tests/data/complexes/fasta (4ZHL U+P with a 10-residue chain, 3U8V homodimer, 5EIL homotrimer, 7DDO
597+209) with small AF2-Multimer weights made here (tiny_multimer, random init, heads perturbed so
that predictions differ): ranked models whose chains, lengths and residue numbers match the input,
files that Biopython (and gemmi when installed) read, the scores and ranking_debug.json fields, the
ranking by 0.8*ipTM + 0.2*pTM, and bad complexes reported in one line while the batch goes on.

CPU cost is kept small: no recycling, 4ZHL (its U chain), 5EIL and 7DDO cut to their first residues per
chain."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from Bio.PDB import MMCIFParser, PDBParser

from alphafold_mem.cli.main import main
from alphafold_mem.config import model_config
from alphafold_mem.model.alphafold import AlphaFold
from alphafold_mem.weights.af2_npz import export_af2_params
from alphafold_mem.weights.checkpoints import save_checkpoint

try:
    import gemmi
except ImportError:  # not a dependency: Biopython reads every file in any case
    gemmi = None

DATA = Path(__file__).parent / "data" / "complexes" / "fasta"
AA = "ACDEFGHIKLMNPQRSTVWY"


def _model(seed: int, preset: str = "tiny_multimer") -> AlphaFold:
    torch.manual_seed(seed)
    model = AlphaFold(model_config(preset))
    with torch.no_grad():  # confidences vary per residue and per model; the backbone moves
        model.aux_heads.predicted_lddt.logits.weight.normal_(0.0, 0.5)
        model.aux_heads.predicted_aligned_error.weight.normal_(0.0, 0.5)
        model.structure_module.affine_update.weight.normal_(0.0, 0.1)
    return model


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """AF2-Multimer-format params_model_{1,2}_multimer_v3.npz (and a monomer params_model_1.npz beside
    them), a multimer checkpoint and a monomer checkpoint."""
    folder = tmp_path_factory.mktemp("params")
    for k in (1, 2):
        export_af2_params(_model(k), folder / f"params_model_{k}_multimer_v3.npz")
    export_af2_params(_model(3, "tiny"), folder / "params_model_1.npz")
    save_checkpoint(_model(4), folder / "multimer.ckpt")
    save_checkpoint(_model(5, "tiny"), folder / "monomer.ckpt")
    return folder


def _run(*argv) -> int:
    return main(["predict", *map(str, argv), "--device", "cpu", "--num-recycles", "0"])


def _fasta_chains(path: Path) -> list[tuple[str, str]]:
    chains = []
    for line in path.read_text().splitlines():
        if line.startswith(">"):
            chains.append([line[1:].split()[0].split("_")[-1], ""])
        elif line.strip():
            chains[-1][1] += line.strip()
    return [tuple(c) for c in chains]


def _cut(source: Path, dest: Path, n: int) -> list[tuple[str, str]]:
    """A copy of ``source`` with every chain cut to its first ``n`` residues."""
    chains = _fasta_chains(source)
    headers = [line for line in source.read_text().splitlines() if line.startswith(">")]
    dest.write_text("".join(f"{h}\n{s[:n]}\n" for h, (_, s) in zip(headers, chains)))
    return [(c, s[:n]) for c, s in chains]


def _check_structures(target_dir: Path, chains: list[tuple[str, str]], ranks: int) -> None:
    """Every ranked PDB/mmCIF: the chains in input order, their lengths and residue numbers 1..L,
    B-factors = the prediction's pLDDT."""
    pdb, cif = PDBParser(QUIET=True), MMCIFParser(QUIET=True)
    for r in range(ranks):
        for path, parser in ((target_dir / f"ranked_{r}.pdb", pdb), (target_dir / f"ranked_{r}.cif", cif)):
            model = next(iter(parser.get_structure("x", str(path))))
            got = [(c.id, [res.id[1] for res in c]) for c in model]
            assert got == [(cid, list(range(1, len(seq) + 1))) for cid, seq in chains], path.name
            resolved = {res.get_parent().id + str(res.id[1]): res for res in model.get_residues()}
            assert len(resolved) == sum(len(s) for _, s in chains)
        if gemmi is not None:  # gemmi is optional here
            for suffix in (".pdb", ".cif"):
                st = gemmi.read_structure(str(target_dir / f"ranked_{r}{suffix}"))
                assert [ch.name for ch in st[0]] == [cid for cid, _ in chains]
                assert [len(ch) for ch in st[0]] == [len(s) for _, s in chains]


def _check_scores(target_dir: Path, name: str, chains: list[tuple[str, str]], tags: list[str]) -> dict:
    ranking = json.loads((target_dir / "ranking_debug.json").read_text())
    assert set(ranking) == {"iptm+ptm", "order"}
    assert sorted(ranking["order"]) == sorted(tags)
    preds = {t: json.loads((target_dir / f"{t}_scores.json").read_text()) for t in tags}
    expected = sorted(tags, key=lambda t: -(0.8 * preds[t]["iptm"] + 0.2 * preds[t]["ptm"]))
    assert ranking["order"] == expected
    for t in tags:
        assert ranking["iptm+ptm"][t] == pytest.approx(0.8 * preds[t]["iptm"] + 0.2 * preds[t]["ptm"], abs=2e-4)
    scores = json.loads((target_dir / f"{name}_scores.json").read_text())
    best = preds[ranking["order"][0]]
    for key in ("ptm", "iptm", "ranking_confidence", "chain_plddt", "chain_pair_iptm"):
        assert scores[key] == best[key], key
    assert 0.0 <= scores["iptm"] <= 1.0 and 0.0 <= scores["ptm"] <= 1.0
    assert list(scores["chain_plddt"]) == [cid for cid, _ in chains]
    n_chains = len(chains)
    assert np.asarray(scores["chain_pair_iptm"]).shape == (n_chains, n_chains)
    plddt = np.asarray(best["plddt"])
    offsets = np.cumsum([0] + [len(s) for _, s in chains])
    for (cid, _), a, b in zip(chains, offsets[:-1], offsets[1:]):
        assert scores["chain_plddt"][cid] == pytest.approx(plddt[a:b].mean(), abs=0.01)
    pdb = PDBParser(QUIET=True).get_structure("x", str(target_dir / "ranked_0.pdb"))
    bfac = [res["CA"].get_bfactor() for res in pdb.get_residues()]
    np.testing.assert_allclose(bfac, plddt, atol=0.01)
    pae = json.loads((target_dir / f"{name}_pae.json").read_text())[0]["predicted_aligned_error"]
    assert np.asarray(pae).shape == (offsets[-1], offsets[-1])
    for plot in (f"{name}_pae.png", f"{name}_plddt.png"):
        assert (target_dir / plot).read_bytes().startswith(b"\x89PNG"), plot
    return preds


def _msa_dir(root: Path, chains: list[tuple[str, str]], stem: str) -> Path:
    """Per-chain folders ``<stem>_<chain>/`` with 30 mutated rows each, so that seeds sample differently."""
    rng = random.Random(0)
    for cid, seq in chains:
        rows = [seq] + ["".join(c if rng.random() < 0.7 else rng.choice(AA) for c in seq) for _ in range(30)]
        folder = root / f"{stem}_{cid}"
        folder.mkdir(parents=True)
        (folder / "uniref90_hits.a3m").write_text("".join(f">s{i}\n{row}\n" for i, row in enumerate(rows)))
    return root


def test_4zhl_two_models_two_predictions_ranked_by_iptm_ptm(tmp_path, weights, capsys):
    assert [(c, len(s)) for c, s in _fasta_chains(DATA / "4zhl.fasta")] == [("U", 247), ("P", 10)]
    fasta = tmp_path / "4zhl.fasta"
    chains = _cut(DATA / "4zhl.fasta", fasta, 40)  # U cut to 40 residues (4 forwards), P whole
    msas = _msa_dir(tmp_path / "msas", chains, "4zhl")
    out = tmp_path / "out"
    rc = _run(
        fasta,
        "--complex",
        "--out",
        out,
        "--weights-dir",
        weights,
        "--models",
        "1,2",
        "--preset",
        "tiny_multimer",
        "--num-predictions-per-model",
        "2",
        "--msa-dir",
        msas,
        "--save-features",
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.count("plan: 4zhl: 50 residues (2 chains)") == 1, err  # both models have one config: one plan
    target = out / "4zhl"
    tags = [f"model_{m}_multimer_v3_pred_{k}" for m in (1, 2) for k in (0, 1)]
    preds = _check_scores(target, "4zhl", chains, tags)
    assert {t: preds[t]["seed"] for t in tags} == {t: int(t[-1]) for t in tags}  # seeds recorded
    assert len({preds[t]["ranking_confidence"] for t in tags}) > 1  # the ranking has something to order
    _check_structures(target, chains, 4)
    feats = np.load(target / "4zhl_features.npz")
    for key in ("msa", "deletion_matrix", "residue_index", "asym_id", "entity_id", "sym_id", "num_paired_rows"):
        assert key in feats.files, key
    np.testing.assert_array_equal(feats["residue_index"], np.r_[np.arange(40), np.arange(10)])
    np.testing.assert_array_equal(feats["asym_id"], np.r_[np.full(40, 1), np.full(10, 2)])
    np.testing.assert_array_equal(feats["entity_id"], feats["asym_id"])
    assert feats["msa"].shape[1] == 50 and feats["msa"].shape[0] > 31  # both chains' rows, block-diagonal
    assert 0 <= int(feats["num_paired_rows"]) <= feats["msa"].shape[0]


def test_homomers_and_7ddo_chains_and_numbering(tmp_path, weights, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    expected = {"3u8v": _fasta_chains(DATA / "3u8v.fasta")}
    (inputs / "3u8v.fasta").write_text((DATA / "3u8v.fasta").read_text())
    expected["5eil"] = _cut(DATA / "5eil.fasta", inputs / "5eil.fasta", 30)
    expected["7ddo"] = _cut(DATA / "7ddo.fasta", inputs / "7ddo.fasta", 40)
    out = tmp_path / "out"
    assert _run(inputs, "--complex", "--out", out, "--weights", weights / "multimer.ckpt") == 0, capsys.readouterr().err
    assert [c for c, _ in expected["5eil"]] == ["A", "B", "C"] and [c for c, _ in expected["7ddo"]] == ["A", "C"]
    for name, chains in expected.items():
        _check_scores(out / name, name, chains, ["tiny_multimer_pred_0"])
        _check_structures(out / name, chains, 1)
    homodimer = json.loads((out / "3u8v" / "3u8v_scores.json").read_text())
    assert [c["entity_id"] for c in homodimer["chains"]] == [1, 1]
    assert [c["sym_id"] for c in homodimer["chains"]] == [1, 2]


def test_bad_chains_one_line_each_and_the_batch_goes_on(tmp_path, weights, capsys):
    fasta = tmp_path / "batch.fasta"
    fasta.write_text(">dna\nACGTACGTACGT:MKVLAAGIHH\n>good\nMKVLAAGIHHSTWY:GSHMKLLVEQ\n>empty\nMKVLLAGW::GHHKLE\n")
    out = tmp_path / "out"
    # the folder holds monomer and multimer files of model 1: a complex takes the multimer ones
    assert _run(fasta, "--out", out, "--weights-dir", weights, "--models", "1", "--preset", "tiny_multimer") == 1
    err = capsys.readouterr().err
    weights_lines = [line for line in err.splitlines() if line.startswith("weights:")]
    assert len(weights_lines) == 1 and "params_model_1_multimer_v3.npz" in weights_lines[0], err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, err
    assert "batch.fasta" in errors[0] and "'dna'" in errors[0] and "chain A" in errors[0] and "nucleic" in errors[0]
    assert "batch.fasta" in errors[1] and "'empty'" in errors[1] and "chain B is empty" in errors[1]
    assert not any("Traceback" in line for line in err.splitlines())
    _check_structures(out / "good", [("A", "MKVLAAGIHHSTWY"), ("B", "GSHMKLLVEQ")], 1)
    assert not (out / "dna").exists() and not (out / "empty").exists()


def test_monomer_weights_run_with_a_chain_gap_labelled(tmp_path, weights, capsys):
    """ColabFold's route for pTM weights: AF2 on the complex with a residue-index gap between chains,
    ipTM from the PAE head, and every output says so."""
    fasta = tmp_path / "pair.fasta"
    fasta.write_text(">pair\nMKVLAAGIHHSTWY:GSHMKLLVEQ\n")
    out = tmp_path / "out"
    assert _run(fasta, "--out", out, "--weights", weights / "monomer.ckpt") == 0, capsys.readouterr().err
    assert "residue-index gap of 200" in capsys.readouterr().err
    chains = [("A", "MKVLAAGIHHSTWY"), ("B", "GSHMKLLVEQ")]
    _check_scores(out / "pair", "pair", chains, ["tiny_pred_0"])
    _check_structures(out / "pair", chains, 1)
    scores = json.loads((out / "pair" / "pair_scores.json").read_text())
    pred = json.loads((out / "pair" / "tiny_pred_0_scores.json").read_text())
    assert scores["route"] == pred["route"] == "monomer_chain_gap" and pred["chain_gap"] == 200
    assert "residue-index gap 200" in (out / "pair" / "ranked_0.pdb").read_text().replace("\nREMARK 250 ", " ")
    assert "residue-index gap 200" in " ".join((out / "pair" / "ranked_0.cif").read_text().split())


def test_complex_without_multimer_or_ptm_weights_is_one_line(tmp_path, weights, capsys):
    fasta = tmp_path / "pair.fasta"
    fasta.write_text(">pair\nMKVLAAGIHH:GSHMKLLVEQ\n")
    assert _run(fasta, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "needs AF2-Multimer weights" in err[0]


def test_complex_batch_inputs_per_route():
    """Multimer weights: residue numbers restart per chain, chain features given; monomer weights:
    numbered through the complex with a gap of 200 before the second chain, AF2's monomer inputs."""
    from alphafold_mem.data.complex import make_complex
    from alphafold_mem.data.multimer_features import complex_msa_features
    from alphafold_mem.predict.complex_features import complex_batch

    cx = make_complex([("A", "MKVLAAG"), ("B", "GSHMK"), ("C", "MKVLAAG")])
    processed = complex_msa_features(cx)
    multimer = complex_batch(cx, processed, model_config("tiny_multimer"))
    assert multimer["residue_index"].tolist() == list(range(7)) + list(range(5)) + list(range(7))
    assert multimer["entity_id"].tolist() == [1] * 7 + [2] * 5 + [1] * 7
    assert multimer["sym_id"].tolist() == [1] * 7 + [1] * 5 + [2] * 7
    assert multimer["target_feat"].shape == (19, 21) and "extra_deletion_matrix" in multimer
    monomer = complex_batch(cx, processed, model_config("tiny"))
    assert monomer["residue_index"].tolist() == list(range(7)) + list(range(207, 212)) + list(range(412, 419))
    assert monomer["target_feat"].shape == (19, 22) and "extra_has_deletion" in monomer


def test_multi_record_file_without_complex_is_separate_chains_said_once(tmp_path, weights, capsys):
    fasta = tmp_path / "two.fasta"
    fasta.write_text(">a\nMKVLAAGIHHSTWY\n>b\nGSHMKLLVEQ\n")
    out = tmp_path / "out"
    assert _run(fasta, "--out", out, "--weights", weights / "monomer.ckpt", "--single-sequence") == 0
    err = capsys.readouterr().err
    assert err.count("predicted as separate chains") == 1 and "--complex" in err, err
    assert (out / "a" / "ranked_0.pdb").is_file() and (out / "b" / "ranked_0.pdb").is_file()
    assert _run(fasta, "--complex", "--out", tmp_path / "cx", "--weights", weights / "multimer.ckpt") == 0
    assert "separate chains" not in capsys.readouterr().err
    _check_structures(
        tmp_path / "cx" / "two", [("a", "MKVLAAGIHHSTWY"), ("b", "GSHMKLLVEQ")], 1
    )  # ids from the records


# -- memory pre-flight (issue: the complex route plans each complex as the monomer route does) -----


def test_preflight_peak_of_a_complex_equals_memory_plan_fasta(tmp_path, weights, capsys):
    """The pre-flight of 7DDO (cut to 40 residues per chain, 31-row MSAs) under --max-memory plans the
    batch's sizes (N_seq and N_extra from the merged MSA, the multimer's template slots) and finds the
    peak and policy that ``memory-plan --fasta`` of the same file finds with the same options."""
    from alphafold_mem import AutoPolicy
    from alphafold_mem.predict.complex_run import predict_complexes
    from alphafold_mem.predict.preflight import format_bytes

    fasta = tmp_path / "7ddo.fasta"
    chains = _cut(DATA / "7ddo.fasta", fasta, 40)
    msas = _msa_dir(tmp_path / "msas", chains, "7ddo")
    budget, lines = 2**30, []
    run = predict_complexes(
        fasta,
        tmp_path / "out",
        one_complex=True,
        weights=weights / "multimer.ckpt",
        num_recycles=0,
        device="cpu",
        msa_dir=msas,
        save_features=True,
        memory_policy=AutoPolicy(precision="fp32", max_memory=budget),
        log=lines.append,
    )
    assert run.exit_code == 0, lines
    plan = run.plans["7ddo"]
    rows = np.load(tmp_path / "out" / "7ddo" / "7ddo_features.npz")["msa"].shape[0]
    assert rows > 16 + 1
    cfg = model_config("tiny_multimer")
    n_seq, n_extra = cfg.data.max_msa_clusters, min(rows - cfg.data.max_msa_clusters, cfg.data.max_extra_msa)
    assert plan.sizes == (80, n_seq, n_extra, cfg.template.max_templates)
    code = main(
        ["memory-plan", "--fasta", str(fasta), "--preset", "tiny_multimer", "--n-seq", str(n_seq)]
        + ["--n-extra", str(n_extra), "--max-memory", f"{budget}B", "--precision", "fp32", "--device", "cpu"]
        + ["--json", "--no-progress"]
    )
    memory_plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan.fit.fits
    assert memory_plan["config"]["chains"] == {"lengths": [40, 40], "entity_ids": [1, 2]}
    assert [memory_plan["config"][k] for k in ("n_res", "n_seq", "n_extra", "n_templ")] == list(plan.sizes)
    assert memory_plan["recommended"]["peak_bytes"] == plan.fit.need
    assert memory_plan["recommended"]["policy"] == json.loads(json.dumps(dataclasses.asdict(plan.fit.policy)))
    assert memory_plan["config"]["usable_budget_bytes"] == plan.fit.budget
    plan_lines = [line for line in lines if line.startswith("plan: 7ddo:")]
    assert len(plan_lines) == 1 and f"predicted peak {format_bytes(plan.fit.need)} of" in plan_lines[0]


def test_complex_over_max_memory_is_one_line_and_the_next_runs(tmp_path, weights, capsys):
    """7DDO (806 residues) does not fit --max-memory 40MiB: one error line naming the file, the complex,
    the need and what to try, one note with the largest complex like it that fits; the small complex
    after it is planned and predicted."""
    a, c = (seq for _, seq in _fasta_chains(DATA / "7ddo.fasta"))
    fasta = tmp_path / "batch.fasta"
    fasta.write_text(f">big\n{a}:{c}\n>small\nMKVLAAGIHH:GSHMKLLVEQ\n")
    out = tmp_path / "out"
    assert _run(fasta, "--out", out, "--weights", weights / "multimer.ckpt", "--max-memory", "40MiB") == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "batch.fasta" in errors[0] and "complex 'big'" in errors[0] and "806 residues need" in errors[0]
    assert "does not fit" in errors[0] and "--max-memory" in errors[0] and "--low-memory" in errors[0]
    assert "--dap" not in errors[0]  # complexes run without it
    assert "budget 0.0391 GiB" in err  # the weights line: --max-memory reached the complex route
    # then one note: the largest complex like it that fits, and the flags (tests/test_largest_complex.py)
    notes = [line for line in err.splitlines() if "largest that fits" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "complex 'big'" in notes[0], err
    assert "every chain cropped to" in notes[0] and " GiB" in notes[0] and "flags: --low-memory" in notes[0]
    assert "plan: small: 20 residues (2 chains)" in err and "plan: big" not in err
    _check_structures(out / "small", [("A", "MKVLAAGIHH"), ("B", "GSHMKLLVEQ")], 1)
    assert not (out / "big" / "ranked_0.pdb").exists()


# -- bad inputs: one line each, the batch goes on --------------------------------------------------


def _a3m_rows(query: str, n: int, headers=None) -> str:
    rng = random.Random(len(query) + n)
    rows = [query] + ["".join(ch if rng.random() < 0.8 else rng.choice(AA) for ch in query) for _ in range(n)]
    names = headers or [f"s{i}" for i in range(len(rows))]
    return "".join(f">{h}\n{row}\n" for h, row in zip(names, rows))


def test_alignment_whose_query_is_another_chain_fails_its_complex(tmp_path, weights, capsys):
    """As a monomer whose MSA query is another sequence: the complex fails in one line naming the
    file and both chains; the next complex runs."""
    a, b = "MKVLAAGIHHSTWYKLMNPQ", "GSHMKLLVEQRSTDEFGHIK"
    fasta = tmp_path / "two.fasta"
    fasta.write_text(f">swapped\n{a}:{b}\n>good\n{a}:{b}\n")
    msas = tmp_path / "msas"
    for folder, query in (("swapped_A", b), ("swapped_B", b), ("good_A", a), ("good_B", b)):
        (msas / folder).mkdir(parents=True)
        (msas / folder / "uniref90_hits.a3m").write_text(_a3m_rows(query, 6))
    out = tmp_path / "out"
    assert _run(fasta, "--out", out, "--weights", weights / "multimer.ckpt", "--msa-dir", msas) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert str(msas / "swapped_A" / "uniref90_hits.a3m") in errors[0] and "'swapped'" in errors[0]
    assert "query is the sequence of chain B, not of chain A" in errors[0]
    _check_structures(out / "good", [("A", a), ("B", b)], 1)
    assert not (out / "swapped").exists()


def test_pairing_a3m_without_taxids_pairs_nothing_and_says_so_once(tmp_path, weights, capsys):
    """Chain A's pairing.a3m names no species: no row is paired (the query row only), one note names
    the file, whatever the number of predictions; the complex runs on its unpaired rows."""
    a, b = "MKVLAAGIHHSTWYKLMNPQ", "GSHMKLLVEQRSTDEFGHIK"
    fasta = tmp_path / "cx.fasta"
    fasta.write_text(f">cx\n{a}:{b}\n")
    msas = tmp_path / "msas"
    species = ["query"] + [f"UniRef100_P{i:05d}_{9600 + i}" for i in range(6)]
    for folder, query, headers in (("cx_A", a, None), ("cx_B", b, species)):
        (msas / folder).mkdir(parents=True)
        (msas / folder / "uniref90_hits.a3m").write_text(_a3m_rows(query, 6))
        (msas / folder / "pairing.a3m").write_text(_a3m_rows(query, 6, headers))
    out = tmp_path / "out"
    argv = ["--weights", weights / "multimer.ckpt", "--msa-dir", msas, "--save-features"]
    assert _run(fasta, "--out", out, *argv, "--num-predictions-per-model", "2") == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "species" in line]
    assert len(notes) == 1 and notes[0].startswith("note:") and str(msas / "cx_A" / "pairing.a3m") in notes[0], err
    feats = np.load(out / "cx" / "cx_features.npz")
    assert int(feats["num_paired_rows"]) == 1 and feats["msa"].shape[0] > 1 + 6
    assert "error:" not in err


def test_weights_dir_without_multimer_files_is_one_line(tmp_path, weights, capsys):
    """--weights-dir with only monomer files of the models asked for: a complex takes AF2-Multimer
    files only from a folder, so the run stops in one line naming the folder and what it holds."""
    mono = tmp_path / "params"
    mono.mkdir()
    (mono / "params_model_1.npz").write_bytes((weights / "params_model_1.npz").read_bytes())
    fasta = tmp_path / "pair.fasta"
    fasta.write_text(">pair\nMKVLAAGIHH:GSHMKLLVEQ\n")
    assert _run(fasta, "--complex", "--out", tmp_path / "out", "--weights-dir", mono, "--models", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and str(mono) in err[0], err
    assert "AF2-Multimer" in err[0] and "af2: models 1" in err[0]
    assert not (tmp_path / "out" / "pair").exists()
