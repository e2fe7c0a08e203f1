"""DockQ interface metrics (Basu & Wallner 2016) on a dev complex, and the multimer validation keys."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from alphafold_mem.data.complex_examples import load_complex_example
from alphafold_mem.metrics_interface import dockq_complex, dockq_pair, dockq_score, residue_min_distance

from .conftest import REPO_DATA

SHARED_4ZHL = REPO_DATA.parent.parent / "shared" / "data" / "mmcif" / "4zhl.cif"


def _complex(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex, _ = load_complex_example(path)
    gt = ex.ground_truth()
    x = torch.from_numpy(gt["all_atom_positions"]).double()
    m = torch.from_numpy(gt["all_atom_mask"]).double()
    return x, m, torch.from_numpy(gt["asym_id"])


@pytest.fixture(scope="module")
def homodimer():
    """3U8V (two chains of 93 residues, 83 resolved each) from the repository's dev data."""
    return _complex(REPO_DATA / "mmcif" / "3u8v.cif")


def _rotation(seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q * torch.sign(torch.linalg.det(q))


def _check_perfect(s):
    assert float(s["fnat"]) == pytest.approx(1.0)
    assert float(s["irmsd"]) == pytest.approx(0.0, abs=1e-5)
    assert float(s["lrmsd"]) == pytest.approx(0.0, abs=1e-5)
    assert float(s["dockq"]) == pytest.approx(1.0, abs=1e-9)


def test_identical_and_rigidly_moved_model_scores_one(homodimer):
    x, m, asym = homodimer
    s = dockq_complex(x, x, m, asym)
    _check_perfect(s)
    assert int(s["pairs"]) == 1
    moved = x @ _rotation(1).T + torch.tensor([12.0, -40.0, 7.5], dtype=torch.float64)
    _check_perfect(dockq_complex(moved, x, m, asym))


def _ligand_shift(x, m, asym):
    rec, lig = asym == 1, asym == 2
    ca = x[:, 1]
    c_rec = (ca[rec] * m[rec, 1:2]).sum(0) / m[rec, 1].sum()
    c_lig = (ca[lig] * m[lig, 1:2]).sum(0) / m[lig, 1].sum()
    u = (c_lig - c_rec) / torch.linalg.norm(c_lig - c_rec)
    return rec, lig, u


def test_ligand_moved_away_lrmsd_equals_distance_and_dockq_falls(homodimer):
    x, m, asym = homodimer
    rec, lig, u = _ligand_shift(x, m, asym)
    scores = []
    for d in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0):
        pred = x.clone()
        pred[lig] += d * u
        s = dockq_pair(pred, x, m, rec, lig)
        assert float(s["lrmsd"]) == pytest.approx(d, abs=1e-4)
        assert float(s["dockq"]) == pytest.approx(float(dockq_score(s["fnat"], s["irmsd"], s["lrmsd"])))
        scores.append(s)
    dq = [float(s["dockq"]) for s in scores]
    assert all(a > b for a, b in zip(dq, dq[1:])), dq
    assert float(scores[-1]["fnat"]) == 0.0 and float(scores[0]["fnat"]) == 1.0
    assert all(float(a["irmsd"]) <= float(b["irmsd"]) for a, b in zip(scores, scores[1:]))


def test_masked_atoms_are_ignored(homodimer):
    """Absent atoms moved anywhere change nothing; a residue whose atoms are all absent takes no part."""
    x, m, asym = homodimer
    rec, lig, u = _ligand_shift(x, m, asym)
    pred = x.clone()
    pred[lig] += 3.0 * u
    base = dockq_pair(pred, x, m, rec, lig)
    g = torch.Generator().manual_seed(2)
    junk = 500.0 * torch.randn(x.shape, generator=g, dtype=torch.float64)
    absent = (m == 0)[..., None]
    again = dockq_pair(pred + junk * absent, x + junk.flip(0) * absent, m, rec, lig)
    for k in base:
        assert float(again[k]) == pytest.approx(float(base[k]), abs=1e-9), k
    # residues without any atom: infinitely far in the contact map
    d = residue_min_distance(x[rec], m[rec] * 0, x[lig], m[lig])
    assert torch.isinf(d).all()
    # a model with one ligand residue's atoms hidden from both: same as the native without them
    hide = m.clone()
    hide[torch.nonzero(lig)[0, 0]] = 0
    s = dockq_pair(x, x, hide, rec, lig)
    _check_perfect(s)


