"""The AF2 model on the plain PyTorch path: shapes, gradients, masking, invariance, determinism."""

import math

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.geometry.rigid import Rigid, quat_to_rot
from alphafold_mem.model.structure_module import InvariantPointAttention
from alphafold_mem.testing import random_features

N_RES, N_SEQ, N_EXTRA, N_TEMPL = 37, 11, 13, 2


def _model(cfg, seed=0):
    torch.manual_seed(seed)
    model = AlphaFold(cfg)
    # AF2 zero-initialises the final layers; perturb every parameter so no output is trivially zero
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def test_forward_backward_shapes_finite(tiny_config):
    model = _model(tiny_config)
    batch = random_features(tiny_config, N_RES, N_SEQ, N_EXTRA, n_templ=N_TEMPL)
    out = model(batch)
    c = tiny_config
    expected = {
        "final_atom_positions": (N_RES, 37, 3),
        "final_atom_mask": (N_RES, 37),
        "plddt": (N_RES,),
        "distogram_logits": (N_RES, N_RES, 64),
        "masked_msa_logits": (N_SEQ, N_RES, 23),
        "single": (N_RES, c.c_s),
        "pair": (N_RES, N_RES, c.c_z),
        "predicted_aligned_error": (N_RES, N_RES),
        "ptm": (),
        "lddt_logits": (N_RES, 50),
        "experimentally_resolved_logits": (N_RES, 37),
        "sm_positions": (c.structure_module.num_layers, N_RES, 14, 3),
    }
    for k, shape in expected.items():
        assert tuple(out[k].shape) == shape, k
        assert torch.isfinite(out[k]).all(), k
    assert ((out["plddt"] >= 0) & (out["plddt"] <= 100)).all()
    assert ((out["ptm"] >= 0) & (out["ptm"] <= 1)).all()
    loss = sum(
        out[k].float().pow(2).mean()
        for k in (
            "final_atom_positions",
            "plddt",
            "distogram_logits",
            "masked_msa_logits",
            "predicted_aligned_error",
            "experimentally_resolved_logits",
        )
    )
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    # every module that feeds an output gets a non-zero gradient somewhere
    assert sum(int(g.abs().sum() > 0) for g in grads) > 0.9 * len(grads)


def test_batched_equals_unbatched(tiny_config):
    model = _model(tiny_config).eval()
    b1 = random_features(tiny_config, 23, 5, 7, n_templ=2, seed=1)
    b2 = random_features(tiny_config, 23, 5, 7, n_templ=2, seed=2)
    batched = {k: torch.stack([b1[k], b2[k]]) for k in b1}
    with torch.no_grad():
        ob = model(batched)
        o1 = model(b1)
    diff = (ob["final_atom_positions"][0] - o1["final_atom_positions"]).abs().max()
    assert diff <= 1e-3, diff  # Å; batched kernels sum in another order
    assert torch.allclose(ob["plddt"][0], o1["plddt"], atol=1e-4)


def _pad(batch, n_res_pad, n_seq_pad, n_extra_pad):
    """Append masked residues / MSA rows (random content so a masking bug shows)."""
    g = torch.Generator().manual_seed(7)
    out = {}
    n_res = batch["aatype"].shape[0]
    res_axis = {  # which axes are N_res
        "aatype": [0],
        "residue_index": [0],
        "seq_mask": [0],
        "target_feat": [0],
        "msa_feat": [1],
        "msa_mask": [1],
        "extra_msa": [1],
        "extra_msa_mask": [1],
        "extra_has_deletion": [1],
        "extra_deletion_value": [1],
        "atom14_atom_exists": [0],
        "residx_atom14_to_atom37": [0],
        "residx_atom37_to_atom14": [0],
        "atom37_atom_exists": [0],
        "template_aatype": [1],
        "template_all_atom_positions": [1],
        "template_all_atom_mask": [1],
        "template_pseudo_beta": [1],
        "template_pseudo_beta_mask": [1],
        "template_torsion_angles_sin_cos": [1],
        "template_alt_torsion_angles_sin_cos": [1],
        "template_torsion_angles_mask": [1],
    }
    row_axis = {
        "msa_feat": (0, n_seq_pad),
        "msa_mask": (0, n_seq_pad),
        "extra_msa": (0, n_extra_pad),
        "extra_msa_mask": (0, n_extra_pad),
        "extra_has_deletion": (0, n_extra_pad),
        "extra_deletion_value": (0, n_extra_pad),
    }
    for k, v in batch.items():
        for ax in res_axis.get(k, []):
            shape = list(v.shape)
            shape[ax] = n_res_pad
            if v.is_floating_point():
                fill = torch.rand(shape, generator=g)
            else:
                fill = torch.randint(0, 20, shape, generator=g)
            if k in ("seq_mask", "msa_mask", "extra_msa_mask"):
                fill = torch.zeros(shape)
            if k == "residue_index":
                fill = torch.arange(n_res, n_res + n_res_pad) + 5
            v = torch.cat([v, fill.to(v.dtype)], dim=ax)
        if k in row_axis:
            ax, n = row_axis[k]
            shape = list(v.shape)
            shape[ax] = n
            fill = torch.rand(shape, generator=g) if v.is_floating_point() else torch.randint(0, 21, shape, generator=g)
            if k in ("msa_mask", "extra_msa_mask"):
                fill = torch.zeros(shape)
            v = torch.cat([v, fill.to(v.dtype)], dim=ax)
        out[k] = v
    return out


