"""Issue 16, alignments and features: all problems of an a3m reported at once with the likely
cause, Neff at 80 % identity, and the value checks every input feature passes before the model
(finite, masks 0/1, tokens in range) naming feature, sample and first bad position."""

import pathlib

import numpy as np
import pytest
import torch

from alphafold_mem import model_config
from alphafold_mem.data import InputError, collate, make_features, parse_mmcif, parse_msa
from alphafold_mem.data.features import Sample
from alphafold_mem.data.features.values import check_feature_values, feature_value_problem
from alphafold_mem.data.msa import MAX_PROBLEMS, parse_a3m_string
from alphafold_mem.data.neff import neff

CASES = pathlib.Path(__file__).parent / "data" / "cases"
DATA = pathlib.Path(__file__).parent.parent / "data"
CRAMBIN = "TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN"


# -- a3m: every problem at once, with the likely cause ----------------------------------------------
def test_shared_case_reports_upper_case_insertions_and_query_mismatch_together():
    with pytest.raises(InputError) as exc:
        parse_msa(CASES / "a3m-uppercase-insertion-and-mismatch.a3m", query=CRAMBIN)
    msg = str(exc.value)
    assert msg.startswith(f"{CASES / 'a3m-uppercase-insertion-and-mismatch.a3m'}:1: 2 problems: ")
    assert (
        "line 1 row 'query_P5S': first row differs from the query at position 5 ('S' in the MSA, 'P' in the query)"
    ) in msg
    assert (
        "line 3 row 'hit_upper_insertion': row 2 has 48 match columns, 2 more than the query: likely insertions "
        "written in upper case (a3m insertions are lower case)"
    ) in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    "rows, expected",
    [
        (["ACDE", "ACD"], ["1 fewer than the query: likely an unaligned (FASTA) sequence"]),
        (["ACDE", "AC-"], ["1 fewer than the query: likely missing '-' for deleted query columns"]),
        (["ACDE", "aCDE"], ["1 fewer than the query: likely missing '-'"]),
        (
            ["ACDE", "ACDEKK", "AC-E", "ACD"],
            ["row 2 has 6 match columns, 2 more", "row 4 has 3 match columns, 1 fewer"],
        ),
        (["ACDE", "AC?E", "ACDEF"], ["invalid character '?' in A3M row 2", "row 3 has 5 match columns"]),
    ],
)
def test_a3m_problem_variants(rows, expected):
    text = "".join(f">r{i}\n{r}\n" for i, r in enumerate(rows))
    with pytest.raises(InputError) as exc:
        parse_a3m_string(text, label="m.a3m", query="ACDE")
    msg = str(exc.value)
    assert all(e in msg for e in expected), msg
    if len(expected) > 1:
        assert f"{len(expected)} problems" in msg


def test_a3m_problem_list_is_capped_and_single_problems_keep_their_column():
    text = ">q\nACDE\n" + "".join(f">h{i}\nAC\n" for i in range(MAX_PROBLEMS + 5))
    with pytest.raises(InputError, match=rf"{MAX_PROBLEMS + 5} problems: .*; and 5 more$") as exc:
        parse_a3m_string(text, label="m.a3m")
    assert str(exc.value).count("match columns") == MAX_PROBLEMS
    with pytest.raises(InputError) as exc:
        parse_a3m_string(">q\nACDE\n>h\nAC\x01E\n", label="m.a3m")
    assert (exc.value.line, exc.value.column, exc.value.record) == (4, 3, "h")


def test_query_only_msa_parses_to_depth_one():
    msa = parse_msa(CASES / "a3m-query-only.a3m", query=CRAMBIN)
    assert msa.depth == 1 and neff(msa.sequences).value == 1.0


# -- Neff at 80 % identity -----------------------------------------------------------------------------
def test_neff_definition_on_small_alignments():
    q = "ACDEFGHIKL"
    assert neff([q]).value == 1.0 and neff([]).value == 0.0
    assert neff([q, q, q]).value == pytest.approx(1.0)  # identical rows count once
    two_of_ten = "AC" + "W" * 8  # 20 % identity to q
    assert neff([q, two_of_ten]).value == pytest.approx(2.0)
    eighty = "ACDEFGHIWW"  # exactly 80 %: the threshold counts as similar
    assert neff([q, eighty]).value == pytest.approx(1.0)
    seventy = "ACDEFGHWWW"
    assert neff([q, seventy]).value == pytest.approx(2.0)
    gaps = "ACDEFGHI--"  # gap against residue is a mismatch
    assert neff([q, gaps]).value == pytest.approx(1.0) and neff([q, "ACDEFGH---"]).value == pytest.approx(2.0)
    # two clusters of 3 and 1 singleton: 1 + 1 + 1
    rows = [q, q[:9] + "W", q[:9] + "Y", "W" * 10, "WWWWWWWWWY", "WWWWWWWWYY", "MNPQRSTVWY"]
    assert neff(rows).value == pytest.approx(3.0)
    with pytest.raises(ValueError):
        neff(["ACD", "AC"])


