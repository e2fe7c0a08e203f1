"""Early-stopped recycling (AF2 v2.3 ``recycle_early_stop_tolerance``): the Cα distance change, the
loop against a plain reference loop, and ``predict --recycle-early-stop-tolerance`` end to end."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.cli import main
from alphafold_mem.data import make_features
from alphafold_mem.model.alphafold import ca_distance_change
from alphafold_mem.weights import default_weights_path, load_weights, save_checkpoint

from .conftest import REPO_DATA
from .predict_cli import prediction

PEPTIDE = REPO_DATA / "fasta" / "awkward" / "colabfold_5AWL_1_peptide.fasta"  # 5AWL chain 1, 10 residues
SEQ = "YYDPETGTWY"


def _tiny_model(num_recycles=4):
    torch.manual_seed(0)
    model = AlphaFold(model_config("tiny", num_recycles=num_recycles))
    with torch.no_grad():  # move the backbone, so that the Cα distances change between iterations
        model.structure_module.affine_update.weight.normal_(0.0, 0.1)
        model.aux_heads.predicted_lddt.logits.weight.normal_(0.0, 0.5)
    return model.eval()


def _reference_loop(model, batch, iterations):
    """The recycling loop without early stopping (Suppl. Alg. 2), from ``iteration``; also the Cα
    distance change of every iteration but the last."""
    feats = {k: v.unsqueeze(0) for k, v in batch.items() if torch.is_tensor(v)}
    prev, changes = [], []
    with torch.no_grad():
        for _ in range(iterations):
            ca_in = prev[2][..., 1, :].clone() if prev else None
            out, prev = model.iteration(feats, prev)
            ca_out = prev[2][..., 1, :]
            changes.append(ca_distance_change(torch.zeros_like(ca_out) if ca_in is None else ca_in, ca_out, feats))
    return {k: v.squeeze(0) for k, v in out.items() if not k.startswith("sm_")}, changes[:-1]


def _features(model):
    return make_features(SEQ, config=model.config, mode="predict", seed=0)


def test_ca_distance_change_matches_its_definition():
    """RMS over the masked residue pairs of the change of the Cα-Cα distances (sqrt(. + 1e-8) as AF2)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 7, 3, generator=g, dtype=torch.float64) * 5
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]], dtype=torch.float64)
    rotation = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))[0]
    moved = x @ rotation.T + torch.tensor([3.0, -2.0, 1.0], dtype=torch.float64)
    assert ca_distance_change(x, moved, {"seq_mask": mask}) == pytest.approx(1e-4, abs=1e-9)  # rigid: no change
    y = x.clone()
    y[0, 6] += 100.0  # the masked residue does not count
    assert ca_distance_change(x, y, {"seq_mask": mask}) == pytest.approx(1e-4, abs=1e-9)
    z = x * 1.5
    d = np.linalg.norm(x[0, :6, None, :].numpy() - x[0, None, :6, :].numpy(), axis=-1)
    expected = np.sqrt(np.mean((0.5 * d) ** 2) + 1e-8)
    assert ca_distance_change(x, z, {"seq_mask": mask}) == pytest.approx(expected, rel=1e-9)


def test_tolerance_zero_equals_the_plain_loop_bit_for_bit():
    model = _tiny_model(num_recycles=4)
    batch = _features(model)
    with torch.no_grad():
        out = model(batch)
    ref, _ = _reference_loop(model, batch, iterations=5)
    assert int(out["num_recycles"]) == 5 and "recycle_ca_change" not in out
    for key, value in ref.items():
        assert torch.equal(out[key], value), key


def test_early_stop_after_the_first_recycle_equals_one_recycle():
    """A tolerance above any change stops after the first recycle: the result is that of num_recycles=1."""
    model = _tiny_model(num_recycles=8)
    batch = _features(model)
    model.config = dataclasses.replace(model.config, recycle_early_stop_tolerance=1e6)
    with torch.no_grad():
        out = model(batch)
    assert int(out["num_recycles"]) == 2 and float(out["recycle_ca_change"]) > 0
    one, _ = _reference_loop(model, batch, iterations=2)
    for key, value in one.items():
        assert torch.equal(out[key], value), key


