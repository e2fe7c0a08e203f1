"""FASTA / A3M / Stockholm parsing on the real files in data/ plus small in-memory edge cases."""

import pathlib
import re
import warnings

import numpy as np
import pytest

from alphafold_mem.data import InputError, InputWarning, parse_fasta, parse_fasta_string, parse_msa
from alphafold_mem.data.msa import parse_a3m_string
from alphafold_mem.data.names import sanitize_name

DATA = pathlib.Path(__file__).parent.parent / "data"
AWK = DATA / "fasta" / "awkward"
LOCATED = re.compile(r"^\S+:\d+(:\d+)?: record '[^']+': ")  # file:line[:col]: record 'name': ...

SEQ_1LCD = "MKPVTLYDVAEYAGVSYQTVSRVVNQASHVSAKTREKVEAAMAELNYIPNR"


def _parse_quiet(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        return parse_fasta(path, **kw)


# ---------------------------------------------------------------------------------------------- FASTA


def test_per_entry_fasta_files():
    recs = parse_fasta(DATA / "fasta/per_entry/1lcd.fasta")
    assert [r.name for r in recs] == ["1lcd_A"] and recs[0].sequence == SEQ_1LCD and recs[0].line == 1
    two = parse_fasta(DATA / "fasta/per_entry/2q2k.fasta")
    assert [len(r) for r in two] == [70, 70] and two[1].line > two[0].line


def test_lowercase_is_upper_cased_with_notice():
    with pytest.warns(InputWarning, match="upper-cased"):
        (rec,) = parse_fasta(AWK / "lowercase_1k1a_A.fasta")
    assert rec.sequence.isupper() and len(rec) == 241
    with pytest.warns(InputWarning, match="upper-cased"):
        (mixed,) = parse_fasta(AWK / "mixed_case_102m_A.fasta")
    assert mixed.sequence == parse_fasta(DATA / "fasta/per_entry/102m.fasta")[0].sequence


def test_crlf_blank_lines_no_trailing_newline():
    crlf = parse_fasta(AWK / "crlf_windows_2q2k.fasta")
    assert [len(r) for r in crlf] == [70, 70] and all("\r" not in r.sequence for r in crlf)
    blank = parse_fasta(AWK / "blank_lines_whitespace.fasta")
    assert [(r.name, len(r), r.line) for r in blank] == [("1lcd_A", 51, 3), ("5eil_A", 159, 8), ("3u8v_A", 93, 15)]
    assert blank[0].sequence == SEQ_1LCD and blank[1].sequence[9] == "X"
    (rec,) = parse_fasta(AWK / "no_trailing_newline_1aki_A.fasta")
    assert len(rec) == 129
    (pep,) = parse_fasta(AWK / "colabfold_5AWL_1_peptide.fasta")
    assert len(pep) == 10


def test_header_sanitised_and_kept():
    (rec,) = parse_fasta(AWK / "long_header_721p_A.fasta")
    assert rec.name == "721p_A" and len(rec.description) > 1500
    (sp,) = parse_fasta(AWK / "colabfold_P54025.fasta")
    assert sp.name == "sp_P54025_RL41_METJA" and sp.description.startswith("sp|P54025|")
    assert sanitize_name("a/b\\c*?" + "x" * 100 + " rest", "f") == ("a_b_c__" + "x" * 100)[:64]
    assert sanitize_name("   ", "fallback") == "fallback"


def test_x_accepted_and_comment_lines():
    (rec,) = parse_fasta(AWK / "x_residue_5eil_A.fasta")
    assert rec.sequence[9] == "X"
    (blast,) = parse_fasta(AWK / "biopython_aster_blast.pro.fasta")  # '#', '!' and ';' comment lines
    assert len(blast) == 107 and blast.line == 2


def test_nucleic_records_skipped_with_warning():
    with pytest.warns(InputWarning, match="nucleic-acid") as rec:
        recs = parse_fasta(AWK / "protein_and_dna_7pzb.fasta")
    assert [r.name for r in recs] == ["7pzb_A", "7pzb_B"]
    assert sum("nucleic" in str(w.message) for w in rec) == 4
    with pytest.raises(InputError, match="nucleic"):
        parse_fasta(AWK / "protein_and_dna_7pzb.fasta", skip_nucleic=False)


@pytest.mark.parametrize(
    "name, line, column, pattern",
    [
        ("colabfold_colon_complex_7pzb.fasta", 2, 245, "chain separator"),
        ("header_without_sequence.fasta", 1, None, "empty record"),
        ("biopython_aster_pearson.pro.fasta", 1, 1, "text before the first FASTA header"),
    ],
)
def test_real_file_rejections_are_located(name, line, column, pattern):
    with pytest.raises(InputError, match=pattern) as exc:
        parse_fasta(AWK / name)
    err = exc.value
    assert err.file.endswith(name) and err.line == line and err.column == column
    assert str(err).startswith(f"{err.file}:{line}") and "\n" not in str(err)
    if name != "biopython_aster_pearson.pro.fasta":
        assert LOCATED.match(str(err)), str(err)


def test_empty_file_rejected():
    with pytest.raises(InputError, match="empty file") as exc:
        parse_fasta(AWK / "colabfold_empty.fasta")
    assert exc.value.file.endswith("colabfold_empty.fasta")
    with pytest.raises(InputError, match="file not found"):
        parse_fasta(DATA / "no_such_file.fasta")


@pytest.mark.parametrize(
    "text, line, column, pattern",
    [
        (">a\nMKV\n>b desc\nMK\nLV-AG\n", 5, 3, "gap character '-'"),
        (">a\nMK*LV\n", 2, 3, r"'\*' \(stop\) inside"),
        (">a\nMKLV\n>b\nMK1LV\n", 4, 3, "digit '1'"),
        (">a\nMK\tLV\n", 2, 3, "invalid character"),
        (">a\nMKLV\n>b\n\n>c\nMK\n", 3, None, "empty record"),
    ],
)
def test_string_rejections_name_file_record_position(text, line, column, pattern):
    with pytest.raises(InputError, match=pattern) as exc:
        parse_fasta_string(text, label="in.fasta")
    err = exc.value
    assert (err.line, err.column) == (line, column)
    assert LOCATED.match(str(err)) and str(err).startswith("in.fasta:")


def test_trailing_stop_stripped_and_rare_letters_mapped():
    (rec,) = parse_fasta_string(">a\nMKLV*\n")
    assert rec.sequence == "MKLV"
    with pytest.warns(InputWarning, match=r"U2->C, O3->K, B4->X, Z5->X, J6->X"):
        (rec,) = parse_fasta_string(">a\nMUOBZJ\n")
    assert rec.sequence == "MCKXXX"


def test_duplicate_names_made_unique():
    with pytest.warns(InputWarning, match="duplicate record name; renamed to 'x_2"):
        recs = parse_fasta_string(">x one\nMK\n>x two\nLV\n>x_2\nAA\n")
    assert [r.name for r in recs] == ["x", "x_2", "x_2_2"]
    assert recs[1].description == "x two"


# ---------------------------------------------------------------------------------------------- A3M


def test_real_a3m_and_stockholm():
    msa = parse_msa(DATA / "alignments/1lcd_A/jackhmmer_pool.a3m", query=SEQ_1LCD)
    assert msa.query == SEQ_1LCD and msa.length == 51 and 200 < msa.depth <= 256
    assert msa.deletion_matrix.shape == (msa.depth, 51) and msa.deletion_matrix.dtype == np.int32
    assert all(len(s) == 51 for s in msa.sequences)
    seq_2q2k = parse_fasta(DATA / "fasta/per_entry/2q2k.fasta")[0].sequence
    for f in sorted((DATA / "alignments/2q2k_A").iterdir()):
        m = parse_msa(f, query=seq_2q2k)
        assert m.length == 70 and m.query == seq_2q2k and len(set(m.sequences)) == m.depth
    sto = parse_msa(DATA / "alignments/2q2k_A/uniref90_hits.sto")
    assert sto.deletion_matrix.sum() == 4 and set("".join(sto.sequences)) <= set("ACDEFGHIKLMNPQRSTVWXY-")


def test_a3m_deletions_comments_wrapping_duplicates():
    text = "#A3M header line\n>q\nACDE\n>h1 wrapped\nAc\nDd-E\n>h2\nAC-E\n>h3 duplicate of h2\nAC-E\n>h4\nA..CDEfg\n"
    msa = parse_a3m_string(text, query="ACDE")
    # h3 duplicates h2 and h4 equals the query once insertions are removed: both dropped.
    assert msa.sequences == ("ACDE", "AD-E", "AC-E")
    np.testing.assert_array_equal(msa.deletion_matrix[1], [0, 1, 1, 0])


def test_a3m_rejections():
    with pytest.raises(InputError, match=r"non-printable byte 0x01") as exc:
        parse_a3m_string(">q\nACDE\n>h\nAC\x01E\n", label="m.a3m")
    assert (exc.value.line, exc.value.column) == (4, 3) and LOCATED.match(str(exc.value))
    with pytest.raises(
        InputError,
        match=r"2 problems: line 3 row 'h1': row 2 has 3 match columns, 1 fewer.*"
        r"line 7 row 'h3': row 4 has 5 match columns, 1 more",
    ) as exc:
        parse_a3m_string(">q\nACDE\n>h1\nACD\n>h2\nACDE\n>h3\nACDEF\n", label="m.a3m")
    assert exc.value.file == "m.a3m"
    with pytest.raises(InputError, match=r"differs from the query at position 3 \('X' in the MSA, 'D'"):
        parse_a3m_string(">q\nACXE\n>h\nAC-E\n", label="m.a3m", query="ACDE")


def test_empty_msa_gives_query_only(tmp_path):
    empty = tmp_path / "empty.a3m"
    empty.write_text("")
    with pytest.warns(InputWarning, match="using the query alone"):
        msa = parse_msa(empty, query="MKLV")
    assert msa.sequences == ("MKLV",) and msa.deletion_matrix.shape == (1, 4)
    with pytest.raises(InputError, match="unknown alignment format"):
        parse_msa(tmp_path / "x.txt")
