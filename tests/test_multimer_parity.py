"""AF2-Multimer (model_1_multimer_v3) at parity with OpenFold, loading AF2-Multimer parameters.

Vectors in tests/data/parity_multimer were made with OpenFold v2.2.0 (its README.md gives the
conventions and the measured noise: fp32 differences of a second correct implementation are
<= 2.3e-5 Å in coordinates). Tolerances: 1e-3 (Å for coordinates; logits, pLDDT, PAE) and 1e-4 for
pTM / ipTM in fp32; 1e-6 in fp64 (the README's float32-bin-constant column is ~1e-7 relative).
"""

import numpy as np
import pytest
import torch

from alphafold_mem.model.embedders import InputEmbedderMultimer
from alphafold_mem.weights import ParameterLoadError, af2_entries, export_af2_params, load_af2_params

from .conftest import TEST_DATA

PARITY = TEST_DATA / "parity_multimer"
PRESET = "model_1_multimer_v3"
# our output name -> OpenFold's, with the tolerance in fp32
COMPARED = {
    "final_atom_positions": ("final_atom_positions", 1e-3),
    "final_atom_mask": ("final_atom_mask", 0.0),
    "sm_positions": ("sm_positions", 1e-3),
    "sm_angles": ("sm_angles", 1e-3),
    "sm_unnormalized_angles": ("sm_unnormalized_angles", 1e-3),
    "sm_single": ("sm_single", 1e-3),
    "single": ("single", 1e-3),
    "pair": ("pair", 1e-3),
    "msa": ("msa", 1e-3),
    "plddt": ("plddt", 1e-3),
    "lddt_logits": ("lddt_logits", 1e-3),
    "distogram_logits": ("distogram_logits", 1e-3),
    "masked_msa_logits": ("masked_msa_logits", 1e-3),
    "experimentally_resolved_logits": ("experimentally_resolved_logits", 1e-3),
    "predicted_aligned_error": ("predicted_aligned_error", 1e-3),
    "max_predicted_aligned_error": ("max_predicted_aligned_error", 1e-6),
    "pae_logits": ("tm_logits", 1e-3),
    "ptm": ("ptm_score", 1e-4),
    "iptm": ("iptm_score", 1e-4),
    "ranking_confidence": ("ranking_confidence", 1e-4),
}


@pytest.fixture(scope="module")
def model():
    return load_af2_params(PARITY / "params.npz", preset=PRESET)


def _inputs(iters=None, dtype=None):
    inp = {k: torch.from_numpy(v) for k, v in np.load(PARITY / "inputs.npz").items()}
    if iters is not None:
        inp = {k: v[..., :iters] for k, v in inp.items()}
    if dtype is not None:
        inp = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inp.items()}
    return inp


def _diffs(out, ref_path):
    ref = np.load(ref_path)
    diffs = {}
    for ours, (theirs, tol) in COMPARED.items():
        if theirs not in ref.files:  # the fp64 and iter1 sets leave the logit tensors out
            continue
        a, b = out[ours].detach().double().numpy(), ref[theirs]
        assert a.shape == b.shape, (ours, a.shape, b.shape)
        diffs[ours] = (float(np.abs(a - b).max()), tol)
    frames = out["sm_frames"].detach().double().numpy()
    diffs["sm_frames_rot"] = (float(np.abs(frames[..., :3, :3] - ref["sm_frames_rot"]).max()), 1e-3)
    diffs["sm_frames_trans"] = (float(np.abs(frames[..., :3, 3] - ref["sm_frames_trans"]).max()), 1e-3)
    return diffs


@pytest.mark.parametrize("ref_name,iters", [("outputs.npz", None), ("outputs_iter1.npz", 1)])
def test_parity_with_openfold_fp32(model, ref_name, iters):
    with torch.no_grad():
        out = model(_inputs(iters), recycle_dim=-1)
    assert int(out["num_recycles"]) == (iters or 3)
    bad = {k: v for k, v in _diffs(out, PARITY / ref_name).items() if v[0] > v[1]}
    assert not bad, f"outputs beyond their tolerance (difference, tolerance): {bad}"


def test_parity_with_openfold_fp64():
    model64 = load_af2_params(PARITY / "params.npz", preset=PRESET).double()
    with torch.no_grad():
        out = model64(_inputs(dtype=torch.float64), recycle_dim=-1)
    diffs = _diffs(out, PARITY / "outputs_fp64.npz")
    bad = {k: v[0] for k, v in diffs.items() if v[0] > 1e-6}
    assert not bad, f"fp64 outputs beyond 1e-6: {bad}"


