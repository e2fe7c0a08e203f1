"""Issue 16, parser kinds: records classified before their letters are checked (FASTA), mmCIF
without ``_entity``/``label_seq_id`` read from ``_atom_site``, protein chains without atoms
reported, modified residues logged, trailing '*', 'X' positions, empty ':' chains, and every problem
of an a3m file reported at once with its likely cause. Shared cases (tests/data/cases) plus variants
built here."""

import pathlib
import re
import warnings

import pytest

from alphafold_mem.data import (
    InputError,
    make_features,
    parse_fasta,
    parse_fasta_string,
    read_structure,
)
from alphafold_mem.data import parse_msa as parse_msa_file
from alphafold_mem.data.errors import InputNote
from alphafold_mem.data.features.msa import make_msa_features
from alphafold_mem.geometry import residue_constants as rc

CASES = pathlib.Path(__file__).parent / "data" / "cases"
DATA = pathlib.Path(__file__).parent.parent / "data"
CRAMBIN = "TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN"


def _caught(fn, *args, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kw)
    return result, [(w.category, str(w.message)) for w in caught]


# -- FASTA: molecule kind before letters ----------------------------------------------------------
def test_seqres_case_keeps_protein_and_skips_nucleic_with_one_warning():
    recs, caught = _caught(parse_fasta, CASES / "seqres-with-nucleic.fasta")
    assert [(r.name, r.sequence) for r in recs] == [("1abc_A", "MKTAYIAKQR")]
    skips = [m for c, m in caught if "skipping" in m]
    assert len(skips) == 1 and "record '1xyz_B'" in skips[0] and "'mol:na' in the header" in skips[0]
    assert ":3:" in skips[0]  # the header line of the skipped record


@pytest.mark.parametrize(
    "text, kept, skipped, why",
    [
        (">p mol:protein\nMKV\n>d mol:na\nACGT(DA)GG05\n", ["p"], ["d"], "'mol:na'"),  # tokens, digits
        (">p mol:protein\nMKV\n>r mol:rna\nACGU\n", ["p"], ["r"], "'mol:rna'"),  # short: content alone would not tell
        (
            ">A|protein\nMKV\n>B|dna\nACGT\n>C|smiles\nCC(=O)Oc1ccccc1C(=O)O\n",
            ["A_protein"],
            ["B_dna", "C_smiles"],
            "'|",
        ),
        (">p\nMKV\n>n\nacgtacgtacgtac\n", ["p"], ["n"], "only ACGTUN letters"),  # lower-case DNA, no tag
        (">x mol:other\nC1CCCCC1\n>p\nMKV\n", ["p"], ["x"], "'mol:other'"),
    ],
)
def test_non_protein_records_skipped_by_kind(text, kept, skipped, why):
    recs, caught = _caught(parse_fasta_string, text, label="in.fasta")
    assert [r.name for r in recs] == kept
    skips = [m for c, m in caught if "skipping" in m]
    assert [re.search(r"record '([^']+)'", m).group(1) for m in skips] == skipped
    assert all(why in m for m in skips)


def test_protein_tag_wins_over_nucleic_looking_content_and_bad_protein_gets_hint():
    (rec,) = parse_fasta_string(">p mol:protein\nACGTACGTACGTAA\n")
    assert rec.sequence == "ACGTACGTACGTAA"  # a real (if odd) protein: the header says so
    with pytest.raises(
        InputError,
        match=r"invalid character '\(' .* looks like a nucleic acid: tag the header "
        r"with mol:na",
    ) as exc:
        parse_fasta_string(">d\nACGTACGT(DA)ACGT\n", label="in.fasta")
    assert (exc.value.line, exc.value.column, exc.value.record) == (2, 9, "d")


def test_all_non_protein_file_and_skip_disabled_are_errors_naming_the_kind():
    with pytest.raises(InputError, match=r"no protein FASTA records \(all 2 records are nucleic-acid or other"):
        _caught(parse_fasta_string, ">a mol:na\nACGT\n>b|smiles\nCCO\n", label="x.fasta")
    with pytest.raises(
        InputError,
        match=r"record '1xyz_B': nucleic-acid record \('mol:na' in the header\) in a "
        r"protein-only input",
    ):
        parse_fasta(CASES / "seqres-with-nucleic.fasta", skip_nucleic=False)


