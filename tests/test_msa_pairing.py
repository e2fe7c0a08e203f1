"""MSA pairing by species and merged multimer MSA features (issue 43, item 2), on the real 102M A and
1K1A A alignments of tests/data/complexes (MANIFEST.md there).

The expected pairs are recounted here straight from the a3m text (headers and rows), by AF2-Multimer's
rule, without the library's parsers."""

from __future__ import annotations

import gzip
import re
import shutil
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from alphafold_mem.data.complex import make_complex
from alphafold_mem.data.errors import InputError, InputNote, InputWarning
from alphafold_mem.data.msa import parse_a3m_string, parse_msa
from alphafold_mem.data.msa_pairing import PairingMsa, pair_rows, pairing_msa, species_id
from alphafold_mem.data.multimer_features import (
    EntityMsa,
    complex_msa_features,
    entity_msa,
    load_entity_msa,
    make_multimer_msa_features,
    pad_msa,
)

DATA = Path(__file__).parent / "data" / "complexes"
AA = "ARNDCQEGHILKMFPSTWYVX-"  # token order of the features (0-19, X 20, gap 21)


def _records(path: Path) -> list[tuple[str, str]]:
    """(header, aligned row without insertions) of an a3m, read by hand."""
    out, header, row = [], None, []
    for line in gzip.open(path, "rt").read().splitlines():
        if line.startswith(">"):
            if header is not None:
                out.append((header, "".join(row)))
            header, row = line[1:], []
        elif line.strip():
            row.append(re.sub("[a-z.]", "", line.strip()))
    out.append((header, "".join(row)))
    return out


def _taxid(header: str) -> str | None:
    m = re.match(r"UniRef100_\w+?_(\d+)/", header)
    return m.group(1) if m else None


def _unique_hits(path: Path) -> list[tuple[str, str]]:
    """Records after the query, exact repeats (and repeats of the query) dropped, first kept."""
    recs = _records(path)
    seen, out = {recs[0][1]}, []
    for header, row in recs[1:]:
        if row not in seen:
            seen.add(row)
            out.append((header, row))
    return out


def _decode(tokens: np.ndarray) -> str:
    return "".join(AA[t] for t in tokens)


@pytest.fixture(scope="module")
def heteromer():
    query_a = _records(DATA / "102m_A" / "pairing.a3m.gz")[0][1]
    query_b = _records(DATA / "1k1a_A" / "pairing.a3m.gz")[0][1]
    cx = make_complex([("A", query_a), ("B", query_b)], name="102m_1k1a")
    msas = {1: load_entity_msa(cx, 1, DATA / "102m_A"), 2: load_entity_msa(cx, 2, DATA / "1k1a_A")}
    return cx, msas


def test_paired_rows_pair_one_taxid_and_count_matches_af2_rule(heteromer):
    cx, msas = heteromer
    feats = make_multimer_msa_features(cx, msas)
    hits_a = _unique_hits(DATA / "102m_A" / "pairing.a3m.gz")
    hits_b = _unique_hits(DATA / "1k1a_A" / "pairing.a3m.gz")
    # AF2's rule, counted from the headers: species in both chains, at most 600 rows in each.
    count_a = Counter(t for t in (_taxid(h) for h, _ in hits_a) if t)
    count_b = Counter(t for t in (_taxid(h) for h, _ in hits_b) if t)
    expected = 1 + sum(min(count_a[t], count_b[t]) for t in count_a.keys() & count_b.keys())
    assert 100 < expected < 1024  # this pair: below the crop, so nothing is cropped
    assert int(feats["num_paired_rows"]) == expected

    taxids_a, taxids_b = defaultdict(set), defaultdict(set)
    for h, row in hits_a:
        taxids_a[row].add(_taxid(h))
    for h, row in hits_b:
        taxids_b[row].add(_taxid(h))
    la = len(cx.chains[0])
    msa = feats["msa"]
    assert _decode(msa[0]) == cx.chains[0].sequence + cx.chains[1].sequence
    for r in range(1, expected):
        seg_a, seg_b = _decode(msa[r, :la]), _decode(msa[r, la:])
        shared = (taxids_a[seg_a] & taxids_b[seg_b]) - {None}
        assert shared, f"paired row {r} joins taxids {taxids_a[seg_a]} and {taxids_b[seg_b]}"
    # The paired rows use each chain's hits once each, nothing else.
    assert len({_decode(msa[r, :la]) for r in range(1, expected)}) == expected - 1
    np.testing.assert_array_equal(feats["cluster_bias_mask"][:2], [1, 0])
    assert feats["cluster_bias_mask"].sum() == 1