def test_neff_estimate_is_close_to_exact_on_a_real_alignment():
    msa = parse_msa(DATA / "alignments" / "1lcd_A" / "jackhmmer_pool.a3m")
    exact = neff(msa.sequences)
    estimate = neff(msa.sequences, max_exact_rows=50, sample_rows=128)
    assert exact.exact and not estimate.exact and estimate.sampled_rows == 128
    assert 1 < exact.value <= msa.depth and abs(estimate.value - exact.value) / exact.value < 0.15
    assert estimate.describe().startswith("~") and f"of {msa.depth} rows" in estimate.describe()


# -- feature values before the forward pass ---------------------------------------------------------
@pytest.fixture(scope="module")
def real_features():
    chain = parse_mmcif(DATA / "mmcif" / "2q2k.cif", "A")
    cfg = model_config("tiny", **{"template.enabled": True})
    msa = parse_msa(DATA / "alignments" / "2q2k_A" / "bfd_uniclust_hits.a3m", query=chain.sequence)
    return {
        mode: make_features(chain, msa, cfg, structure=chain, mode=mode, templates=[chain], seed=1)
        for mode in ("predict", "train")
    }


def test_real_features_pass(real_features):
    for feats in real_features.values():
        assert feature_value_problem(feats) is None
        check_feature_values(feats, record="x")


@pytest.mark.parametrize(
    "key, index, value, expected",
    [
        (
            "template_all_atom_positions",
            (0, 11, 1, 2),
            float("nan"),
            "feature 'template_all_atom_positions': non-finite value nan at template 1, residue 12, atom CA, z",
        ),
        ("aatype", (5,), 23, "feature 'aatype': value 23 outside 0-20 at residue 6"),
        ("seq_mask", (3,), 0.5, "feature 'seq_mask': value 0.5 in a mask (expected 0 or 1) at residue 4"),
        ("true_msa", (0, 2), 22, "feature 'true_msa': value 22 outside 0-21 at MSA row 1, residue 3"),
        (
            "msa_feat",
            (0, 4, 7),
            float("inf"),
            "feature 'msa_feat': non-finite value inf at MSA row 1, residue 5, index 7",
        ),
        (
            "all_atom_positions",
            (9, 0, 0),
            float("-inf"),
            "feature 'all_atom_positions': non-finite value -inf at residue 10, atom N, x",
        ),
        ("template_mask", (0,), 2.0, "feature 'template_mask': value 2.0 in a mask (expected 0 or 1) at template 1"),
    ],
)
def test_bad_values_are_named_with_their_first_position(real_features, key, index, value, expected):
    feats = {k: v.clone() for k, v in real_features["train"].items()}
    feats[key][index] = value
    assert feature_value_problem(feats) == expected
    last = tuple(n - 1 for n in feats[key].shape)
    if last != index:  # a second bad value after the first: counted, the first position still named
        feats[key][last] = value
        assert feature_value_problem(feats) == expected + " (2 bad values)"
    with pytest.raises(InputError, match=r"^input\.fasta:3: record 't1': feature ") as exc:
        check_feature_values(feats, record="t1", file="input.fasta:3")
    assert str(exc.value).endswith("not passed to the model")


def test_batched_check_names_the_sample(real_features):
    other = {k: v.clone() for k, v in real_features["train"].items()}
    other["template_pseudo_beta"][0, 2, 0] = float("nan")
    batch = collate([Sample("good", real_features["train"]), Sample("bad_1abc_A", other)])
    assert feature_value_problem(batch.features, batched=True, sample_ids=batch.sample_ids) == (
        "feature 'template_pseudo_beta': non-finite value nan at sample 'bad_1abc_A', template 1, residue 3, x"
    )
    assert feature_value_problem({"extra_key": torch.tensor([1.0, np.nan])}) == (
        "feature 'extra_key': non-finite value nan at index 1"
    )