def test_early_stop_stops_at_the_first_change_within_tolerance():
    model = _tiny_model(num_recycles=6)
    batch = _features(model)
    _, changes = _reference_loop(model, batch, iterations=7)
    assert len(set(changes)) > 1, changes  # the backbone moves differently from one iteration to the next
    tolerance = sorted(changes)[len(changes) // 2]  # some iterations above it, some within
    stop = next(j for j, c in enumerate(changes) if c <= tolerance)  # after iteration j, one more runs
    model.config = dataclasses.replace(model.config, recycle_early_stop_tolerance=tolerance)
    with torch.no_grad():
        out = model(batch)
    assert int(out["num_recycles"]) == stop + 2
    assert float(out["recycle_ca_change"]) == pytest.approx(changes[stop], rel=1e-6)


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "tiny.ckpt"
    save_checkpoint(_tiny_model(num_recycles=1), path)
    return path


def _predict(out, weights, *extra):
    argv = ["predict", str(PEPTIDE), "--single-sequence", "--weights", str(weights), "--out", str(out)]
    return main(argv + ["--device", "cpu", "--no-track-memory", "--num-recycles", "8", *extra])


def test_predict_reports_the_recycles_run(tmp_path, tiny_ckpt, capsys):
    out = tmp_path / "out"
    assert _predict(out, tiny_ckpt, "--recycle-early-stop-tolerance", "1000") == 0
    err = capsys.readouterr().err
    assert "recycling stopped early after 1 of 8 recycle(s)" in err and "tolerance 1000.0 Å" in err
    scores = json.loads(prediction(out, "5AWL_1", "_scores.json").read_text())
    assert scores["recycles_run"] == 1 and scores["num_recycles"] == 8
    assert scores["recycle_early_stop_tolerance"] == 1000.0
    assert scores["provenance"]["options"]["recycle_early_stop_tolerance"] == 1000.0
    timings = json.loads((out / "timings.json").read_text())
    assert timings["targets"]["5AWL_1"]["recycles_run"] == 1
    # the tolerance changes the result: a rerun with another one is refused, the same one skipped
    assert _predict(out, tiny_ckpt) == 1
    assert "recycle_early_stop_tolerance (None now, 1000.0 before)" in capsys.readouterr().err
    assert _predict(out, tiny_ckpt, "--recycle-early-stop-tolerance", "1000") == 0
    assert "skip: 5AWL_1" in capsys.readouterr().err


def test_predict_rejects_a_negative_tolerance(tmp_path, tiny_ckpt, capsys):
    with pytest.raises(SystemExit) as exit_:
        _predict(tmp_path / "out", tiny_ckpt, "--recycle-early-stop-tolerance", "-1")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--recycle-early-stop-tolerance: expected a number >= 0, got '-1'" in err and "Traceback" not in err


@pytest.mark.skipif(not default_weights_path().exists(), reason="demo weights missing")
def test_demo_weights_early_stop(tmp_path, capsys):
    """Demo weights, ``--num-recycles 8`` on a shipped chain: tolerance 0 gives the plain loop's
    outputs bit for bit; a large tolerance stops after the first recycle and says so (slow)."""
    model = load_weights(default_weights_path()).model.eval()
    model.config = dataclasses.replace(model.config, num_recycles=8, recycle_early_stop_tolerance=0.0)
    batch = _features(model)
    with torch.no_grad():
        out = model(batch)
    ref, _ = _reference_loop(model, batch, iterations=9)
    assert int(out["num_recycles"]) == 9
    for key, value in ref.items():
        assert torch.equal(out[key], value), key
    early = tmp_path / "early"
    assert _predict(early, default_weights_path(), "--recycle-early-stop-tolerance", "1000") == 0
    assert "recycling stopped early after 1 of 8 recycle(s)" in capsys.readouterr().err
    assert json.loads(prediction(early, "5AWL_1", "_scores.json").read_text())["recycles_run"] == 1