def test_each_species_pairs_its_most_query_identical_rows(heteromer):
    cx, msas = heteromer
    feats = make_multimer_msa_features(cx, msas)
    p, la = int(feats["num_paired_rows"]), len(cx.chains[0])
    checked = 0
    for src, cols, query in (
        (DATA / "102m_A" / "pairing.a3m.gz", slice(0, la), cx.chains[0].sequence),
        (DATA / "1k1a_A" / "pairing.a3m.gz", slice(la, None), cx.chains[1].sequence),
    ):
        identity = {row: np.mean([a == b for a, b in zip(row, query)]) for _, row in _unique_hits(src)}
        by_taxid = defaultdict(list)
        for h, row in _unique_hits(src):
            if _taxid(h):
                by_taxid[_taxid(h)].append(identity[row])
        used = defaultdict(list)
        rows = {row: _taxid(h) for h, row in _unique_hits(src)}
        for r in range(1, p):
            row = _decode(feats["msa"][r, cols])
            used[rows[row]].append(identity[row])
        for taxid, values in used.items():
            best = sorted(by_taxid[taxid], reverse=True)[: len(values)]
            np.testing.assert_allclose(sorted(values, reverse=True), best, err_msg=f"taxid {taxid}")
            checked += len(values) < len(by_taxid[taxid])
    assert checked > 10  # species where some rows were left out


def test_unpaired_rows_are_block_diagonal_and_deduplicated(heteromer):
    cx, msas = heteromer
    feats = make_multimer_msa_features(cx, msas)
    p, la = int(feats["num_paired_rows"]), len(cx.chains[0])
    msa, bert = feats["msa"][p:], feats["bert_mask"][p:]
    in_a = (bert[:, :la] == 1).all(axis=1)
    in_b = (bert[:, la:] == 1).all(axis=1)
    assert (in_a ^ in_b).all() and (bert[:, :la].any(axis=1) == in_a).all()
    assert (msa[in_a][:, la:] == 21).all() and (msa[in_b][:, :la] == 21).all()
    assert in_a[: in_a.sum()].all()  # chain A's block, then chain B's
    paired_a = {_decode(r) for r in feats["msa"][:p, :la]}
    rows_a = [_decode(r) for r in msa[in_a][:, :la]]
    assert not paired_a & set(rows_a)
    # Chain A's unpaired rows: its non_pairing.a3m rows, minus those in the paired block, in file order.
    expected_a = [row for row in dict.fromkeys(r for _, r in _records(DATA / "102m_A" / "non_pairing.a3m.gz"))]
    assert rows_a == [row for row in expected_a if row not in paired_a]
    for key in ("asym_id", "entity_id", "sym_id"):
        np.testing.assert_array_equal(feats[key], np.repeat([1, 2] if key != "sym_id" else [1, 1], cx.lengths))
    np.testing.assert_array_equal(feats["residue_index"], np.concatenate([np.arange(n) for n in cx.lengths]))
    assert feats["msa"].shape == feats["deletion_matrix"].shape == feats["msa_mask"].shape


def test_msa_crop_follows_af2(heteromer):
    cx, msas = heteromer
    crop = 64
    full = make_multimer_msa_features(cx, msas)
    feats = make_multimer_msa_features(cx, msas, msa_crop_size=crop)
    p = int(feats["num_paired_rows"])
    assert p == crop // 2
    np.testing.assert_array_equal(feats["msa"][:p], full["msa"][:p])
    la = len(cx.chains[0])
    unpaired = feats["bert_mask"][p:, 0] == 1
    # Every paired row has a residue in both chains, so each chain keeps crop - p unpaired rows.
    assert unpaired.sum() == crop - p and (~unpaired).sum() == crop - p
    assert feats["msa"].shape == (p + 2 * (crop - p), la + len(cx.chains[1]))


def test_stockholm_layout_pairs_the_same_species(heteromer, tmp_path):
    cx, msas = heteromer
    codes: dict[str, str] = {}

    def write_sto(src: Path, dst: Path):
        lines = ["# STOCKHOLM 1.0", ""]
        for k, (header, row) in enumerate(_records(src)):
            taxid = _taxid(header)
            if k == 0:
                name = "query"
            elif taxid is None:
                name = f"UniRef100_NOSPECIES{k}"
            else:
                code = codes.setdefault(taxid, f"S{len(codes):04d}")  # one UniProt species code per taxid
                name = f"tr|ACC{k:05d}|ACC{k:05d}_{code}/1-{len(row)}"
            lines.append(f"{name} {row}")
        dst.mkdir()
        (dst / "uniprot_hits.sto").write_text("\n".join(lines + ["//", ""]))
        shutil.copy(src.parent / "non_pairing.a3m.gz", dst / "non_pairing.a3m.gz")

    write_sto(DATA / "102m_A" / "pairing.a3m.gz", tmp_path / "a")
    write_sto(DATA / "1k1a_A" / "pairing.a3m.gz", tmp_path / "b")
    sto = {1: load_entity_msa(cx, 1, tmp_path / "a"), 2: load_entity_msa(cx, 2, tmp_path / "b")}
    assert species_id("tr|ACC00001|ACC00001_S0001/1-154") == "uniprot:S0001"
    from_sto = make_multimer_msa_features(cx, sto)
    from_a3m = make_multimer_msa_features(cx, msas)
    p = int(from_a3m["num_paired_rows"])
    assert int(from_sto["num_paired_rows"]) == p
    np.testing.assert_array_equal(from_sto["msa"][:p], from_a3m["msa"][:p])


