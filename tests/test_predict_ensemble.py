"""``predict --models --weights-dir --num-seeds``: every (model, seed) predicted, ranked as AF2 does,
and a rerun with more seeds computing only the missing predictions; the weights folder's names."""

import json
import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.cli import main
from alphafold_mem.predict.ensemble import ensemble_members, rank_predictions
from alphafold_mem.weights import WeightsError, export_af2_params
from alphafold_mem.weights.directory import find_model_weights, model_name_of, parse_model_list

from .conftest import REPO_DATA

PEPTIDE = REPO_DATA / "fasta" / "awkward" / "colabfold_5AWL_1_peptide.fasta"  # 5AWL chain 1, 10 residues
SEQ = "YYDPETGTWY"


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    """AF2-format params_model_1.npz and params_model_2.npz of the tiny preset, from our exporter."""
    folder = tmp_path_factory.mktemp("params")
    for k in (1, 2):
        torch.manual_seed(k)
        model = AlphaFold(model_config("tiny"))
        with torch.no_grad():  # pLDDT varies per residue and per model, the backbone moves
            model.aux_heads.predicted_lddt.logits.weight.normal_(0.0, 0.5)
            model.structure_module.affine_update.weight.normal_(0.0, 0.1)
        export_af2_params(model, folder / f"params_model_{k}.npz")
    return folder


@pytest.fixture(scope="module")
def msa(tmp_path_factory):
    """40 rows (more than tiny's 16 clusters): each seed samples another MSA, so seeds differ."""
    rng = random.Random(0)
    rows = [SEQ] + [
        "".join(c if rng.random() < 0.7 else rng.choice("ACDEFGHIKLMNPQRSTVWY") for c in SEQ) for _ in range(39)
    ]
    path = tmp_path_factory.mktemp("msa") / "5AWL_1.a3m"
    path.write_text("".join(f">s{i}\n{row}\n" for i, row in enumerate(rows)))
    return path


def _run(out, weights_dir, msa, *extra):
    argv = ["predict", str(PEPTIDE), "--msa", str(msa), "--weights-dir", str(weights_dir), "--preset", "tiny"]
    return main(argv + ["--out", str(out), "--device", "cpu", "--no-track-memory", "--num-recycles", "0", *extra])


def _count_forwards(monkeypatch):
    calls = []
    forward = AlphaFold.forward

    def counted(self, batch, *args, **kwargs):
        if not isinstance(batch["aatype"], FakeTensor):  # the pre-flight's size estimate traces fake tensors
            calls.append(1)
        return forward(self, batch, *args, **kwargs)

    monkeypatch.setattr(AlphaFold, "forward", counted)
    return calls


def test_ensemble_ranked_and_rerun_computes_only_new_seeds(tmp_path, weights_dir, msa, monkeypatch, capsys):
    out = tmp_path / "out"
    calls = _count_forwards(monkeypatch)
    assert _run(out, weights_dir, msa, "--models", "1,2", "--num-seeds", "2") == 0
    assert len(calls) == 4
    target = out / "5AWL_1"
    names = ["model_1_seed_0", "model_1_seed_1", "model_2_seed_0", "model_2_seed_1"]
    scores = {n: json.loads((target / f"{n}_scores.json").read_text()) for n in names}
    assert {n: s["seed"] for n, s in scores.items()} == {n: int(n[-1]) for n in names}
    assert scores["model_1_seed_0"]["weights"] == "params_model_1.npz"
    assert scores["model_2_seed_0"]["weights"] == "params_model_2.npz"
    assert len({s["mean_plddt"] for s in scores.values()}) == 4  # models and seeds all differ

    debug = json.loads((target / "ranking_debug.json").read_text())
    assert set(debug) == {"plddts", "order"}  # AF2's monomer layout
    assert debug["plddts"] == {n: s["mean_plddt"] for n, s in scores.items()}
    assert sorted(debug["order"]) == names
    ranked_plddt = [scores[n]["mean_plddt"] for n in debug["order"]]
    assert ranked_plddt == sorted(ranked_plddt, reverse=True)
    for r, name in enumerate(debug["order"]):
        for suffix in (".pdb", ".cif"):
            assert (target / f"ranked_{r}{suffix}").read_bytes() == (target / f"{name}{suffix}").read_bytes()
    assert not (target / "ranked_4.pdb").exists()
    listing = json.loads((target / "5AWL_1_scores.json").read_text())
    assert [m["name"] for m in listing["models"]] == debug["order"] and listing["rank_by"] == "plddt"
    assert [m["rank"] for m in listing["models"]] == [0, 1, 2, 3]
    assert (target / "5AWL_1_plddt.png").stat().st_size > 0
    timings = json.loads((out / "timings.json").read_text())
    assert sorted(timings["runs"]) == names and timings["ensemble"]["seeds"] == [0, 1]
    by_stage, total = timings["stage_seconds"], timings["total_seconds"]  # every second in a named stage
    assert by_stage["model"] > 0 and abs(sum(by_stage.values()) - total) <= 0.02 * total
    assert by_stage["model"] >= sum(r["stage_seconds"]["model"] for r in timings["runs"].values()) - 0.01
    assert not list(out.glob("*.pdb"))  # one layout: nothing flat beside the target folders
    err = capsys.readouterr().err
    assert err.count("note: no MSA") == 0 and "ranked by mean pLDDT" in err

    # a rerun with a third seed: only model_1_seed_2 and model_2_seed_2 are computed
    before = {n: (target / f"{n}.pdb").stat().st_mtime_ns for n in names}
    assert _run(out, weights_dir, msa, "--models", "1,2", "--num-seeds", "3") == 0
    assert len(calls) == 4 + 2
    assert {n: (target / f"{n}.pdb").stat().st_mtime_ns for n in names} == before
    debug = json.loads((target / "ranking_debug.json").read_text())
    assert len(debug["order"]) == 6 and {"model_1_seed_2", "model_2_seed_2"} <= set(debug["order"])
    assert (target / "ranked_5.pdb").exists()
    assert capsys.readouterr().err.count("skip: 5AWL_1") == 4
    again = json.loads((out / "timings.json").read_text())["runs"]  # the skipped runs keep their records
    assert sorted(again) == sorted(names + ["model_1_seed_2", "model_2_seed_2"])
    for n in names:
        assert again[n]["targets"]["5AWL_1"]["status"] == "skipped"
        assert again[n]["targets"]["5AWL_1"]["seconds"] == timings["runs"][n]["targets"]["5AWL_1"]["seconds"]
        assert again[n]["stages"]["5AWL_1/model"] == timings["runs"][n]["stages"]["5AWL_1/model"]

    # ranking by pTM (the tiny preset has a PAE head): AF2's layout with a "ptm" key
    order = rank_predictions(str(target), "5AWL_1", debug["order"], rank_by="ptm")
    ptm = json.loads((target / "ranking_debug.json").read_text())
    assert set(ptm) == {"ptm", "order"} and ptm["order"] == order
    assert [ptm["ptm"][n] for n in order] == sorted(ptm["ptm"].values(), reverse=True)

    # fewer predictions again: ranks from the larger ensemble are removed
    rank_predictions(str(target), "5AWL_1", ["model_1_seed_0", "model_2_seed_0"])
    assert (target / "ranked_1.pdb").exists() and not (target / "ranked_2.pdb").exists()


