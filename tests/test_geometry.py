"""Tests for alphafold_mem.geometry: rigid frames, residue tables, torsions <-> atoms.

``tests/data/geometry_parity.npz`` is a slice of the OpenFold parity vectors of tests/data/parity
(OpenFold ce0029e, model_1_ptm, seed 0; tests/data/parity/README.md): structure-module
layers 0 and 7 of ``outputs.npz`` (sm_frames_rot, sm_frames_trans, sm_angles, sm_sidechain_frames,
sm_positions), final_atom_positions / final_atom_mask, and recycling slice 0 of ``inputs.npz``
(aatype, atom14/atom37 index maps, template atoms and the template torsion / pseudo-beta features
that OpenFold computed from them). Written with ``np.savez_compressed`` from those two files.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from alphafold_mem.geometry import all_atom
from alphafold_mem.geometry import residue_constants as rc
from alphafold_mem.geometry.rigid import Rigid, quat_to_rot, rot_to_quat

PARITY = Path(__file__).parent / "data" / "geometry_parity.npz"


@pytest.fixture(scope="module")
def parity():
    with np.load(PARITY) as f:
        return {k: torch.from_numpy(f[k]) for k in f.files}


def random_rigid(shape, dtype=torch.float64, scale=10.0, seed=0) -> Rigid:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, 4, generator=g, dtype=dtype)
    return Rigid(quat_to_rot(q), scale * torch.randn(*shape, 3, generator=g, dtype=dtype))


# ------------------------------------------------------------------------------------------------
# rigid.py
# ------------------------------------------------------------------------------------------------
def test_rigid_compose_invert_round_trip():
    a, b = random_rigid((5, 7), seed=1), random_rigid((5, 7), seed=2)
    x = torch.randn(5, 7, 3, dtype=torch.float64)
    ab = a.compose(b)
    torch.testing.assert_close(ab.apply(x), a.apply(b.apply(x)))
    torch.testing.assert_close(ab.invert_apply(ab.apply(x)), x)
    ident = a.compose(a.invert())
    torch.testing.assert_close(ident.rots, torch.eye(3, dtype=torch.float64).expand(5, 7, 3, 3))
    torch.testing.assert_close(ident.trans, torch.zeros(5, 7, 3, dtype=torch.float64))
    torch.testing.assert_close(a.invert().apply(x), a.invert_apply(x))
    r4 = Rigid.from_tensor_4x4(a.to_tensor_4x4())
    torch.testing.assert_close(r4.rots, a.rots)
    torch.testing.assert_close(r4.trans, a.trans)


def test_quaternion_matrix_round_trip():
    q = torch.randn(64, 4, dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True)
    q = q * torch.where(q[:, :1] < 0, -1.0, 1.0)
    r = quat_to_rot(q)
    torch.testing.assert_close(r @ r.transpose(-1, -2), torch.eye(3, dtype=torch.float64).expand(64, 3, 3))
    torch.testing.assert_close(torch.linalg.det(r), torch.ones(64, dtype=torch.float64))
    torch.testing.assert_close(rot_to_quat(r), q)
    t7 = random_rigid((3,)).to_tensor_7()
    torch.testing.assert_close(Rigid.from_tensor_7(t7).to_tensor_7(), t7)


def test_from_3_points_axes():
    x1, x2, x3 = torch.randn(3, 10, 3, dtype=torch.float64).unbind(0)
    f = Rigid.from_3_points(x1, x2, x3)
    loc3, loc1 = f.invert_apply(x3), f.invert_apply(x1)
    torch.testing.assert_close(loc3[:, 1:], torch.zeros(10, 2, dtype=torch.float64))
    assert (loc3[:, 0] > 0).all() and (loc1[:, 1] > 0).all()
    torch.testing.assert_close(loc1[:, 2], torch.zeros(10, dtype=torch.float64))


# ------------------------------------------------------------------------------------------------
# residue_constants.py
# ------------------------------------------------------------------------------------------------
def test_residue_tables_shapes_and_basics():
    assert "".join(rc.restypes) == "ARNDCQEGHILKMFPSTWYV"
    assert rc.restype_num == 20 and rc.unk_restype_index == 20 and rc.atom_type_num == 37
    assert len(rc.restypes_with_x_and_gap) == 22 and len(rc.resnames) == 21
    assert rc.atom_types[:5] == ["N", "CA", "C", "CB", "O"]
    assert len(rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE) == 22
    for letter, hh in rc.HHBLITS_AA_TO_ID.items():  # hhblits id -> our id keeps the letter
        ours = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[hh]
        expect = {"B": "D", "Z": "E", "U": "C", "J": "X", "O": "X"}.get(letter, letter)
        assert rc.restypes_with_x_and_gap[ours] == expect
    shapes = {
        "restype_atom14_to_atom37": (21, 14),
        "restype_atom37_to_atom14": (21, 37),
        "restype_atom14_mask": (21, 14),
        "restype_atom37_mask": (21, 37),
        "restype_rigid_group_default_frame": (21, 8, 4, 4),
        "restype_atom14_to_rigid_group": (21, 14),
        "restype_atom14_rigid_group_positions": (21, 14, 3),
        "restype_atom14_ambiguous_atoms": (21, 14),
    }
    for name, shape in shapes.items():
        assert getattr(rc, name).shape == shape, name
    assert rc.restype_atom14_mask[20].sum() == 0 and rc.restype_atom37_mask[20].sum() == 0
    for r, letter in enumerate(rc.restypes):
        assert rc.restype_atom14_mask[r].sum() == len(rc.residue_atoms[rc.restype_1to3[letter]])
    bounds = rc.make_atom14_dists_bounds()
    assert bounds["lower_bound"].shape == (21, 14, 14)
    assert (bounds["upper_bound"] >= bounds["lower_bound"]).all()


def test_ideal_backbone_bond_lengths():
    """Atoms built from the ideal rigid groups reproduce Engh & Huber N-CA 1.458 and CA-C 1.525 Å."""
    aatype = torch.arange(20)
    frames = all_atom.torsion_angles_to_frames(
        Rigid.identity((20,), torch.float64), _unit_angles(torch.zeros(20, 7, dtype=torch.float64)), aatype
    )
    pos = all_atom.frames_to_atom14_positions(frames, aatype)  # N, CA, C, O are slots 0-3
    n_ca = (pos[:, 0] - pos[:, 1]).norm(dim=-1)
    ca_c = (pos[:, 1] - pos[:, 2]).norm(dim=-1)
    c_o = (pos[:, 2] - pos[:, 3]).norm(dim=-1)
    non_gly = aatype != rc.restype_order["G"]
    assert (n_ca[non_gly] - 1.458).abs().max() < 0.01
    assert (ca_c[non_gly] - 1.525).abs().max() < 0.01
    assert (c_o - 1.23).abs().max() < 0.02
    # glycine: Engh & Huber N-CA 1.456, CA-C 1.514
    g = rc.restype_order["G"]
    assert abs(n_ca[g] - 1.456) < 0.01 and abs(ca_c[g] - 1.514) < 0.01


# ------------------------------------------------------------------------------------------------
# all_atom.py against OpenFold
# ------------------------------------------------------------------------------------------------
def test_torsion_angles_to_frames_and_atoms_match_openfold(parity):
    aatype = parity["aatype"]
    backb = Rigid(parity["sm_frames_rot"], parity["sm_frames_trans"])  # [2 layers, N]
    frames = all_atom.torsion_angles_to_frames(backb, parity["sm_angles"], aatype.expand(2, -1))
    assert frames.shape == (2, 37, 8)
    frame_err = (frames.to_tensor_4x4() - parity["sm_sidechain_frames"]).abs().max().item()
    assert frame_err < 1e-4, frame_err
    pos14 = all_atom.frames_to_atom14_positions(frames, aatype)
    pos_err = (pos14 - parity["sm_positions"]).abs().max().item()
    assert pos_err < 1e-4, pos_err
    pos37 = all_atom.atom14_to_atom37(pos14[-1], aatype)
    err37 = (pos37 - parity["final_atom_positions"]).abs().max().item()
    assert err37 < 1e-4, err37
    masks = all_atom.make_atom14_masks(aatype)
    torch.testing.assert_close(masks["atom37_atom_exists"], parity["final_atom_mask"])


def test_make_atom14_masks_match_openfold(parity):
    masks = all_atom.make_atom14_masks(parity["aatype"])
    for key in ("atom14_atom_exists", "residx_atom14_to_atom37", "residx_atom37_to_atom14", "atom37_atom_exists"):
        assert torch.equal(masks[key].to(parity[key].dtype), parity[key]), key


def test_atom37_to_torsion_angles_match_openfold(parity):
    out = all_atom.atom37_to_torsion_angles(
        parity["template_aatype"], parity["template_all_atom_positions"], parity["template_all_atom_mask"]
    )
    mask = parity["template_torsion_angles_mask"]
    torch.testing.assert_close(out["torsion_angles_mask"], mask, rtol=0, atol=0)
    # Where the mask is 0 (missing atoms, first residue) both implementations return rounding
    # noise of a degenerate frame; only defined entries are compared.
    for key in ("torsion_angles_sin_cos", "alt_torsion_angles_sin_cos"):
        err = ((out[key] - parity["template_" + key]).abs() * mask[..., None]).max().item()
        assert err < 1e-4, (key, err)


def test_pseudo_beta_matches_openfold(parity):
    pos, mask = all_atom.pseudo_beta(
        parity["template_aatype"], parity["template_all_atom_positions"], parity["template_all_atom_mask"]
    )
    torch.testing.assert_close(pos, parity["template_pseudo_beta"], rtol=0, atol=1e-6)
    torch.testing.assert_close(mask, parity["template_pseudo_beta_mask"], rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------
# Round trips
# ------------------------------------------------------------------------------------------------
def _unit_angles(theta: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.sin(theta), torch.cos(theta)], dim=-1)


def _random_structure(n_batch=2, n_res=41, seed=0):
    g = torch.Generator().manual_seed(seed)
    aatype = torch.randint(0, 21, (n_batch, n_res), generator=g)
    k = min(n_res, 20)
    aatype[:, :k] = torch.arange(k)  # every residue type at least once, UNK sometimes
    backb = random_rigid((n_batch, n_res), seed=seed + 1)
    theta = (torch.rand(n_batch, n_res, 7, generator=g, dtype=torch.float64) * 2 - 1) * math.pi
    return aatype, backb, theta


def test_torsions_atoms_torsions_round_trip():
    aatype, backb, theta = _random_structure()
    angles = _unit_angles(theta)
    frames = all_atom.torsion_angles_to_frames(backb, angles, aatype)
    pos14 = all_atom.frames_to_atom14_positions(frames, aatype)
    masks = all_atom.make_atom14_masks(aatype)
    pos37 = all_atom.atom14_to_atom37(pos14, aatype)
    out = all_atom.atom37_to_torsion_angles(aatype, pos37, masks["atom37_atom_exists"].double())
    mask = out["torsion_angles_mask"]
    # psi and chi1-4 live in the residue itself; (pre-omega, phi) need the neighbour's atoms and
    # have no atoms of their own in the rigid groups, so they are not recoverable.
    chi_mask = torch.cat([torch.tensor(rc.chi_angles_mask), torch.zeros(1, 4)])[aatype].double()
    torch.testing.assert_close(mask[..., 3:], chi_mask)
    assert (mask[..., 2] == (aatype < 20).double()).all()
    err = ((out["torsion_angles_sin_cos"] - angles)[..., 2:, :].abs() * mask[..., 2:, None]).max().item()
    assert err < 1e-5, err
    # alt torsions: pi-periodic chis rotated by pi.
    periodic = torch.tensor(rc.chi_pi_periodic, dtype=torch.float64)[aatype]
    alt = out["alt_torsion_angles_sin_cos"][..., 3:, :]
    torch.testing.assert_close(alt, out["torsion_angles_sin_cos"][..., 3:, :] * (1 - 2 * periodic)[..., None])


def test_atom37_to_frames_recovers_predicted_frames():
    aatype, backb, theta = _random_structure(seed=3)
    frames = all_atom.torsion_angles_to_frames(backb, _unit_angles(theta), aatype)
    pos37 = all_atom.atom14_to_atom37(all_atom.frames_to_atom14_positions(frames, aatype), aatype)
    exists37 = all_atom.make_atom14_masks(aatype)["atom37_atom_exists"].double()
    gt = all_atom.atom37_to_frames(aatype, pos37, exists37)
    ex = gt["rigidgroups_gt_exists"]
    assert ex.shape == (2, 41, 8)
    torch.testing.assert_close(ex, gt["rigidgroups_group_exists"] * (aatype < 20).double()[..., None])
    assert (ex[..., 1:3] == 0).all() and (ex[aatype < 20][:, [0, 3]] == 1).all()
    err = ((gt["rigidgroups_gt_frames"] - frames.to_tensor_4x4()).abs().amax((-1, -2)) * ex).max().item()
    assert err < 1e-5, err  # ideal positions are tabulated to 1e-3 Å; observed ~5e-7
    # Alternative frames: ambiguous groups rotated by pi about x, the rest identical.
    alt = Rigid.from_tensor_4x4(gt["rigidgroups_alt_gt_frames"])
    rel = Rigid.from_tensor_4x4(gt["rigidgroups_gt_frames"]).invert().compose(alt)
    amb = gt["rigidgroups_group_is_ambiguous"]
    diag = torch.stack([torch.ones_like(amb), 1 - 2 * amb, 1 - 2 * amb], -1)
    keep = ex > 0  # frames of groups without atoms are degenerate
    torch.testing.assert_close(rel.rots[keep], torch.diag_embed(diag)[keep])
    assert amb[keep].sum() > 0


def test_make_atom14_gt_swaps_ambiguous_atoms():
    aatype, backb, theta = _random_structure(seed=5)
    frames = all_atom.torsion_angles_to_frames(backb, _unit_angles(theta), aatype)
    pos14 = all_atom.frames_to_atom14_positions(frames, aatype)
    pos37 = all_atom.atom14_to_atom37(pos14, aatype)
    exists37 = all_atom.make_atom14_masks(aatype)["atom37_atom_exists"].double()
    exists37[0, 4, rc.atom_order["OD1"]] = 0.0  # residue 4 is CYS: no OD1, nothing changes
    exists37[0, 3, rc.atom_order["OD1"]] = 0.0  # residue 3 is ASP: OD1 missing
    gt = all_atom.make_atom14_gt(aatype, pos37, exists37)
    exists14 = gt["atom14_atom_exists"]
    torch.testing.assert_close(gt["atom14_gt_positions"][1:], pos14[1:])
    assert gt["atom14_gt_exists"][0, 3, 6] == 0 and gt["atom14_alt_gt_exists"][0, 3, 7] == 0
    assert gt["atom14_alt_gt_exists"][0, 3, 6] == 1
    torch.testing.assert_close(gt["atom14_gt_exists"][1], exists14[1])
    asp = aatype == rc.restype_order["D"]
    torch.testing.assert_close(gt["atom14_alt_gt_positions"][asp][:, [6, 7]], gt["atom14_gt_positions"][asp][:, [7, 6]])
    not_amb = gt["atom14_atom_is_ambiguous"] == 0
    torch.testing.assert_close(gt["atom14_alt_gt_positions"][not_amb], gt["atom14_gt_positions"][not_amb])
    assert gt["atom14_atom_is_ambiguous"][asp][:, [6, 7]].eq(1).all()


def test_atom14_atom37_round_trip_with_trailing_dims():
    aatype = torch.randint(0, 22, (3, 17))  # 21 (gap) is treated as UNK
    x14 = torch.randn(3, 17, 14, 2, 5) * all_atom.make_atom14_masks(aatype)["atom14_atom_exists"][..., None, None]
    x37 = all_atom.atom14_to_atom37(x14, aatype)
    assert x37.shape == (3, 17, 37, 2, 5)
    torch.testing.assert_close(all_atom.atom37_to_atom14(x37, aatype), x14)


def test_torsion_angles_to_frames_gradients_finite():
    aatype, backb, theta = _random_structure(n_batch=1, n_res=9, seed=7)
    angles = _unit_angles(theta).float().requires_grad_(True)
    trans = backb.trans.float().requires_grad_(True)
    frames = all_atom.torsion_angles_to_frames(Rigid(backb.rots.float(), trans), angles, aatype)
    all_atom.frames_to_atom14_positions(frames, aatype).square().sum().backward()
    assert torch.isfinite(angles.grad).all() and torch.isfinite(trans.grad).all()


def test_residue_tables_are_not_cached_as_fake_tensors():
    """Memory estimation runs the model under FakeTensorMode; the table cache must not keep fakes."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        fake = all_atom.make_atom14_masks(torch.zeros(5, dtype=torch.long))
        assert isinstance(fake["atom14_atom_exists"], FakeTensor)
    real = all_atom.make_atom14_masks(torch.zeros(5, dtype=torch.long))
    assert not isinstance(real["atom14_atom_exists"], FakeTensor)
    assert real["atom14_atom_exists"].sum().item() > 0