def test_homodimer_has_no_pairs_and_both_chains_see_one_msa(heteromer):
    cx_het, msas = heteromer
    seq = cx_het.chains[0].sequence
    cx = make_complex([("A", seq), ("B", seq)])
    feats = make_multimer_msa_features(cx, {1: msas[1]})
    n = len(seq)
    assert int(feats["num_paired_rows"]) == 1
    np.testing.assert_array_equal(feats["msa"][:, :n], feats["msa"][:, n:])
    np.testing.assert_array_equal(feats["msa"][:, :n], msas[1].msa)  # the entity's unpaired MSA, query first
    np.testing.assert_array_equal(feats["sym_id"], np.repeat([1, 2], n))
    assert feats["cluster_bias_mask"][0] == 1 and feats["cluster_bias_mask"].sum() == 1


def test_copies_of_an_entity_share_columns_in_a_heteromer(heteromer):
    cx_het, msas = heteromer
    a, b = cx_het.chains[0].sequence, cx_het.chains[1].sequence
    cx = make_complex([("A", a), ("B", b), ("C", a)])  # A2B, the copies not adjacent
    feats = make_multimer_msa_features(cx, msas)
    la, lb = len(a), len(b)
    np.testing.assert_array_equal(feats["msa"][:, :la], feats["msa"][:, la + lb :])
    np.testing.assert_array_equal(feats["sym_id"], np.repeat([1, 1, 2], [la, lb, la]))
    # Three chains: pairs spanning all three come first (A's species are in both copies).
    assert int(feats["num_paired_rows"]) > int(make_multimer_msa_features(cx_het, msas)["num_paired_rows"])


def _a3m(query: str, rows: list[tuple[str, str]]) -> str:
    return f">query\n{query}\n" + "".join(f">{h}\n{r}\n" for h, r in rows)


