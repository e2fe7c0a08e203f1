"""make_features on real FASTA + a3m + mmCIF from data/: the feature table, MSA features, ground
truth, templates, crops, padding/collate and a forward pass of AlphaFold('tiny')."""

import pathlib

import numpy as np
import pytest
import torch

from alphafold_mem.data import (
    FEATURES,
    InputError,
    check_features,
    collate,
    make_features,
    pad_features,
    parse_fasta,
    parse_mmcif,
    parse_msa,
)
from alphafold_mem.data.features import msa as T
from alphafold_mem.geometry import residue_constants as rc

DATA = pathlib.Path(__file__).parent.parent / "data"
A3M_1LCD = DATA / "alignments/1lcd_A/jackhmmer_pool.a3m"


@pytest.fixture(scope="module")
def lcd():
    return parse_fasta(DATA / "fasta/per_entry/1lcd.fasta")[0]


def test_fasta_a3m_features_match_the_table(lcd, tiny_config):
    f = make_features(lcd.sequence, A3M_1LCD, tiny_config)
    sizes = check_features(f)
    assert sizes == {"N_res": 51, "N_seq": 14, "N_extra": 32, "N_templ": 1}  # 16 clusters - 2 templates
    inputs = {k for k, s in FEATURES.items() if s.group != "ground_truth"}
    assert set(f) == inputs
    for key, value in f.items():
        assert value.dtype == FEATURES[key].dtype, key
    torch.testing.assert_close(f["target_feat"][:, 1:].argmax(-1), f["aatype"])
    msa_feat = f["msa_feat"]
    torch.testing.assert_close(msa_feat[..., :23].sum(-1), torch.ones(14, 51))  # one-hot rows
    torch.testing.assert_close(msa_feat[..., 25:48].sum(-1), torch.ones(14, 51))  # cluster profiles
    assert msa_feat[0, :, :21].argmax(-1).eq(f["aatype"]).float().mean() > 0.7  # query row (some masked)
    assert ((msa_feat[..., 23] == 0) | (msa_feat[..., 23] == 1)).all()
    assert (msa_feat[..., 24] >= 0).all() and (msa_feat[..., 24] < 1).all()
    assert f["extra_msa"].max() <= 21 and f["template_mask"].sum() == 0
    torch.testing.assert_close(f["extra_has_deletion"], (f["extra_deletion_value"] > 0).float())


def test_batch_runs_through_tiny_model(lcd, tiny_config):
    from alphafold_mem.model.alphafold import AlphaFold

    f = make_features(lcd, A3M_1LCD, tiny_config, seed=3)
    model = AlphaFold(tiny_config).eval()
    with torch.no_grad():
        out = model(f)
    assert out["final_atom_positions"].shape == (51, 37, 3)
    assert torch.isfinite(out["final_atom_positions"]).all()


def test_single_sequence_mode_and_determinism(lcd, tiny_config):
    f = make_features(lcd.sequence, None, tiny_config)
    assert f["msa_feat"].shape == (1, 51, 49) and f["extra_msa"].shape == (0, 51)
    a = make_features(lcd.sequence, A3M_1LCD, tiny_config, seed=5)
    b = make_features(lcd.sequence, A3M_1LCD, tiny_config, seed=5)
    c = make_features(lcd.sequence, A3M_1LCD, tiny_config, seed=6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["msa_feat"], c["msa_feat"])


def test_msa_query_mismatch_is_rejected(tiny_config):
    seq_102m = parse_fasta(DATA / "fasta/per_entry/102m.fasta")[0].sequence
    with pytest.raises(InputError, match="differs from the query at position") as exc:
        make_features(seq_102m[:51], A3M_1LCD, tiny_config)
    assert exc.value.file.endswith("jackhmmer_pool.a3m")