# -- FASTA: what was changed or guessed -----------------------------------------------------------
def test_x_positions_are_listed_as_ranges():
    (rec,), caught = _caught(parse_fasta, CASES / "query-with-X.fasta")
    (msg,) = [m for c, m in caught if "unknown residue" in m]
    assert "positions 1, 31-32 (3 of 76)" in msg and "backbone atoms N, CA, C, O" in msg
    (one,), caught = _caught(parse_fasta_string, ">a\nMKVLX\n")
    assert any("at position 5 (1 of 5)" in m for _, m in caught)
    _, caught = _caught(parse_fasta_string, ">a\nMKVL\n")
    assert not any("unknown residue" in m for _, m in caught)


@pytest.mark.parametrize(
    "text, sequence", [(">a\nMKLV*\n", "MKLV"), (">a\nMK\nLV*\n", "MKLV"), (">a\nmklv*\n", "MKLV")]
)
def test_one_trailing_stop_removed_with_a_note(text, sequence):
    (rec,), caught = _caught(parse_fasta_string, text)
    assert rec.sequence == sequence
    assert [(c, m) for c, m in caught if "'*'" in m] == [
        (InputNote, "<string>:1: record 'a': one trailing '*' (stop) removed")
    ]
    with pytest.raises(InputError, match=r"'\*' \(stop\) inside"):
        parse_fasta_string(">a\nMKLV**\n")
    with pytest.raises(InputError, match="empty record: only a"):
        parse_fasta_string(">a\n*\n")


def test_nonstandard_letters_replaced_with_one_note_per_record(tmp_path):
    """J/B/Z/U/O: read as X, X, X, C, K, one note per record naming the file, the record and the letters;
    the same reading for an .a3m input's query, and an MSA whose first row keeps the J still matches."""
    from alphafold_mem.data.msa import query_problem
    from alphafold_mem.predict.targets import collect_targets

    fasta = tmp_path / "j.fasta"
    fasta.write_text(">a\nMKJLV\n>b\nMKLV\n>c\nUBZOK\n")
    records, caught = _caught(parse_fasta, fasta)
    assert [r.sequence for r in records] == ["MKXLV", "MKLV", "CXXKK"]
    assert caught == [
        (InputNote, f"{fasta}:1: record 'a': non-standard residues replaced: J3->X"),
        (InputNote, f"{fasta}:5: record 'c': non-standard residues replaced: U1->C, B2->X, Z3->X, O4->K"),
    ]
    assert query_problem("MKJLV", "MKXLV") is None and query_problem("MKJLV", "MKALV") is not None

    a3m = tmp_path / "q.a3m"
    a3m.write_text(">q\nMKJLV\n>hit\nMKILV\n")
    lines = []
    (target,), rejected = collect_targets(a3m, log=lines.append)
    assert target.sequence == "MKXLV" and not rejected
    assert lines == [f"note: {a3m}:1: record 'q': non-standard residues replaced: J3->X"]
    lines.clear()
    single = tmp_path / "one.fasta"
    single.write_text(">a\nMKJLV\n")
    (target,), rejected = collect_targets(single, msa=a3m, log=lines.append)
    assert not rejected and target.msa_depth == 2, lines  # the J row is the query, the hit one more
    features, caught = _caught(make_msa_features, target.sequence, [parse_msa_file(a3m)])
    assert features["msa"].shape[0] == 2 and caught == []  # no third row, no 'query differs' warning


# -- ':' complex syntax ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "seq, chain, total, column", [("MK::LV", 2, 3, 4), (":MKLV", 1, 2, 1), ("MKLV:", 2, 2, 5), ("MK:LV::", 3, 4, 7)]
)
def test_empty_chains_rejected_naming_record_and_chain(seq, chain, total, column):
    with pytest.raises(
        InputError, match=rf"record 'c': empty chain {chain} of {total} in the ':' complex syntax"
    ) as exc:
        parse_fasta_string(f">c\n{seq}\n", label="in.fasta", allow_chain_breaks=True)
    assert (exc.value.line, exc.value.column) == (2, column)
    # without chain breaks (the monomer pipeline) the same input says both things in one line
    with pytest.raises(
        InputError,
        match=rf"not supported by the monomer pipeline.*chain {chain} of {total} is also "
        "empty",
    ):
        parse_fasta_string(f">c\n{seq}\n", label="in.fasta")
    with pytest.raises(InputError, match=rf"record 'query': ':' chain separator .*chain {chain} of {total} is empty"):
        make_features(seq)  # the Python API says the same
    (ok,) = parse_fasta_string(">c\nMK:LV\n", allow_chain_breaks=True)
    assert ok.sequence == "MK:LV"