def test_padding_invariance(tiny_config):
    """Masked (padding) residues and MSA rows must not change outputs at real positions."""
    model = _model(tiny_config).eval()
    batch = random_features(tiny_config, N_RES, N_SEQ, N_EXTRA, n_templ=N_TEMPL, seed=3)
    # masks with both values inside the real region too
    batch["msa_mask"][3, 5:9] = 0
    batch["extra_msa_mask"][2] = 0
    padded = _pad(batch, 6, 3, 4)
    with torch.no_grad():
        a = model(batch)
        b = model(padded)
    n = N_RES
    checks = {
        "final_atom_positions": (a["final_atom_positions"], b["final_atom_positions"][:n]),
        "plddt": (a["plddt"], b["plddt"][:n]),
        "pair": (a["pair"], b["pair"][:n, :n]),
        "single": (a["single"], b["single"][:n]),
        "msa": (a["msa"], b["msa"][:N_SEQ, :n]),
        "distogram_logits": (a["distogram_logits"], b["distogram_logits"][:n, :n]),
        "predicted_aligned_error": (a["predicted_aligned_error"], b["predicted_aligned_error"][:n, :n]),
        "ptm": (a["ptm"], b["ptm"]),
    }
    for k, (x, y) in checks.items():
        diff = (x - y).abs().max().item()
        assert diff <= 1e-5 * max(1.0, x.abs().max().item() / 10), f"{k}: max abs diff {diff:.2e}"


def test_padding_bug_is_detected(tiny_config):
    """The padding check is able to fail: unmasked padding residues change the outputs."""
    model = _model(tiny_config).eval()
    batch = random_features(tiny_config, 17, 5, 6, n_templ=1, seed=4)
    padded = _pad(batch, 3, 0, 0)
    padded["seq_mask"][17:] = 1.0  # pretend the padding is real
    padded["msa_mask"][:, 17:] = 1.0
    with torch.no_grad():
        a = model(batch)["final_atom_positions"]
        b = model(padded)["final_atom_positions"][:17]
    assert (a - b).abs().max() > 1e-3


def test_determinism_and_eval_has_no_dropout(tiny_config):
    batch = random_features(tiny_config, 19, 5, 6, n_templ=1, seed=5)
    m1, m2 = _model(tiny_config, seed=11).eval(), _model(tiny_config, seed=11).eval()
    with torch.no_grad():
        o1, o1b, o2 = m1(batch), m1(batch), m2(batch)
    assert torch.equal(o1["final_atom_positions"], o2["final_atom_positions"])
    assert torch.equal(o1["final_atom_positions"], o1b["final_atom_positions"])
    m1.train()
    torch.manual_seed(0)
    t1 = m1(batch)["final_atom_positions"]
    torch.manual_seed(1)
    t2 = m1(batch)["final_atom_positions"]
    assert not torch.equal(t1, t2), "training mode should apply dropout"
    torch.manual_seed(0)
    t3 = m1(batch)["final_atom_positions"]
    assert torch.equal(t1, t3), "same seed, same dropout masks"