def test_noised_complex_gives_parts_in_range_and_the_formula(homodimer):
    x, m, asym = homodimer
    g = torch.Generator().manual_seed(0)
    pred = x + 1.5 * torch.randn(x.shape, generator=g, dtype=torch.float64)
    rec, lig, u = _ligand_shift(x, m, asym)
    pred[lig] += 2.0 * u  # noise alone keeps every contact (the nearest atom pair gets nearer as often)
    s = dockq_complex(pred, x, m, asym)
    assert 0.0 < float(s["fnat"]) < 1.0 and 0.0 < float(s["dockq"]) < 1.0
    assert float(s["irmsd"]) > 0 and float(s["lrmsd"]) > 0
    fnat, irmsd, lrmsd = (float(s[k]) for k in ("fnat", "irmsd", "lrmsd"))
    expected = (fnat + 1 / (1 + (irmsd / 1.5) ** 2) + 1 / (1 + (lrmsd / 8.5) ** 2)) / 3
    assert float(s["dockq"]) == pytest.approx(expected, rel=1e-12)
    # Fnat by brute force over all heavy-atom pairs of the two chains

    def contacts(c):
        a, b = c[rec][m[rec] > 0], c[lig][m[lig] > 0]
        ra = torch.nonzero(m[rec] > 0)[:, 0]
        rb = torch.nonzero(m[lig] > 0)[:, 0]
        close = torch.cdist(a, b) < 5.0
        return {(int(ra[i]), int(rb[j])) for i, j in torch.nonzero(close).tolist()}

    native, model = contacts(x), contacts(pred)
    assert float(s["fnat"]) == pytest.approx(len(native & model) / len(native))


@pytest.mark.skipif(not SHARED_4ZHL.is_file(), reason="../shared/data (4ZHL heterodimer) not present")
def test_heterodimer_receptor_is_the_longer_chain():
    """4ZHL: urokinase (247 residues) and a 10-residue peptide: the peptide is the ligand, so moving
    it by d gives LRMSD d; moving the receptor instead gives it too (superposition on the receptor)."""
    x, m, asym = _complex(SHARED_4ZHL)
    assert (asym == 1).sum() > 200 and (asym == 2).sum() == 10
    rec, lig, u = _ligand_shift(x, m, asym)
    pred = x.clone()
    pred[lig] += 6.0 * u
    s = dockq_complex(pred, x, m, asym)
    assert float(s["lrmsd"]) == pytest.approx(6.0, abs=1e-4)
    assert 0.0 <= float(s["fnat"]) < 1.0 and 0.0 < float(s["dockq"]) < 1.0
    assert math.isclose(float(s["dockq"]), float(dockq_score(s["fnat"], s["irmsd"], s["lrmsd"])), rel_tol=1e-12)


def test_no_contact_between_chains_gives_none(homodimer):
    x, m, asym = homodimer
    far = x.clone()
    far[asym == 2] += torch.tensor([200.0, 0, 0], dtype=torch.float64)
    assert dockq_complex(x, far, m, asym) is None


def test_multimer_validation_logs_the_interface_metrics(monkeypatch):
    from alphafold_mem.config import model_config
    from alphafold_mem.data.complex_examples import load_complex_examples
    from alphafold_mem.train import TrainConfig
    from alphafold_mem.train.multimer_data import ComplexDraws, collate_complexes
    from alphafold_mem.train.multimer_module import MultimerLightning, multimer_training_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        examples, _ = load_complex_examples(REPO_DATA / "mmcif")
    examples = [e for e in examples if e.name.startswith("3u8v")]
    cfg = multimer_training_config(model_config("tiny_multimer", **{"num_recycles": 0}))
    torch.manual_seed(0)
    module = MultimerLightning(cfg, TrainConfig(seed=3))
    module.eval()
    whole = ComplexDraws(examples, cfg, seed=3, msa_dir=REPO_DATA / "alignments", whole=True)
    batch = collate_complexes([whole[0]])
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, v, **kw: logged.__setitem__(name, (float(v), kw["batch_size"])))
    module.validation_step(batch, 0)
    keys = {"lddt_ca", "interface_lddt_ca", "iptm", "dockq", "fnat", "irmsd", "lrmsd", "fape_backbone"}
    assert {f"val/{k}" for k in keys} <= set(logged)
    assert all(np.isfinite(v) for v, _ in logged.values())
    assert 0.0 <= logged["val/iptm"][0] <= 1.0 and 0.0 <= logged["val/dockq"][0] <= 1.0
    assert logged["val/dockq"][1] == 1