def test_training_features_with_crop(tiny_config):
    chain = parse_mmcif(DATA / "mmcif/102m.cif")
    msa = parse_msa(DATA / "alignments/102m_A/non_pairing.a3m", query=chain.sequence)
    f = make_features(chain, msa, tiny_config, train=True, structure=chain, seed=0)
    sizes = check_features(f)
    assert sizes["N_res"] == tiny_config.data.crop_size == 64 and int(f["seq_length"]) == 64
    assert set(f) == set(FEATURES)
    start = int(f["residue_index"][0])
    torch.testing.assert_close(f["residue_index"], torch.arange(start, start + 64))
    torch.testing.assert_close(f["all_atom_positions"], torch.tensor(chain.atom37_positions[start : start + 64]))
    assert f["resolution"] == pytest.approx(1.84)
    # Ground truth consistency with the structure.
    ca = rc.atom_order["CA"]
    torch.testing.assert_close(f["backbone_rigid_tensor"][:, :3, 3], f["all_atom_positions"][:, ca])
    assert f["backbone_rigid_mask"].all() and f["pseudo_beta_mask"].all()
    norms = f["chi_angles_sin_cos"].norm(dim=-1)[f["chi_mask"] > 0]
    torch.testing.assert_close(norms, torch.ones_like(norms), atol=1e-4, rtol=0)
    # BERT masking: masked positions differ from true_msa only where bert_mask is set.
    msa_tokens = f["msa_feat"][..., :23].argmax(-1)
    assert ((msa_tokens != f["true_msa"]) <= (f["bert_mask"] > 0)).all()
    # Spatial crop variant.
    g = make_features(chain, msa, tiny_config, train=True, structure=chain, seed=1, spatial_crop_prob=1.0)
    assert g["aatype"].shape == (64,) and (g["residue_index"].diff() > 0).all()


def test_templates_from_a_structure(tiny_config):
    chain = parse_mmcif(DATA / "mmcif/1lcd.cif")
    f = make_features(chain.sequence, None, tiny_config, templates=[chain, chain, chain])
    assert f["template_aatype"].shape == (2, 51) and f["template_mask"].tolist() == [1.0, 1.0]
    torch.testing.assert_close(f["template_aatype"][0], f["aatype"])
    torch.testing.assert_close(f["template_all_atom_positions"][0], torch.tensor(chain.atom37_positions))
    assert f["template_torsion_angles_mask"][0, 1:, :3].all()  # backbone torsions defined after residue 0
    check_features(f)


def test_masked_msa_statistics():
    rng = np.random.default_rng(0)
    msa = rng.integers(0, 20, size=(200, 300))
    profile = T.make_hhblits_profile(msa)
    masked, bert = T.make_masked_msa(msa, profile, rng)
    assert abs(bert.mean() - 0.15) < 0.01
    replaced = masked[bert > 0]
    assert abs((replaced == T.MASK_TOKEN).mean() - 0.7) < 0.03
    assert np.array_equal(masked[bert == 0], msa[bert == 0])


def test_cluster_assignment_and_profile():
    msa = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    extra = np.array([[0, 1, 2, 21], [4, 5, 21, 21], [4, 1, 2, 3]])
    ones = lambda a: np.ones(a.shape, np.float32)  # noqa: E731
    assign = T.nearest_neighbor_clusters(msa, ones(msa), extra, ones(extra))
    assert assign.tolist() == [0, 1, 0]
    prof, del_mean = T.summarize_clusters(msa, ones(msa), np.zeros((2, 4)), extra, ones(extra), np.ones((3, 4)), assign)
    np.testing.assert_allclose(prof[0, 0, 0], 2 / 3, atol=1e-5)  # rows 0, extra0 = A; extra2 = E(4)
    np.testing.assert_allclose(prof.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(del_mean[1], 0.5, atol=1e-5)


def test_block_delete_keeps_query():
    rows = T.block_delete_msa(100, np.random.default_rng(0))
    assert rows[0] == 0 and len(rows) < 100 and np.all(np.diff(rows) > 0)


def test_pad_and_collate(lcd, tiny_config):
    a = make_features(lcd.sequence, A3M_1LCD, tiny_config)
    b = make_features("MKLVAG", None, tiny_config)
    p = pad_features(b, {"N_res": 51, "N_seq": 14, "N_extra": 32})
    assert p["msa_feat"].shape == (14, 51, 49) and p["seq_mask"][6:].sum() == 0 and p["msa_mask"][1:].sum() == 0
    with pytest.raises(ValueError, match="N_res=51 > requested 10"):
        pad_features(a, {"N_res": 10})
    batch = collate([a, b])
    assert batch.sample_ids == ["sample_0", "sample_1"]
    sizes = check_features(batch.features, batched=True)
    assert sizes["N_res"] == 51 and batch.features["aatype"].shape == (2, 51)
    assert batch.features["seq_mask"][1].sum() == 6
    bad = dict(a, aatype=a["aatype"].int())
    with pytest.raises(ValueError, match="feature 'aatype': dtype"):
        check_features(bad)
