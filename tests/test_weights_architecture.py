"""AF2/OpenFold weights say what they are: the layers inferred from a file are compared with the
preset asked for (or the one its file name gives), and the run is labelled with the preset whose
layers it has."""

import json
import os

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.cli import main
from alphafold_mem.weights import WeightsError, export_af2_params, load_weights, openfold_state_dict
from alphafold_mem.weights.af2_npz import infer_architecture, npz_shapes
from alphafold_mem.weights.architecture import SHAPE_FIELDS, architecture, choose_preset

from .conftest import REPO_DATA

PEPTIDE = REPO_DATA / "fasta" / "awkward" / "colabfold_5AWL_1_peptide.fasta"


def _export(path, preset="tiny", **overrides):
    torch.manual_seed(0)
    model = AlphaFold(model_config(preset, **overrides)).eval()
    export_af2_params(model, path)
    return model


def _one_line(exc, path) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith(os.fspath(path))
    return text


def test_shape_fields_are_what_the_shapes_decide(tmp_path):
    _export(tmp_path / "w.npz")
    shapes = {k.split("alphafold_iteration/", 1)[1]: v for k, v in npz_shapes(tmp_path / "w.npz").items()}
    assert set(infer_architecture(shapes)) == set(SHAPE_FIELDS)


def test_requested_preset_with_other_layers_is_refused_in_one_line(tmp_path):
    path = tmp_path / "weights.npz"
    _export(path, **{"template.enabled": False, "heads.pae_enabled": False})
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="tiny")
    text = _one_line(exc, path)
    assert "not those of preset 'tiny'" in text
    assert "template.enabled (False vs True)" in text and "heads.pae_enabled (False vs True)" in text
    assert "c_m" not in text  # only the fields that differ
    loaded = load_weights(path)  # no preset: runs the file's own layers, labelled as no named preset
    assert not loaded.config.template.enabled and not loaded.config.heads.pae_enabled
    assert "no named preset" in loaded.architecture


def test_file_name_that_lies_is_refused_and_the_preset_it_matches_named(tmp_path):
    path = tmp_path / "params_model_1.npz"
    _export(path)
    with pytest.raises(WeightsError) as exc:
        load_weights(path)
    text = _one_line(exc, path)
    assert "file name says 'model_1'" in text and "layers of tiny" in text and "--preset tiny" in text
    assert load_weights(path, preset="tiny").config.preset == "tiny"


def test_without_preset_the_run_is_labelled_with_the_matching_preset(tmp_path):
    path = tmp_path / "weights.npz"
    model = _export(path)
    loaded = load_weights(path)
    assert loaded.config.preset == "tiny" and loaded.architecture == "tiny"
    assert loaded.config == model_config("tiny")
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k


def test_openfold_layers_checked_too(tmp_path):
    torch.manual_seed(0)
    sd = openfold_state_dict(AlphaFold(model_config("tiny")))
    path = tmp_path / "of.pt"
    torch.save(sd, path)
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="demo")
    assert "not those of preset 'demo'" in _one_line(exc, path) and "c_m (16 vs 32)" in str(exc.value)
    assert load_weights(path).config.preset == "tiny"


def test_a_requested_config_with_overrides_is_compared_whole(tmp_path):
    """``train --preset tiny --set evoformer.num_blocks=1 --init-weights`` passes the module's config."""
    path = tmp_path / "weights.npz"
    _export(path, **{"evoformer.num_blocks": 1})
    wanted = model_config("tiny", **{"evoformer.num_blocks": 1})
    assert load_weights(path, preset=wanted).config.evoformer.num_blocks == 1
    with pytest.raises(WeightsError, match=r"evoformer.num_blocks \(1 vs 2\)"):
        load_weights(path, preset="tiny")


def test_choose_preset_names_presets_with_equal_layers():
    layers = architecture(model_config("model_3_ptm"))  # what the shapes of a model_3_ptm file say

    def config_for(p):
        return model_config(p, **layers)

    assert choose_preset(config_for) == (
        "model_3_ptm",
        "architecture model_3_ptm (same layers as model_4_ptm, model_5_ptm)",
    )
    assert choose_preset(config_for, "model_5_ptm") == ("model_5_ptm", "architecture model_5_ptm")


def test_predict_cli_refuses_the_wrong_preset_and_labels_the_right_one(tmp_path, capsys):
    weights = tmp_path / "weights.npz"
    _export(weights)
    out = tmp_path / "out"
    argv = ["predict", str(PEPTIDE), "--out", str(out), "--weights", str(weights), "--single-sequence"]
    argv += ["--num-recycles", "0"]
    assert main(argv + ["--preset", "model_1"]) != 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "not those of preset 'model_1'" in line]
    assert len(lines) == 1 and "template.enabled" not in lines[0] and "c_m (16 vs 256)" in lines[0]
    assert "Traceback" not in err and not list(out.rglob("*_scores.json"))
    assert main(argv) == 0
    (scores,) = out.glob("5AWL_1/weights_seed_0_scores.json")  # the layout: <out>/<id>/<model>_seed_<s>
    assert json.loads(scores.read_text())["preset"] == "tiny"


@pytest.mark.slow
def test_af2_model_3_ptm_from_the_exporter(tmp_path):
    """Full-size AF2 layout (about 370 MB): ``--preset model_1`` is refused naming the two
    differences; without a preset, and under its AF2 file name, it runs as model_3_ptm."""
    with torch.device("meta"):
        model = AlphaFold(model_config("model_3_ptm"))
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.5)
    path = tmp_path / "weights.npz"
    export_af2_params(model, path)
    del model
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="model_1")
    text = _one_line(exc, path)
    assert "layers of model_3_ptm, not those of preset 'model_1'" in text
    assert "(file vs preset: template.enabled (False vs True), heads.pae_enabled (True vs False))" in text
    loaded = load_weights(path)
    assert loaded.config.preset == "model_3_ptm" and loaded.config == model_config("model_3_ptm")
    del loaded
    renamed = tmp_path / "params_model_1.npz"
    path.rename(renamed)
    with pytest.raises(
        WeightsError, match="file name says 'model_1' but the parameters have the layers of model_3_ptm"
    ):
        load_weights(renamed)