def test_species_over_600_hits_or_in_one_chain_stay_unpaired():
    qa, qb = "MKVLAAGIHW", "GSHMDKKETK"

    def variants(q, n, taxid, start):
        out = []
        for k in range(start, start + n):
            row = list(q)  # a distinct row per k (< 8000), never the query (X at position 4)
            row[3], row[7], row[8], row[9] = "X", AA[k % 20], AA[(k // 20) % 20], AA[(k // 400) % 20]
            out.append((f"UniRef100_X{k}_{taxid}/", "".join(row)))
        return out

    def count(n_big):
        rows_a = variants(qa, n_big, 7, 0) + variants(qa, 2, 8, 5000) + variants(qa, 3, 9, 6000)
        rows_b = variants(qb, 1, 7, 0) + variants(qb, 5, 8, 5000)
        chains = [
            pairing_msa(qa, parse_a3m_string(_a3m(qa, rows_a))),
            pairing_msa(qb, parse_a3m_string(_a3m(qb, rows_b))),
        ]
        assert chains[0].species.count("ncbi:7") == n_big
        return pair_rows(chains)

    rows = count(600)
    assert len(rows) == 1 + 1 + 2  # taxid 7: min(600, 1); taxid 8: min(2, 5); taxid 9: only chain A
    assert len(count(601)) == 1 + 2  # taxid 7 has more than 600 hits in chain A


def test_pairing_a3m_without_taxids_gives_no_pairs_and_one_note(heteromer):
    cx, _ = heteromer
    qa = cx.chains[0].sequence
    text = _a3m(qa, [(f"hit{k}", qa[:k] + "-" + qa[k + 1 :]) for k in range(5)])
    msa = parse_a3m_string(text, label="nospecies/pairing.a3m")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ems = {1: entity_msa(cx, 1, [], msa), 2: entity_msa(cx, 2, [], None)}
    notes = [str(w.message) for w in caught if issubclass(w.category, InputNote)]
    assert len(notes) == 1 and notes[0].startswith("nospecies/pairing.a3m") and "species" in notes[0]
    assert int(make_multimer_msa_features(cx, ems)["num_paired_rows"]) == 1


def test_alignment_of_another_chain_is_one_line_naming_both_chains(heteromer):
    cx, _ = heteromer
    with pytest.raises(InputError) as err:
        load_entity_msa(cx, 1, DATA / "1k1a_A")  # chain A given chain B's folder
    message = str(err.value)
    assert "\n" not in message and "1k1a_A" in message
    assert "query is the sequence of chain B, not of chain A" in message


def test_pairing_cost_stays_small(heteromer):
    cx, msas = heteromer
    assert len(msas[2].pairing.species) > 1000  # 1K1A: 1024 records
    start = time.process_time()
    for _ in range(5):
        make_multimer_msa_features(cx, msas)
    per_call = (time.process_time() - start) / 5
    assert per_call < 0.5, f"pairing and merging took {per_call:.3f} s CPU"


def test_complex_msa_features_finds_folders_by_chain_and_pads_as_af2(heteromer, tmp_path):
    cx_het, msas = heteromer
    cx = make_complex([("A", cx_het.chains[0].sequence), ("B", cx_het.chains[1].sequence)], name="het")
    shutil.copytree(DATA / "102m_A", tmp_path / "het_A")
    shutil.copytree(DATA / "1k1a_A", tmp_path / "2")  # Protenix layout: one folder per entity number
    feats = complex_msa_features(cx, tmp_path)
    np.testing.assert_array_equal(feats["msa"], make_multimer_msa_features(cx_het, msas)["msa"])
    with pytest.warns(InputWarning, match="no alignment folder for chain"):
        alone = complex_msa_features(cx, tmp_path / "missing")
    # The paired query row alone: the unpaired blocks (each chain's query) repeat it and are dropped.
    assert int(alone["num_paired_rows"]) == 1 and alone["msa"].shape[0] == 1
    padded = pad_msa(alone, 8)
    assert padded["msa"].shape == (8, cx.num_res) and not padded["msa_mask"][1:].any()
    assert padded["msa_mask"][0].all() and padded["cluster_bias_mask"].shape == (8,)
    assert int(padded["num_alignments"]) == 1


PARITY_MERGED = Path(__file__).parent / "data" / "parity_multimer" / "msa_merged.npz"


def test_merge_reproduces_the_multimer_parity_msa_layout():
    """The A-B-A' complex of the multimer parity vectors (shared/parity_multimer, OpenFold-made): its merged
    MSA rebuilt from per-entity rows, each paired row a species of its own."""
    ref = np.load(PARITY_MERGED)
    msa, dels = ref["msa"], ref["deletion_matrix"]
    (p0, p1), (a0, a1), (b0, b1) = ref["row_blocks"]
    cols_a, cols_b = slice(0, 23), slice(23, 40)
    tokens = "ARNDCQEGHILKMFPSTWYVX"
    seq_a, seq_b = ("".join(tokens[t] for t in msa[0, c]) for c in (cols_a, cols_b))
    cx = make_complex([("A", seq_a), ("B", seq_b), ("C", seq_a)])

    def entity(cols, unpaired_rows):
        paired = [r for r in range(p0, p1) if (msa[r, cols] != 21).any()]
        species = ("",) + tuple(f"ncbi:{r}" for r in paired[1:])
        pairing = PairingMsa(msa[paired][:, cols], dels[paired][:, cols], species)
        rows = [0, *range(*unpaired_rows)]
        return EntityMsa(msa[rows][:, cols], dels[rows][:, cols], pairing)

    feats = make_multimer_msa_features(cx, {1: entity(cols_a, (a0, a1)), 2: entity(cols_b, (b0, b1))})
    assert int(feats["num_paired_rows"]) == p1 - p0
    for key in ("msa", "deletion_matrix", "msa_mask", "cluster_bias_mask"):
        np.testing.assert_array_equal(feats[key], ref[key], err_msg=key)


def test_af2_stockholm_species_and_mixed_layouts_warn(heteromer, tmp_path):
    sto = DATA / "2q2k_A" / "uniprot_hits.sto"
    msa = parse_msa(sto)
    chain = pairing_msa(msa.query, msa)
    # AF2's rule: the UniProt species code after the entry name's "_" (the 20 hits hold 3 unique rows).
    assert chain.species == ("", "uniprot:9STAP", "uniprot:STAAU", "uniprot:9STAP")
    cx_het, msas = heteromer
    cx = make_complex([("A", cx_het.chains[0].sequence), ("B", msa.query)])
    with pytest.warns(
        InputWarning, match=r"name species in different ways \(chain\(s\) A: ncbi; chain\(s\) B: uniprot"
    ):
        feats = make_multimer_msa_features(cx, {1: msas[1], 2: entity_msa(cx, 2, [], msa)})
    assert int(feats["num_paired_rows"]) == 1