def test_num_seeds_alone_uses_the_one_weights_file(tmp_path, weights_dir, msa):
    out = tmp_path / "out"
    argv = ["predict", str(PEPTIDE), "--msa", str(msa), "--weights", str(weights_dir / "params_model_2.npz")]
    argv += ["--preset", "tiny", "--out", str(out), "--device", "cpu", "--no-track-memory", "--num-recycles", "0"]
    assert main(argv + ["--num-seeds", "2", "--seed", "5"]) == 0
    debug = json.loads((out / "5AWL_1" / "ranking_debug.json").read_text())
    assert sorted(debug["order"]) == ["model_2_seed_5", "model_2_seed_6"]


def test_ensemble_option_errors(tmp_path, weights_dir, msa, capsys):
    assert _run(tmp_path / "a", weights_dir, msa, "--models", "1,3") == 2
    err = capsys.readouterr().err
    assert "no weights family with every model of --models 1,3" in err and "af2: models 1,2" in err
    assert _run(tmp_path / "b", weights_dir, msa, "--models", "6") == 2
    assert "give AF2 model numbers 1-5" in capsys.readouterr().err
    argv = ["predict", str(PEPTIDE), "--weights-dir", str(weights_dir), "--out", str(tmp_path / "c")]
    assert main(argv) == 2
    assert "--weights-dir needs --models" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("*.pdb"))


def test_weights_folder_names(tmp_path):
    for name in (
        "params_model_1.npz",
        "params_model_2.npz",
        "params_model_4.npz",
        "params_model_5.npz",
        "params_model_1_ptm.npz",
        "finetuning_1.pt",
        "finetuning_2.pt",
        "finetuning_ptm_1.pt",
        "finetuning_ptm_2.pt",
        "notes.txt",
    ):
        (tmp_path / name).write_bytes(b"")
    got = find_model_weights(tmp_path, [1, 2])  # the AF2 pTM family lacks model 2: plain AF2
    assert [(m.name, m.family, m.path.split("/")[-1]) for m in got] == [
        ("model_1", "af2", "params_model_1.npz"),
        ("model_2", "af2", "params_model_2.npz"),
    ]
    assert [m.name for m in find_model_weights(tmp_path, [1])] == ["model_1_ptm"]
    got = find_model_weights(tmp_path, [2, 1], need_ptm=True)
    assert [(m.name, m.family) for m in got] == [("model_2_ptm", "openfold_ptm"), ("model_1_ptm", "openfold_ptm")]
    with pytest.raises(WeightsError, match="no weights family with every model of --models 3"):
        find_model_weights(tmp_path, [3])
    members = ensemble_members([5, 2, 4, 1], tmp_path, None)  # the largest first: 5120 extra rows, templates
    assert [m.name for m in members] == ["model_1", "model_4", "model_2", "model_5"]
    (tmp_path / "af2" / "params").mkdir(parents=True)  # an unpacked archive's own folders
    (tmp_path / "af2" / "params" / "params_model_3.npz").write_bytes(b"")
    assert find_model_weights(tmp_path, [3])[0].path == str(tmp_path / "af2" / "params" / "params_model_3.npz")
    with pytest.raises(WeightsError, match="no such directory"):
        find_model_weights(tmp_path / "missing", [1])
    assert parse_model_list("1,2, 3") == [1, 2, 3] and parse_model_list("all") == [1, 2, 3, 4, 5]
    assert parse_model_list("2-4,1,2") == [2, 3, 4, 1]
    with pytest.raises(ValueError, match="1-5"):
        parse_model_list("0")
    assert model_name_of("params_model_3_ptm.npz") == "model_3_ptm"
    assert model_name_of("x/finetuning_ptm_2.pt") == "model_2_ptm"
    assert model_name_of("demo.ckpt") == "demo"
