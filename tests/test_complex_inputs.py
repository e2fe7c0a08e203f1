"""Complexes from FASTA (issue 43, item 1): chain ids, AF2-Multimer numbering, bad chains; per-chain
template assembly (item 3)."""

from __future__ import annotations

import numpy as np
import pytest

from alphafold_mem.data.complex import chain_letters, complexes_from_text, make_complex, read_complexes
from alphafold_mem.data.errors import InputError, InputWarning
from alphafold_mem.data.multimer_templates import assemble_templates

SEQ_A, SEQ_B = "MKVLAAGIHW", "GSHMDKKETK"


def _ids(cx):
    return [(c.chain_id, c.entity_id, c.sym_id, c.asym_id) for c in cx.chains]


def test_colabfold_record_is_one_complex_numbered_as_af2():
    with pytest.warns(InputWarning, match="lower-case letters upper-cased"):
        cxs = complexes_from_text(f">abc\n{SEQ_A}:{SEQ_B}:{SEQ_A.lower()}\n>mono\n{SEQ_B}\n")
    assert [cx.name for cx in cxs] == ["abc", "mono"]
    cx = cxs[0]
    assert _ids(cx) == [("A", 1, 1, 1), ("B", 2, 1, 2), ("C", 1, 2, 3)]
    assert cx.offsets == (0, 10, 20) and cx.num_res == 30
    assert cx.entities == {1: SEQ_A, 2: SEQ_B}
    np.testing.assert_array_equal(cx.residue_index(), np.tile(np.arange(10), 3))
    np.testing.assert_array_equal(cx.per_residue("sym_id"), np.repeat([1, 1, 2], 10))
    assert not cx.is_homomer_or_monomer and cxs[1].is_homomer_or_monomer


def test_af2_file_is_one_complex_with_record_chain_ids(tmp_path):
    path = tmp_path / "pair.fasta"
    path.write_text(f">7abc_H heavy\n{SEQ_A}\n>7abc_L light\n{SEQ_B}\n>7abc_K heavy\n{SEQ_A}\n")
    (cx,) = read_complexes(path, one_complex=True)
    assert cx.name == "pair"
    assert _ids(cx) == [("H", 1, 1, 1), ("L", 2, 1, 2), ("K", 1, 2, 3)]
    assert [c.record for c in cx.chains] == ["7abc_H", "7abc_L", "7abc_K"]
    # Without one_complex, every record is its own one-chain complex.
    assert [len(c.chains) for c in read_complexes(path)] == [1, 1, 1]


def test_rcsb_header_lists_chains_and_duplicate_ids_fall_back_to_letters():
    (cx,) = complexes_from_text(
        f">7DDO_1|Chains A[auth C], B|spike\n{SEQ_A}\n>7DDO_2|Chain D|ace2\n{SEQ_B}\n", one_complex=True
    )
    assert _ids(cx) == [("C", 1, 1, 1), ("B", 1, 2, 2), ("D", 2, 1, 3)]
    (cx,) = complexes_from_text(f">x_A\n{SEQ_A}\n>y_A\n{SEQ_B}\n>long-name\n{SEQ_B}\n", one_complex=True)
    assert [c.chain_id for c in cx.chains] == ["A", "B", "C"]


def test_chain_letters_continue_after_z():
    letters = chain_letters(28)
    assert letters[:3] == ["A", "B", "C"] and letters[25:] == ["Z", "AA", "AB"]


@pytest.mark.parametrize(
    "text, one, expected",
    [
        (f">cx\n{SEQ_A}:ACGTACGTACGTAC\n", False, "record 'cx': chain B is a nucleic-acid chain"),
        (f">p\n{SEQ_A}\n>d mol:na\nACGUACGU\n", True, "record 'd': chain d is a nucleic-acid chain"),
        (f">cx\n{SEQ_A}::{SEQ_B}\n", False, "record 'cx': chain B is empty"),
        (f">A\n{SEQ_A}\n>B\n\n>C\n{SEQ_B}\n", True, "record 'B': chain B is empty"),
    ],
)
def test_bad_chain_is_one_line_naming_file_record_and_chain(text, one, expected):
    with pytest.raises(InputError) as err:
        complexes_from_text(text, label="in.fasta", one_complex=one)
    message = str(err.value)
    assert "\n" not in message and message.startswith("in.fasta:") and expected in message


def test_make_complex_rejects_repeated_chain_ids():
    with pytest.raises(InputError, match="chain id 'A' is used twice"):
        make_complex([("A", SEQ_A), ("A", SEQ_B)])


def _templates(rng, n, length):
    return {
        "template_aatype": rng.integers(0, 22, (n, length)),
        "template_all_atom_positions": rng.normal(size=(n, length, 37, 3)).astype(np.float32),
        "template_all_atom_mask": (rng.random((n, length, 37)) > 0.5).astype(np.float32),
    }


def test_templates_stay_in_their_chains_with_af2_padding():
    rng = np.random.default_rng(0)
    cx = make_complex([("A", SEQ_A), ("B", SEQ_B + "QQ"), ("C", SEQ_A)])
    ent = {1: _templates(rng, 6, 10), 2: _templates(rng, 1, 12)}
    out = assemble_templates(cx, ent)
    assert out["template_aatype"].shape == (4, 32) and out["template_all_atom_positions"].shape == (4, 32, 37, 3)
    np.testing.assert_array_equal(out["template_mask"], [1, 1, 1, 1])
    for key in ("template_aatype", "template_all_atom_positions", "template_all_atom_mask"):
        a1, b, a2 = out[key][:, :10], out[key][:, 10:22], out[key][:, 22:]
        np.testing.assert_array_equal(a1, ent[1][key][:4])  # first 4 of 6 kept
        np.testing.assert_array_equal(a2, a1)  # copies share the entity's templates
        np.testing.assert_array_equal(b[:1], ent[2][key])
        assert not b[1:].any()  # B's slots 2-4: all-zero padding (aatype 0, as AF2)
    only_b = assemble_templates(cx, {2: ent[2]}, max_templates=2)
    np.testing.assert_array_equal(only_b["template_mask"], [1, 0])
    assert not only_b["template_all_atom_mask"][:, :10].any()


def test_template_shape_error_names_the_entity():
    rng = np.random.default_rng(1)
    cx = make_complex([("A", SEQ_A), ("B", SEQ_B)])
    with pytest.raises(ValueError, match="entity 2 has shape"):
        assemble_templates(cx, {2: _templates(rng, 2, 9)})
