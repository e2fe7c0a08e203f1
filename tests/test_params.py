"""Loading AF2 (.npz) and OpenFold parameters, and parity with OpenFold's outputs.

Vectors in tests/data/parity were made with OpenFold v2.2.0 (see README.md there). Tolerance in fp32:
1e-3 (Å for coordinates), a hundred times OpenFold's own chunked-vs-unchunked noise (~1e-5).
"""

import numpy as np
import pytest
import torch

from alphafold_mem.weights import (
    ParameterLoadError,
    af2_entries,
    export_af2_params,
    load_af2_params,
    load_openfold_checkpoint,
    openfold_state_dict,
)

from .conftest import TEST_DATA

PARITY = TEST_DATA / "parity"
TOL = 1e-3
# our output name -> OpenFold's
COMPARED = {
    "final_atom_positions": "final_atom_positions",
    "plddt": "plddt",
    "predicted_aligned_error": "predicted_aligned_error",
    "distogram_logits": "distogram_logits",
    "masked_msa_logits": "masked_msa_logits",
    "lddt_logits": "lddt_logits",
    "pae_logits": "tm_logits",
    "ptm": "ptm_score",
    "single": "single",
    "pair": "pair",
    "msa": "msa",
    "sm_positions": "sm_positions",
    "sm_angles": "sm_angles",
    "sm_states": "sm_states",
    "sm_single": "sm_single",
    "experimentally_resolved_logits": "experimentally_resolved_logits",
    "final_atom_mask": "final_atom_mask",
}


@pytest.fixture(scope="module")
def parity_model():
    return load_af2_params(PARITY / "params.npz", preset="model_1_ptm")


def _inputs(iters=None, dtype=None):
    inp = {k: torch.from_numpy(v) for k, v in np.load(PARITY / "inputs.npz").items()}
    if iters is not None:
        inp = {k: v[..., :iters] for k, v in inp.items()}
    if dtype is not None:
        inp = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inp.items()}
    return inp


def _max_diffs(out, ref_path):
    ref = np.load(ref_path)
    diffs = {}
    for ours, theirs in COMPARED.items():
        a = out[ours].detach().double().numpy()
        b = ref[theirs]
        assert a.shape == b.shape, (ours, a.shape, b.shape)
        diffs[ours] = float(np.abs(a - b).max())
    frames = out["sm_frames"].detach().double().numpy()
    diffs["sm_frames_rot"] = float(np.abs(frames[..., :3, :3] - ref["sm_frames_rot"]).max())
    diffs["sm_frames_trans"] = float(np.abs(frames[..., :3, 3] - ref["sm_frames_trans"]).max())
    return diffs


@pytest.mark.parametrize("ref_name,iters", [("outputs.npz", None), ("outputs_iter1.npz", 1)])
def test_parity_with_openfold_fp32(parity_model, ref_name, iters):
    with torch.no_grad():
        out = parity_model(_inputs(iters), recycle_dim=-1)
    assert int(out["num_recycles"]) == (iters or 3)
    diffs = _max_diffs(out, PARITY / ref_name)
    bad = {k: v for k, v in diffs.items() if v > TOL}
    assert not bad, f"outputs beyond {TOL}: {bad}"


def test_parity_with_openfold_fp64(parity_model):
    model64 = load_af2_params(PARITY / "params.npz").double()
    with torch.no_grad():
        out = model64(_inputs(dtype=torch.float64), recycle_dim=-1)
    diffs = _max_diffs(out, PARITY / "outputs_fp64.npz")
    # fp64: OpenFold's operation-order noise is ~1e-14; AF2's 1e-10 vs OpenFold's 1e-8 in the
    # global-attention masked mean moves outputs by up to ~1e-9 (tests/data/parity/README.md): 1e-6 leaves margin.
    bad = {k: v for k, v in diffs.items() if v > 1e-6}
    assert not bad, f"fp64 outputs beyond 1e-6: {bad}"


def test_every_key_consumed_and_every_parameter_reached(parity_model):
    entries = af2_entries(parity_model)
    keys = [e.key for e in entries]
    assert len(keys) == len(set(keys)) == 338
    with np.load(PARITY / "params.npz") as npz:
        assert {"alphafold/alphafold_iteration/" + k for k in keys} == set(npz.files)
    reached = [id(p) for e in entries for p in e.params]
    assert len(reached) == len(set(reached))
    assert set(reached) == {id(p) for p in parity_model.parameters()}