# -- mmCIF without _entity / label_seq_id ---------------------------------------------------------
_HEADER = [
    "group_PDB",
    "id",
    "type_symbol",
    "label_atom_id",
    "label_alt_id",
    "label_comp_id",
    "label_asym_id",
    "label_entity_id",
    "label_seq_id",
    "pdbx_PDB_ins_code",
    "Cartn_x",
    "Cartn_y",
    "Cartn_z",
    "occupancy",
    "B_iso_or_equiv",
    "auth_seq_id",
    "auth_comp_id",
    "auth_asym_id",
    "auth_atom_id",
    "pdbx_PDB_model_num",
]


def _cif(residues, *, seq_id=".", entity=".", drop_columns=(), extra="", group="ATOM"):
    """A minimal mmCIF: ``residues`` = [(chain, author number, insertion code, comp)], each with N, CA, C, O
    (waters: one O) 3.8 Å apart along x; ``seq_id="auto"``: label_seq_id = position in the list."""
    cols = [c for c in _HEADER if c not in drop_columns]
    lines = ["data_test", "#", extra, "loop_"] + [f"_atom_site.{c}" for c in cols]
    k = 0
    for r, (chain, num, ins, comp) in enumerate(residues):
        atoms = ["O"] if comp == "HOH" else ["N", "CA", "C", "O"]
        for a, atom in enumerate(atoms):
            k += 1
            row = {
                "group_PDB": "HETATM" if comp in ("HOH", "MSE") else group,
                "id": k,
                "type_symbol": atom[0],
                "label_atom_id": atom,
                "label_alt_id": ".",
                "label_comp_id": comp,
                "label_asym_id": chain,
                "label_entity_id": entity,
                "label_seq_id": r + 1 if seq_id == "auto" else seq_id,
                "pdbx_PDB_ins_code": ins or "?",
                "Cartn_x": f"{3.8 * r + 0.5 * a:.3f}",
                "Cartn_y": "0.000",
                "Cartn_z": f"{0.3 * a:.3f}",
                "occupancy": "1.00",
                "B_iso_or_equiv": "20.00",
                "auth_seq_id": num,
                "auth_comp_id": comp,
                "auth_asym_id": chain,
                "auth_atom_id": atom,
                "pdbx_PDB_model_num": 1,
            }
            lines.append(" ".join(str(row[c]) for c in cols))
    return "\n".join(lines + ["#", ""])


def _read(tmp_path, text, name="t.cif"):
    path = tmp_path / name
    path.write_text(text)
    return _caught(read_structure, path)


def test_shared_case_read_from_atom_site_with_warning():
    s, caught = _caught(read_structure, CASES / "mmcif-no-entity-records.cif")
    (chain,) = s.chains.values()
    assert (chain.chain_id, chain.sequence, chain.num_resolved) == ("A", "MKG", 3)
    assert chain.atom37_mask[:, [rc.atom_order[a] for a in ("N", "CA", "C", "O")]].all()
    (msg,) = [m for _, m in caught if "label_seq_id" in m]
    assert "record 'A'" in msg and "residues missing from the model cannot be detected" in msg