def test_recycling_gradients_only_through_last_iteration(tiny_config):
    cfg = model_config("tiny", num_recycles=2)
    model = _model(cfg)
    batch = random_features(cfg, 13, 4, 5, n_templ=1, seed=6)
    seen = []
    handle = model.evoformer.register_forward_hook(lambda mod, inp, out: seen.append(out[1].requires_grad))
    model(batch)["final_atom_positions"].sum().backward()
    handle.remove()
    assert seen == [False, False, True]


def test_model_1_ptm_parameter_count():
    model = AlphaFold(model_config("model_1_ptm"))
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - 93.2e6) / 93.2e6 < 1e-3, n


def test_invariant_point_attention_is_invariant():
    torch.manual_seed(0)
    ipa = InvariantPointAttention(c_s=24, c_z=8, c_hidden=8, num_heads=3, num_qk_points=4, num_v_points=5)
    with torch.no_grad():
        for p in ipa.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    n = 21
    s, z = torch.randn(n, 24), torch.randn(n, n, 8)
    frames = Rigid(quat_to_rot(torch.randn(n, 4)), torch.randn(n, 3) * 5)
    mask = torch.ones(n)
    mask[-3:] = 0
    glob = Rigid(quat_to_rot(torch.randn(4)), torch.randn(3) * 10)
    moved = glob.compose(frames)  # the same global motion applied to every frame
    a = ipa(s, z, frames, mask)
    b = ipa(s, z, moved, mask)
    assert (a - b).abs().max() <= 1e-4
    assert (a - ipa(s, z, Rigid(frames.rots, frames.trans + 1.0), mask)).abs().max() <= 1e-4
    # and it does depend on the relative frames
    other = Rigid(quat_to_rot(torch.randn(n, 4)), frames.trans)
    assert (a - ipa(s, z, other, mask)).abs().max() > 1e-3


@pytest.mark.parametrize("preset", ["tiny", "demo", "initial_training", "finetuning", "model_1", "model_3_ptm"])
def test_presets_construct(preset):
    cfg = model_config(preset)
    assert cfg.preset == preset
    if preset.startswith("model_"):
        assert (
            cfg.c_m,
            cfg.c_z,
            cfg.c_s,
            cfg.evoformer.num_blocks,
            cfg.extra_msa.num_blocks,
            cfg.structure_module.num_layers,
        ) == (256, 128, 384, 48, 4, 8)
    if preset == "tiny":
        AlphaFold(cfg)


def test_config_overrides_and_errors():
    cfg = model_config("tiny", **{"evoformer.num_blocks": 3}, structure_module__num_layers=2)
    assert cfg.evoformer.num_blocks == 3 and cfg.structure_module.num_layers == 2
    with pytest.raises(KeyError, match="no_such_field"):
        model_config("tiny", **{"evoformer.no_such_field": 1})
    with pytest.raises(ValueError, match="unknown preset"):
        model_config("model_9")
    assert model_config("model_3").template.enabled is False
    assert model_config("model_1").template.enabled is True
    assert model_config("model_1_ptm").heads.pae_enabled and not model_config("model_1").heads.pae_enabled
    with pytest.raises(Exception):
        cfg.c_m = 3  # frozen
    assert type(cfg).from_dict(cfg.to_dict()) == cfg


def test_missing_feature_is_named(tiny_config):
    model = AlphaFold(tiny_config)
    batch = random_features(tiny_config, 9, 3, 3, n_templ=1)
    del batch["msa_feat"]
    with pytest.raises(KeyError, match="msa_feat"):
        model(batch)


def test_relpos_clips_at_k(tiny_config):
    from alphafold_mem.model.embedders import InputEmbedder

    emb = InputEmbedder(22, 49, 8, 4, relpos_k=32)
    ri = torch.tensor([0, 1, 40, 100])
    onehot_idx = torch.clamp(ri[:, None] - ri[None, :], -32, 32) + 32
    out = emb.relpos(emb.positions({"residue_index": ri}))
    expected = emb.pair_activations.weight.T[onehot_idx] + emb.pair_activations.bias
    assert torch.allclose(out, expected, atol=1e-6)
    assert math.isclose(out[0, 2].sum().item(), out[0, 3].sum().item(), abs_tol=1e-6)  # both clipped to -32