def test_chain_pair_iptm_is_symmetric_and_its_pairs_are_ipTMs_of_two_chain_complexes(model):
    """The chain-pair matrix entry (a, b) equals the ipTM of the complex made of chains a and b
    alone (recomputed here from the PAE logits with OpenFold's compute_tm formula)."""
    with torch.no_grad():
        out = model(_inputs(1), recycle_dim=-1)
    mat, logits = out["chain_pair_iptm"], out["pae_logits"].double()
    asym = _inputs(1)["asym_id"][..., 0]
    assert mat.shape == (3, 3) and torch.allclose(mat, mat.T)
    probs = torch.softmax(logits, -1)
    breaks = torch.linspace(0, 31, 63, dtype=torch.float64)
    centers = torch.cat([breaks + (breaks[1] - breaks[0]) / 2, (breaks[-1] + 1.5 * (breaks[1] - breaks[0]))[None]])
    for a in (1, 2, 3):
        for b in (1, 2, 3):
            sel = (asym == a) | (asym == b)
            n = int(sel.sum())
            d0 = 1.24 * (max(n, 19) - 15) ** (1 / 3) - 1.8
            term = (probs[sel][:, sel] * (1 / (1 + centers**2 / d0**2))).sum(-1)
            sub = asym[sel]
            pair = (sub[:, None] != sub[None, :]) if a != b else torch.ones(n, n, dtype=torch.bool)
            per_alignment = (term * pair).sum(-1) / pair.sum(-1)
            assert abs(float(per_alignment.max()) - float(mat[a - 1, b - 1])) < 1e-5, (a, b)


def test_every_key_consumed_and_every_parameter_reached(model):
    entries = af2_entries(model)
    keys = [e.key for e in entries]
    assert len(keys) == len(set(keys)) == 330
    with np.load(PARITY / "params.npz") as npz:
        assert {"alphafold/alphafold_iteration/" + k for k in keys} == set(npz.files)
    reached = [id(p) for e in entries for p in e.params]
    assert len(reached) == len(set(reached))
    assert set(reached) == {id(p) for p in model.parameters()}


def test_inferred_sizes(model):
    c = model.config
    assert c.multimer and c.preset == PRESET
    assert (c.c_m, c.c_z, c.c_s, c.c_t, c.c_e) == (32, 16, 48, 12, 8)
    assert (c.evoformer.c_hidden_mul, c.extra_msa.c_hidden_mul, c.template.pair_stack.c_hidden_tri_mul) == (20, 12, 10)
    sm = c.structure_module
    assert (sm.c_ipa, sm.num_heads_ipa, sm.num_qk_points, sm.num_v_points, sm.c_resnet) == (8, 3, 4, 8, 20)


def test_export_load_round_trip_is_bit_identical(model, tmp_path):
    path = tmp_path / "roundtrip.npz"
    export_af2_params(model, path)
    with np.load(PARITY / "params.npz") as a, np.load(path) as b:
        assert set(a.files) == set(b.files)
        for k in a.files:
            assert a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k


def test_monomer_and_multimer_parameters_refused_under_the_other_preset(tmp_path):
    with pytest.raises(ParameterLoadError) as e:
        load_af2_params(PARITY / "params.npz", preset="model_1_ptm")
    msg = str(e.value)
    assert "\n" not in msg and "AF2-Multimer" in msg and "model_1_ptm" in msg and "params.npz" in msg
    with pytest.raises(ParameterLoadError) as e:
        load_af2_params(TEST_DATA / "parity" / "params.npz", preset=PRESET)
    msg = str(e.value)
    assert "\n" not in msg and "monomer" in msg and PRESET in msg


def test_relative_encoding_is_the_one_hot_definition():
    """AF2-Multimer's relative encoding by weight lookup equals Linear(one_hot concat) of its definition."""
    torch.manual_seed(0)
    emb = InputEmbedderMultimer(21, 49, 8, 6, relpos_k=4, max_relative_chain=2)
    ri = torch.tensor([0, 1, 2, 9, 0, 1, 0, 1, 5])
    asym = torch.tensor([1, 1, 1, 1, 2, 2, 3, 3, 3])
    entity = torch.tensor([1, 1, 1, 1, 2, 2, 1, 1, 1])
    sym = torch.tensor([1, 1, 1, 1, 1, 1, 2, 2, 2])
    pos = emb.positions({"residue_index": ri, "asym_id": asym, "entity_id": entity, "sym_id": sym})
    out = emb.relpos(pos)
    k, c = 4, 2
    d = torch.clamp(ri[:, None] - ri[None, :] + k, 0, 2 * k)
    d = torch.where(asym[:, None] == asym[None, :], d, 2 * k + 1)
    same_entity = entity[:, None] == entity[None, :]
    e = torch.where(same_entity, torch.clamp(sym[:, None] - sym[None, :] + c, 0, 2 * c), 2 * c + 1)
    feats = torch.cat(
        [
            torch.nn.functional.one_hot(d, 2 * k + 2),
            same_entity[..., None].long(),
            torch.nn.functional.one_hot(e, 2 * c + 2),
        ],
        -1,
    ).float()
    assert torch.allclose(out, emb.position_activations(feats), atol=1e-6)
