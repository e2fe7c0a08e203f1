"""AF2-Multimer weights say what they are: a multimer file is named after the multimer presets and
refused (one line naming both) under a monomer preset or file name, and the reverse."""

import os

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.weights import WeightsError, export_af2_params, load_weights
from alphafold_mem.weights.architecture import NAMED_ORDER, architecture_differences


def _export(path, preset):
    torch.manual_seed(0)
    export_af2_params(AlphaFold(model_config(preset)).eval(), path)


def _one_line(exc, path) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith(os.fspath(path))
    return text


def test_multimer_v3_models_have_the_same_layers_and_differ_from_every_monomer():
    first = model_config("model_1_multimer_v3")
    for i in range(2, 6):
        cfg = model_config(f"model_{i}_multimer_v3")
        assert architecture_differences(cfg, first) == []
    assert model_config("model_4_multimer_v3").data.max_extra_msa != first.data.max_extra_msa
    for name in NAMED_ORDER:
        if not model_config(name).multimer:
            assert "multimer (True vs False)" in architecture_differences(first, model_config(name))


def test_multimer_file_is_named_after_the_multimer_presets(tmp_path):
    path = tmp_path / "weights.npz"
    _export(path, "tiny_multimer")
    loaded = load_weights(path)
    assert loaded.config.multimer and loaded.config.preset == "tiny_multimer"
    assert loaded.architecture == "tiny_multimer"


def test_multimer_file_under_a_monomer_preset_is_refused_in_one_line(tmp_path):
    path = tmp_path / "weights.npz"
    _export(path, "tiny_multimer")
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="tiny")
    text = _one_line(exc, path)
    assert "AF2-Multimer" in text and "'tiny'" in text and "monomer" in text


def test_monomer_file_under_a_multimer_preset_is_refused_in_one_line(tmp_path):
    path = tmp_path / "weights.npz"
    _export(path, "tiny")
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="tiny_multimer")
    text = _one_line(exc, path)
    assert "monomer AF2" in text and "'tiny_multimer'" in text and "AF2-Multimer" in text


@pytest.mark.parametrize(
    "name, held, said",
    [
        ("params_model_3_ptm.npz", "tiny_multimer", "model_3_ptm"),
        ("params_model_3_multimer_v3.npz", "tiny", "model_3_multimer_v3"),
    ],
)
def test_file_name_of_the_other_kind_is_refused_in_one_line(tmp_path, name, held, said):
    path = tmp_path / name
    _export(path, held)
    with pytest.raises(WeightsError) as exc:
        load_weights(path)
    text = _one_line(exc, path)
    assert f"the file name says '{said}'" in text
    assert ("AF2-Multimer" if held == "tiny_multimer" else "monomer AF2") in text


def test_weights_dir_recognises_multimer_files(tmp_path):
    from alphafold_mem.weights.directory import find_model_weights, model_name_of

    multi = tmp_path / "multi"
    (multi / "af2-multimer").mkdir(parents=True)
    for k in (1, 2):
        (multi / "af2-multimer" / f"params_model_{k}_multimer_v3.npz").write_bytes(b"")
    got = find_model_weights(multi, [1, 2])  # only multimer files: they are taken
    assert [(m.name, m.family) for m in got] == [
        ("model_1_multimer_v3", "af2_multimer"),
        ("model_2_multimer_v3", "af2_multimer"),
    ]
    assert find_model_weights(multi, [1], need_ptm=True)[0].name == "model_1_multimer_v3"  # the PAE head
    with pytest.raises(WeightsError, match="of AF2-Multimer"):
        find_model_weights(multi, [3], multimer=True)
    with pytest.raises(WeightsError, match="no weights family"):
        find_model_weights(multi, [1], multimer=False)  # a monomer preset asked for
    assert model_name_of("params_model_4_multimer_v3.npz") == "model_4_multimer_v3"

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("params_model_1.npz", "params_model_2_ptm.npz", "params_model_1_multimer_v3.npz"):
        (mixed / name).write_bytes(b"")
    with pytest.raises(WeightsError) as exc:
        find_model_weights(mixed, [1])
    text = str(exc.value)
    assert "\n" not in text and "both monomer and AF2-Multimer weights of model 1" in text and "--preset" in text
    assert find_model_weights(mixed, [1], multimer=True)[0].name == "model_1_multimer_v3"
    assert find_model_weights(mixed, [1], multimer=False)[0].name == "model_1"
    assert find_model_weights(mixed, [2])[0].name == "model_2_ptm"  # no multimer file of model 2


def test_full_size_multimer_shapes_are_named_model_1_multimer_v3():
    from alphafold_mem.weights.af2_entry_table import af2_entries
    from alphafold_mem.weights.af2_npz import infer_config
    from alphafold_mem.weights.architecture import choose_preset

    with torch.device("meta"):
        model = AlphaFold(model_config("model_4_multimer_v3"))
    shapes = {e.key: e.full_shape for e in af2_entries(model)}
    use, note = choose_preset(lambda p: infer_config(shapes, p))
    assert use == "model_1_multimer_v3"
    assert (
        note
        == "architecture model_1_multimer_v3 (same layers as "
        + ", ".join(f"model_{i}_multimer_v3" for i in range(2, 6))
        + ")"
    )
    assert choose_preset(lambda p: infer_config(shapes, p), "model_4_multimer_v3")[0] == "model_4_multimer_v3"
