"""Tests for alphafold_mem.metrics on hand-made cases and a real structure."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from alphafold_mem.geometry.rigid import quat_to_rot
from alphafold_mem.metrics import ca_rmsd, gdt_ts, kabsch, lddt, lddt_ca, rmsd, tm_score

from .conftest import REPO_DATA


@pytest.fixture(scope="module")
def real_ca():
    from alphafold_mem.data import parse_mmcif

    path = REPO_DATA / "mmcif" / "1a8o.cif"
    if not path.is_file():
        pytest.skip(f"{path} not shipped")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ch = parse_mmcif(path)
    m = torch.tensor(ch.atom37_mask[:, 1]) > 0
    return torch.tensor(ch.atom37_positions[:, 1])[m].double(), "".join(c for c, k in zip(ch.sequence, m) if k)


def _rigid(x, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = quat_to_rot(torch.randn(4, generator=g, dtype=x.dtype))
    return x @ r.T + 25.0 * torch.randn(3, generator=g, dtype=x.dtype)


def test_lddt_identity_and_rigid_invariance(real_ca):
    x, _ = real_ca
    mask = torch.ones(x.shape[0], dtype=x.dtype)
    assert lddt(x, x, mask).item() == 1.0
    assert lddt(_rigid(x), x, mask).item() == pytest.approx(1.0, abs=1e-9)
    assert torch.all(lddt(x, x, mask, per_residue=True) == 1.0)


def test_lddt_hand_made():
    # Three points on a line, 1 Å apart; move the last by 1.5 Å along the line.
    true = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [2.0, 0, 0]])
    pred = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [3.5, 0, 0]])
    mask = torch.ones(3)
    # pairs (0,1): error 0 -> 1; (0,2) and (1,2): error 1.5 -> thresholds 2 and 4 pass -> 0.5
    # ordered pairs: 2 x (1 + 0.5 + 0.5) / 6
    assert lddt(pred, true, mask).item() == pytest.approx((1 + 0.5 + 0.5) / 3)
    per = lddt(pred, true, mask, per_residue=True)
    torch.testing.assert_close(per, torch.tensor([0.75, 0.75, 0.5]))
    # pairs beyond the 15 Å inclusion radius of the reference do not count
    far_true = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [40.0, 0, 0]])
    far_pred = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [10.0, 0, 0]])
    assert lddt(far_pred, far_true, mask).item() == 1.0
    # masked residue is ignored entirely
    assert lddt(pred, true, torch.tensor([1.0, 1.0, 0.0])).item() == 1.0


def test_lddt_ca_uses_atom37_ca():
    x = torch.zeros(4, 37, 3)
    x[:, 1] = torch.tensor([[0.0, 0, 0], [3.8, 0, 0], [7.6, 0, 0], [11.4, 0, 0]])
    m = torch.zeros(4, 37)
    m[:, 1] = 1
    y = x.clone()
    y[:, 0] += 5.0  # N atoms do not matter
    assert lddt_ca(y, x, m).item() == 1.0


def test_rmsd_rigid_and_hand_made(real_ca):
    x, _ = real_ca
    assert rmsd(_rigid(x, 3), x).item() == pytest.approx(0.0, abs=1e-9)
    r, t = kabsch(_rigid(x, 3), x)
    assert torch.linalg.det(r).item() == pytest.approx(1.0)
    # A mirror image is not a rigid motion: its RMSD must stay > 0 (no reflections allowed).
    assert rmsd(x * torch.tensor([-1.0, 1.0, 1.0], dtype=x.dtype), x).item() > 1.0
    # Hand-made: a square vs the same square with one corner pushed out: known optimum without
    # superposition; superposition can only lower it.
    sq = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=torch.float64)
    shifted = sq + torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64)
    assert rmsd(shifted, sq, superpose_first=False).item() == pytest.approx(2.0)
    assert rmsd(shifted, sq).item() == pytest.approx(0.0, abs=1e-9)
    moved = sq.clone()
    moved[0, 2] = 1.0
    assert rmsd(moved, sq, superpose_first=False).item() == pytest.approx(math.sqrt(1 / 4))
    assert rmsd(moved, sq).item() < 0.5


def test_ca_rmsd_masks():
    x = torch.randn(6, 37, 3)
    m = torch.zeros(6, 37)
    m[:5, 1] = 1
    y = x.clone()
    y[5, 1] += 100.0  # unresolved residue in the reference
    assert ca_rmsd(y, x, m).item() == pytest.approx(0.0, abs=1e-5)


def test_gdt_ts(real_ca):
    x, _ = real_ca
    assert gdt_ts(_rigid(x, 1), x).item() == pytest.approx(1.0)
    # half the chain displaced by 20 Å as a rigid block: about half the residues within any cutoff
    y = x.clone()
    n = x.shape[0]
    y[n // 2 :] += torch.tensor([20.0, 0.0, 0.0], dtype=x.dtype)
    g = gdt_ts(y, x).item()
    assert 0.45 <= g <= 0.6
    # every residue off by 3 Å in random directions: < 1 Å and < 2 Å fail, 4 and 8 Å pass -> ~0.5
    d = torch.nn.functional.normalize(torch.randn(x.shape, dtype=x.dtype), dim=-1) * 3.0
    g2 = gdt_ts(x + d, x).item()
    assert 0.45 <= g2 <= 0.75


def test_tm_score(real_ca):
    x, seq = real_ca
    assert tm_score(x, x, seq) == pytest.approx(1.0, abs=1e-6)
    assert tm_score(_rigid(x, 2), x, seq) == pytest.approx(1.0, abs=1e-4)
    g = torch.Generator().manual_seed(0)
    noisy = x + 4.0 * torch.randn(x.shape, generator=g, dtype=x.dtype)
    assert tm_score(noisy, x, seq) < 0.6