def test_inferred_sizes(parity_model):
    c = parity_model.config
    assert (c.c_m, c.c_z, c.c_s, c.c_t, c.c_e) == (32, 16, 48, 12, 8)
    assert (c.evoformer.num_blocks, c.evoformer.num_heads_msa, c.evoformer.c_hidden_msa_att) == (2, 4, 8)
    assert (c.extra_msa.num_blocks, c.extra_msa.num_heads_msa, c.extra_msa.c_hidden_opm) == (1, 6, 7)
    assert (c.template.pair_stack.num_blocks, c.template.pointwise_num_heads) == (2, 3)
    sm = c.structure_module
    assert (sm.c_ipa, sm.num_heads_ipa, sm.num_qk_points, sm.num_v_points, sm.c_resnet) == (8, 3, 4, 8, 20)
    assert c.heads.plddt_c_hidden == 24 and c.heads.pae_enabled


def test_export_load_round_trip_is_bit_identical(parity_model, tmp_path):
    path = tmp_path / "roundtrip.npz"
    export_af2_params(parity_model, path)
    with np.load(PARITY / "params.npz") as a, np.load(path) as b:
        assert set(a.files) == set(b.files)
        for k in a.files:
            assert a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k
    again = load_af2_params(path)
    for p, q in zip(parity_model.parameters(), again.parameters()):
        assert torch.equal(p, q)


def test_openfold_state_dict_round_trip(parity_model, tmp_path):
    sd = openfold_state_dict(parity_model)
    assert len(sd) == 489  # OpenFold's tensor count for this model (tests/data/parity/README.md)
    path = tmp_path / "openfold.pt"
    torch.save({"state_dict": {"model." + k: v for k, v in sd.items()}}, path)
    model = load_openfold_checkpoint(path, template__pointwise_num_heads=3)
    for p, q in zip(parity_model.parameters(), model.parameters()):
        assert torch.equal(p, q)


def _write_modified(tmp_path, modify):
    with np.load(PARITY / "params.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    modify(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


def test_missing_key_is_named(tmp_path):
    key = "alphafold/alphafold_iteration/structure_module/fold_iteration/affine_update//bias"
    path = _write_modified(tmp_path, lambda a: a.pop(key))
    with pytest.raises(ParameterLoadError, match="affine_update//bias"):
        load_af2_params(path)


def test_unexpected_key_is_named(tmp_path):
    path = _write_modified(
        tmp_path, lambda a: a.__setitem__("alphafold/alphafold_iteration/bogus//weights", np.zeros(3, np.float32))
    )
    with pytest.raises(ParameterLoadError, match="bogus//weights"):
        load_af2_params(path)


def test_misshaped_key_names_both_shapes(tmp_path):
    key = "alphafold/alphafold_iteration/predicted_lddt_head/logits//bias"
    path = _write_modified(tmp_path, lambda a: a.__setitem__(key, np.zeros(51, np.float32)))
    with pytest.raises(ParameterLoadError, match=r"logits//bias.*\(51,\).*\(50,\)"):
        load_af2_params(path)


@pytest.mark.parametrize("preset", ["training", "low_memory_inference", "chunk_3"])
def test_parity_with_openfold_under_memory_policies(parity_model, preset):
    """Parity holds with each memory-policy preset, within the same 1e-3 tolerance."""
    from alphafold_mem import MemoryPolicy, bind

    policy = MemoryPolicy(chunk_size=3) if preset == "chunk_3" else getattr(MemoryPolicy, preset)()
    policy = policy.replace(head_logits="keep")  # the logits are compared too
    bind(parity_model, policy)
    try:
        with torch.no_grad():
            out = parity_model(_inputs(), recycle_dim=-1)
    finally:
        bind(parity_model, MemoryPolicy.reference())
    diffs = _max_diffs(out, PARITY / "outputs.npz")
    bad = {k: v for k, v in diffs.items() if v > TOL}
    assert not bad, f"{preset}: outputs beyond {TOL}: {bad}"