@pytest.mark.parametrize(
    "variant",
    ["question_marks", "no_label_columns", "insertion_codes", "ligand_and_water", "two_chains", "entity_poly_present"],
)
def test_atom_site_fallback_variants(tmp_path, variant):
    res = [("A", 10, "", "MET"), ("A", 11, "", "LYS"), ("A", 12, "", "GLY")]
    kw, expect = {}, {"A": "MKG"}
    if variant == "question_marks":
        kw = {"seq_id": "?", "entity": "?"}
    elif variant == "no_label_columns":
        kw = {"drop_columns": ("label_seq_id", "label_entity_id", "label_asym_id", "label_alt_id")}
    elif variant == "insertion_codes":  # 52, 52A, 52B, 53: four residues, in file order
        res = [("A", 52, "", "MET"), ("A", 52, "A", "LYS"), ("A", 52, "B", "SER"), ("A", 53, "", "GLY")]
        expect = {"A": "MKSG"}
    elif variant == "ligand_and_water":  # a lone HETATM amino acid (ligand) and waters are not chains
        res = res + [("A", 101, "", "HOH"), ("B", 1, "", "MSE"), ("W", 1, "", "HOH")]
    elif variant == "two_chains":
        res = res + [("B", 1, "", "ALA"), ("B", 2, "", "TRP")]
        expect = {"A": "MKG", "B": "AW"}
    elif variant == "entity_poly_present":  # _entity_poly says protein, but no label_seq_id
        kw = {
            "entity": "1",
            "extra": "_entity_poly.entity_id 1\n_entity_poly.type 'polypeptide(L)'\n_entity_poly.pdbx_strand_id A\n#",
        }
        res = res + [("A", 101, "", "HOH")]
    s, caught = _read(tmp_path, _cif(res, **kw))
    assert {c: ch.sequence for c, ch in s.chains.items()} == expect
    assert all(ch.num_resolved == len(ch.sequence) for ch in s.chains.values())
    assert sum("label_seq_id" in m for _, m in caught) == len(expect)


def test_atom_site_fallback_warns_about_numbering_gaps_and_refuses_unnumbered(tmp_path):
    res = [("A", 1, "", "MET"), ("A", 2, "", "LYS"), ("A", 7, "", "GLY"), ("A", 8, "", "ALA")]
    s, caught = _read(tmp_path, _cif(res))
    assert s.chains["A"].sequence == "MKGA"
    assert any("author numbering jumps 1 time(s) (first 2 -> 7)" in m for _, m in caught)
    with pytest.raises(InputError, match="no label_seq_id and no auth_seq_id"):
        _read(tmp_path, _cif(res).replace(" 1 MET A", " ? MET A"), "u.cif")


def test_protein_chain_without_atoms_is_listed_as_dropped(tmp_path):
    extra = (
        "_entity_poly.entity_id 1\n_entity_poly.type 'polypeptide(L)'\n_entity_poly.pdbx_strand_id A,B\n#\n"
        "loop_\n_entity_poly_seq.entity_id\n_entity_poly_seq.num\n_entity_poly_seq.mon_id\n"
        "1 1 MET\n1 2 LYS\n1 3 GLY\n#"
    )
    text = _cif([("A", 1, "", "MET"), ("A", 2, "", "LYS"), ("A", 3, "", "GLY")], entity="1", extra=extra, seq_id="auto")
    s, _ = _read(tmp_path, text)
    assert list(s.chains) == ["A"] and s.dropped == (("B", "no modelled atoms"),)


def test_modified_residues_are_noted_per_chain(tmp_path):
    s, caught = _caught(read_structure, DATA / "mmcif" / "1a8o.cif")
    assert s.chains["A"].modified == (("MSE", "MET", 4),)
    assert [m for c, m in caught if c is InputNote] == [
        f"{DATA / 'mmcif' / '1a8o.cif'}: record 'A': modified residues mapped to their parents: MSE->MET (4)"
    ]
    s, caught = _caught(read_structure, DATA / "pdb" / "3htn.pdb")
    notes = [m for c, m in caught if "modified residues" in m]
    assert [re.search(r"record '(\w)'", m).group(1) for m in notes] == ["A", "B", "C"]
    # mapped by Biopython's extended table (SEP = phosphoserine; BP5 is mapped to ALA there)
    res = [("A", 1, "", "MET"), ("A", 2, "", "SEP"), ("A", 3, "", "SEP"), ("A", 4, "", "BP5"), ("A", 5, "", "UNK")]
    s, caught = _read(tmp_path, _cif(res))
    assert s.chains["A"].sequence == "MSSAX" and s.chains["A"].modified == (("SEP", "SER", 2), ("BP5", "ALA", 1))
    assert any("SEP->SER (2), BP5->ALA (1)" in m for c, m in caught if c is InputNote)
