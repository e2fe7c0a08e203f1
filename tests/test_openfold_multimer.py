"""OpenFold multimer v3 checkpoints: our model under OpenFold's parameter names and fused layout and
back, checked name by name and value by value against the parity set's manifest (OpenFold's own
importer mapping of the AF2 ``.npz``)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from alphafold_mem.weights import WeightsError, load_af2_params, load_openfold_checkpoint, load_weights
from alphafold_mem.weights.keys import ParameterLoadError
from alphafold_mem.weights.openfold import openfold_state_dict

PARITY = Path(__file__).parent / "data" / "parity_multimer"


@pytest.fixture(scope="module")
def model():
    return load_af2_params(PARITY / "params.npz", preset="model_1_multimer_v3")


def _importer_tensor(arr: np.ndarray, param_type: str, swapped: bool) -> torch.Tensor:
    """What OpenFold's importer makes of one AF2 block array (its ParamType transforms)."""
    if param_type in ("LinearWeight", "LinearWeightMHA"):
        t = torch.from_numpy(arr.reshape(arr.shape[0], -1).T.copy())
    elif param_type in ("LinearMHAOutputWeight", "LinearWeightOPM"):
        t = torch.from_numpy(arr.reshape(-1, arr.shape[-1]).T.copy())
    else:  # Other, LinearBiasMHA: flat
        t = torch.from_numpy(arr.reshape(-1).copy()) if param_type == "LinearBiasMHA" else torch.from_numpy(arr.copy())
    if swapped:
        a, b = t.chunk(2, dim=0)
        t = torch.cat([b, a], dim=0)
    return t


def test_openfold_state_dict_has_the_manifest_names_and_importer_values(model):
    manifest = json.loads((PARITY / "weights_manifest.json").read_text())
    sd = openfold_state_dict(model)
    expected_names = {n for v in manifest.values() for n in v["openfold_params"]}
    assert set(sd) == expected_names
    with np.load(PARITY / "params.npz") as npz:
        for key, v in manifest.items():
            arr = npz[key]
            blocks = [arr[b] for b in range(v["stacked_blocks"])] if v["stacked_blocks"] else [arr]
            for name, block in zip(v["openfold_params"], blocks):
                want = _importer_tensor(block, v["param_type"], v["halves_swapped_by_importer"])
                got = sd[name]
                assert tuple(got.shape) == tuple(v["openfold_shape"]), name
                assert torch.equal(got.reshape(want.shape), want), name


def test_openfold_multimer_checkpoint_loads_back_bit_for_bit(model, tmp_path):
    sd = openfold_state_dict(model)
    back = load_openfold_checkpoint(sd, preset="model_1_multimer_v3")
    assert back.config.multimer
    ours, theirs = dict(model.named_parameters()), dict(back.named_parameters())
    assert set(ours) == set(theirs)
    assert all(torch.equal(ours[n], theirs[n]) for n in ours)
    path = tmp_path / "openfold_multimer.pt"
    torch.save({"ema": {"params": sd}}, path)  # as OpenFold's training checkpoints nest it
    loaded = load_weights(path)
    assert loaded.format == "openfold" and loaded.config.multimer
    assert all(torch.equal(p, dict(loaded.model.named_parameters())[n]) for n, p in ours.items())


def test_openfold_multimer_checkpoint_under_a_monomer_preset_is_one_line(model, tmp_path):
    path = tmp_path / "openfold_multimer.pt"
    torch.save(openfold_state_dict(model), path)
    with pytest.raises(WeightsError) as exc:
        load_weights(path, preset="model_1_ptm")
    text = str(exc.value)
    assert "\n" not in text and text.startswith(os.fspath(path))
    assert "AF2-Multimer" in text and "model_1_ptm" in text
    with pytest.raises(ParameterLoadError, match="AF2-Multimer"):
        load_openfold_checkpoint(openfold_state_dict(model), preset="model_1_ptm")
