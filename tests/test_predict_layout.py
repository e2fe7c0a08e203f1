"""One output layout (AF2's) for one model and for an ensemble: ``<out>/<id>/`` with the predictions'
files, ``ranked_<k>.pdb`` best first and ``ranking_debug.json``; a rerun finds finished targets there."""

import json
import re

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.cli import main
from alphafold_mem.predict.layout import prediction_path, ranked_path
from alphafold_mem.weights import export_af2_params

from .conftest import REPO_DATA

PEPTIDE = REPO_DATA / "fasta" / "awkward" / "colabfold_5AWL_1_peptide.fasta"  # 5AWL chain 1, 10 residues
ID = "5AWL_1"


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    """AF2-format params_model_1..4.npz of the tiny preset, each with its own pLDDT head."""
    folder = tmp_path_factory.mktemp("params")
    for k in (1, 2, 3, 4):
        torch.manual_seed(k)
        model = AlphaFold(model_config("tiny"))
        with torch.no_grad():
            model.aux_heads.predicted_lddt.logits.weight.normal_(0.0, 0.5)
        export_af2_params(model, folder / f"params_model_{k}.npz")
    return folder


def _predict(out, *extra):
    argv = ["predict", str(PEPTIDE), "--single-sequence", "--preset", "tiny", "--out", str(out)]
    return main(argv + ["--device", "cpu", "--no-track-memory", "--num-recycles", "0", *extra])


def _pattern(out, predictions) -> set[str]:
    """The files under ``out`` with every prediction's name written ``<p>`` and every rank ``<k>``."""
    names = set()
    for path in out.rglob("*"):
        if path.is_file():
            rel = path.relative_to(out).as_posix()
            for p in sorted(predictions, key=len, reverse=True):
                rel = rel.replace(p, "<p>")
            names.add(re.sub(r"ranked_\d+", "ranked_<k>", rel))
    return names


def test_one_layout_for_one_model_and_for_four(tmp_path, weights_dir, capsys):
    one, four = tmp_path / "one", tmp_path / "four"
    assert _predict(one, "--weights", str(weights_dir / "params_model_1.npz")) == 0
    assert _predict(four, "--weights-dir", str(weights_dir), "--models", "1,2,3,4") == 0
    err = capsys.readouterr().err
    assert err.count(f"files: {one / '<id>' / 'ranked_0.pdb'} is the best structure of each target") == 1
    assert err.count(f"files: {four / '<id>' / 'ranked_0.pdb'} is the best structure of each target") == 1
    orders = {}
    for out, n in ((one, 1), (four, 4)):
        debug = json.loads((out / ID / "ranking_debug.json").read_text())
        assert set(debug) == {"plddts", "order"} and len(debug["order"]) == n
        assert sorted(debug["order"]) == sorted(debug["plddts"])
        orders[n] = debug["order"]
        for k, name in enumerate(debug["order"]):
            assert (out / ID / f"ranked_{k}.pdb").read_bytes() == (out / ID / f"{name}.pdb").read_bytes()
        listing = json.loads((out / ID / f"{ID}_scores.json").read_text())
        assert [m["name"] for m in listing["models"]] == debug["order"]
        assert not list(out.glob("*.pdb"))  # nothing flat beside the target folders
    assert orders[1] == ["model_1_seed_0"]
    assert sorted(orders[4]) == [f"model_{k}_seed_0" for k in (1, 2, 3, 4)]
    pattern = _pattern(one, orders[1])
    assert pattern == _pattern(four, orders[4])
    assert {f"{ID}/ranked_<k>.pdb", f"{ID}/<p>_scores.json", f"{ID}/<p>_pae.json", "timings.json"} <= pattern
    assert ranked_path(one, ID) == str(one / ID / "ranked_0.pdb")
    assert prediction_path(one, ID, weights_dir / "params_model_1.npz", suffix="_scores.json") == str(
        one / ID / "model_1_seed_0_scores.json"
    )


def test_single_model_rerun_finds_finished_target(tmp_path, weights_dir, capsys):
    out, weights = tmp_path / "out", weights_dir / "params_model_2.npz"
    out.mkdir()
    (out / f"{ID}_scores.json").write_text("{}")  # the flat layout of an earlier version: not read, said so
    assert _predict(out, "--weights", str(weights)) == 0
    assert "is the flat layout of an earlier version, not read" in capsys.readouterr().err
    pdb = prediction_path(out, ID, weights)
    before = (out / ID / "ranked_0.pdb").read_bytes()
    stamp = (out / ID / "model_2_seed_0.pdb").stat().st_mtime_ns
    ranked_stamp = (out / ID / "ranked_0.pdb").stat().st_mtime_ns
    capsys.readouterr()
    assert _predict(out, "--weights", str(weights)) == 0
    err = capsys.readouterr().err
    assert f"skip: {ID}" in err
    assert (out / ID / "model_2_seed_0.pdb").stat().st_mtime_ns == stamp and pdb.endswith("model_2_seed_0.pdb")
    assert (out / ID / "ranked_0.pdb").read_bytes() == before
    assert (out / ID / "ranked_0.pdb").stat().st_mtime_ns == ranked_stamp  # ranked again, not copied again
    timings = json.loads((out / "timings.json").read_text())
    assert timings["targets"][ID]["status"] == "skipped"
