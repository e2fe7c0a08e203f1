"""Complexes whose alignments are searched (``predict --msa-server`` / ``--db`` with ``--uniprot-db``):
a heteromer gets paired rows (the stand-in server's paired answer taken row by row; UniProt hits paired
by species), a homodimer asks the server or searches once for its one entity, and ``prepaired.a3m`` in
a chain folder is read as is (checks in one line).

The server is the stand-in of tests/test_msa_server.py on 127.0.0.1; the weights are tiny_multimer (random)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from alphafold_mem.data.complex import Complex, make_complex
from alphafold_mem.data.errors import InputError
from alphafold_mem.data.features.msa import msa_to_tokens
from alphafold_mem.data.multimer_features import complex_msa_features
from alphafold_mem.search import msa_server
from alphafold_mem.search.msa_server import MsaServerError, MsaServerOptions, fetch_server_pairs
from alphafold_mem.weights.checkpoints import save_checkpoint

from .test_msa_server import StandIn
from .test_predict_complex import _model, _run

A = "MKPVTLYDVAEYAGVSYQTVSRVVNQASHVSAKTREKVEAAMAELNYIPNR"  # 1LCD chain A
B = "GSHMKLLVEQRSTDEFGHIKWYACLLNPQRSTEAIKGLVDDMW"
AA = "ACDEFGHIKLMNPQRSTVWY"
ENV = "bfd.mgnify30.metaeuk30.smag30.a3m"


def _mutants(seq: str, n: int, seed: int, keep: float = 0.8) -> list[str]:
    rng = random.Random(seed)
    return ["".join(c if rng.random() < keep else rng.choice(AA) for c in seq) for _ in range(n)]


def _a3m(query: str, rows, tag: str) -> str:
    return f">101\n{query}\n" + "".join(f">{tag}{i}\n{r}\n" for i, r in enumerate(rows))


def _unpaired(seq: str, seed: int) -> dict:
    return {"uniref.a3m": _a3m(seq, _mutants(seq, 12, seed), "u"), ENV: _a3m(seq, _mutants(seq, 5, seed + 1), "e")}


A_PAIRED, B_PAIRED = _mutants(A, 7, 10), _mutants(B, 7, 11)
B_PAIRED[3] = "-" * len(B)  # greedy pairing: a chain without a hit in a pair is all gap
PAIR_A3M = (
    f">101\n{A}\n" + "".join(f">UniRef100_A{i}\t99\n{r}\n" for i, r in enumerate(A_PAIRED)) + "\x00"
    f">102\n{B}\n" + "".join(f">UniRef100_B{i}\t99\n{r}\n" for i, r in enumerate(B_PAIRED)) + "\x00"
)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("params") / "multimer.ckpt"
    save_checkpoint(_model(4), path)
    return path


@pytest.fixture
def no_waits(monkeypatch):
    monkeypatch.setattr(msa_server, "_sleep", lambda s: None)


def _posts(server) -> list:
    return [(path, form) for method, path, form in server.log if method == "POST"]


def _tokens(rows) -> np.ndarray:
    return msa_to_tokens(rows)


def test_server_heteromer_pairs_the_served_rows_and_reruns_from_the_cache(tmp_path, weights, no_waits, capsys):
    fasta = tmp_path / "ab.fasta"
    fasta.write_text(f">ab\n{A}:{B}\n")
    plans = {A: ["PENDING", "COMPLETE"], B: ["COMPLETE"], (A, B): ["RUNNING", "COMPLETE"]}
    server = StandIn(plans, {A: _unpaired(A, 1), B: _unpaired(B, 2), (A, B): {"pair.a3m": PAIR_A3M}})
    out = tmp_path / "out"
    try:
        argv = [fasta, "--out", out, "--weights", weights, "--msa-server", server.url, "--save-features"]
        assert _run(*argv) == 0, capsys.readouterr().err
        posts = _posts(server)
        assert sorted(p for p, _ in posts) == ["/ticket/msa", "/ticket/msa", "/ticket/pair"]
        pair_form = next(f for p, f in posts if p == "/ticket/pair")
        assert pair_form == {"q": [f">101\n{A}\n>102\n{B}\n"], "mode": ["pairgreedy"]}
        feats = dict(np.load(out / "ab" / "ab_features.npz"))
        assert int(feats["num_paired_rows"]) == 1 + len(A_PAIRED)  # the query row, then the server's pairs
        paired = feats["msa"][: 1 + len(A_PAIRED)]
        np.testing.assert_array_equal(paired[:, : len(A)], _tokens([A, *A_PAIRED]))
        np.testing.assert_array_equal(paired[:, len(A) :], _tokens([B, *B_PAIRED]))
        assert feats["msa"].shape[0] > 1 + len(A_PAIRED) + 12  # the unpaired blocks follow
        folder = out / "ab" / "msas" / "ab_A"
        assert sorted(p.name for p in folder.iterdir()) == sorted([ENV, "prepaired.a3m", "uniref.a3m"])
        # a rerun asks nothing: the unpaired and paired answers are cached under <out>/msa_server
        n = len(server.log)
        assert _run(*argv) == 0, capsys.readouterr().err
        assert len(server.log) == n
        np.testing.assert_array_equal(np.load(out / "ab" / "ab_features.npz")["msa"], feats["msa"])
    finally:
        server.close()


def test_server_homodimer_asks_once_and_pairs_nothing(tmp_path, weights, no_waits, capsys):
    fasta = tmp_path / "aa.fasta"
    fasta.write_text(f">aa\n{A}:{A}\n")
    server = StandIn({A: ["COMPLETE"]}, {A: _unpaired(A, 1)})
    out = tmp_path / "out"
    try:
        assert _run(fasta, "--out", out, "--weights", weights, "--msa-server", server.url, "--save-features") == 0
    finally:
        server.close()
    assert [p for p, _ in _posts(server)] == ["/ticket/msa"], capsys.readouterr().err
    feats = np.load(out / "aa" / "aa_features.npz")
    assert int(feats["num_paired_rows"]) == 1 and feats["msa"].shape[0] > 12
    assert [p.name for p in (out / "aa" / "msas").iterdir()] == ["aa_A"]


def test_a_failed_paired_ticket_fails_its_complex_in_one_line(tmp_path, weights, no_waits, capsys):
    fasta = tmp_path / "ab.fasta"
    fasta.write_text(f">ab\n{A}:{B}\n")
    server = StandIn({A: ["COMPLETE"], B: ["COMPLETE"], (A, B): ["ERROR"]}, {A: _unpaired(A, 1), B: _unpaired(B, 2)})
    try:
        assert _run(fasta, "--out", tmp_path / "out", "--weights", weights, "--msa-server", server.url) == 1
    finally:
        server.close()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "complex 'ab': MSA server:" in errors[0] and "answered ERROR" in errors[0], errors


def _db(path, records) -> None:
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in records))


def test_local_search_heteromer_pairs_uniprot_hits_and_homodimer_searches_once(tmp_path, weights, capsys):
    pytest.importorskip("pyhmmer")
    db = tmp_path / "uniref90.fasta"
    noise = ["".join(random.Random(k).choice(AA) for _ in range(60)) for k in range(20)]
    homologues = [(f"UniRef90_a{i}", s) for i, s in enumerate(_mutants(A, 8, 3))]
    _db(db, homologues + [(f"n{k}", s) for k, s in enumerate(noise)])
    uniprot = tmp_path / "uniprot.fasta"  # species SPC0..SPC4 have a homologue of both chains
    records = [(f"tr|Q{i:05d}A|QA{i}_SPC{i} A homologue", s) for i, s in enumerate(_mutants(A, 5, 4, 0.85))]
    records += [(f"tr|Q{i:05d}B|QB{i}_SPC{i} B homologue", s) for i, s in enumerate(_mutants(B, 5, 5, 0.85))]
    _db(uniprot, records + [(f"sp|N{k:05d}|N{k}_OTHER", s) for k, s in enumerate(noise)])
    fasta = tmp_path / "ab.fasta"
    fasta.write_text(f">ab\n{A}:{B}\n>aa\n{A}:{A}\n")
    out = tmp_path / "out"
    argv = [fasta, "--out", out, "--weights", weights, "--db", db, "--uniprot-db", uniprot, "--save-features"]
    assert _run(*argv, "--no-progress") == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    feats = np.load(out / "ab" / "ab_features.npz")
    assert int(feats["num_paired_rows"]) > 1, err  # UniProt hits paired by species
    assert (out / "ab" / "msas" / "ab_B" / "uniprot_hits.sto").is_file()
    # the homodimer: one search for its one entity, no pairing search
    assert [p.name for p in (out / "aa" / "msas").iterdir()] == ["aa_A"]
    assert err.count("search: aa_A vs uniref90:") == 1 and "aa_A vs uniprot" not in err, err
    assert int(np.load(out / "aa" / "aa_features.npz")["num_paired_rows"]) == 1
    assert _run(*argv, "--no-progress") == 0  # a rerun reuses every search
    err = capsys.readouterr().err
    assert err.count("reusing") == 5 and "rows (query included)" not in err, err  # 2 + 2 (pairing) + 1


def _cx() -> Complex:
    return make_complex([("A", A), ("B", B)], name="cx")


def test_prepaired_folders_are_read_as_is_and_checked(tmp_path):
    cx = _cx()
    for chain, seq, rows in (("A", A, A_PAIRED), ("B", B, B_PAIRED)):
        (tmp_path / f"cx_{chain}").mkdir()
        (tmp_path / f"cx_{chain}" / "prepaired.a3m").write_text(_a3m(seq, rows, chain))
    feats = complex_msa_features(cx, tmp_path)
    assert int(feats["num_paired_rows"]) == 1 + len(A_PAIRED)
    np.testing.assert_array_equal(feats["msa"][:, : len(A)], _tokens([A, *A_PAIRED]))
    (tmp_path / "cx_B" / "prepaired.a3m").write_text(_a3m(B, B_PAIRED[:-1], "B"))
    with pytest.raises(InputError, match="as many rows each"):
        complex_msa_features(cx, tmp_path)
    (tmp_path / "cx_B" / "prepaired.a3m").unlink()
    (tmp_path / "cx_B" / "uniref90_hits.a3m").write_text(_a3m(B, B_PAIRED, "B"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError, match="chain.s. B have no prepaired.a3m"):
            complex_msa_features(cx, tmp_path)


def test_search_option_conflicts_are_one_line(tmp_path, capsys, monkeypatch):
    fasta = tmp_path / "ab.fasta"
    fasta.write_text(f">ab\n{A}:{B}\n")
    mono = tmp_path / "a.fasta"
    mono.write_text(f">a\n{A}\n")
    url, out = "http://127.0.0.1:9", tmp_path / "out"
    cases = [
        ([fasta, "--msa-server", url, "--msa-dir", tmp_path], "without --msa-dir"),
        ([fasta, "--msa-server", url, "--msa-dir", tmp_path, "--dap", "2"], "without --msa-dir"),  # no search first
        ([fasta, "--uniprot-db", fasta], "give --db FASTA as well"),
        ([fasta, "--msa-server", url, "--db", fasta], "--msa-server or --db (not both)"),
        ([mono, "--db", fasta, "--uniprot-db", fasta], "a monomer is not paired"),
    ]
    for argv, said in cases:
        assert _run(*argv, "--out", out) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and said in err[0], (argv, err)
    assert not (out / "ab").exists()
    # --dap searches in its launcher, before the ranks (tests/test_complex_dap_search.py); under torchrun,
    # which has no such launcher, it does not search
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert _run(fasta, "--msa-server", url, "--dap", "2", "--out", out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "under torchrun --dap does not search" in err[0], err


def test_paired_mode_client_complete_strategy_and_bad_blocks(tmp_path, no_waits):
    uneven = PAIR_A3M.replace(f">UniRef100_B6\t99\n{B_PAIRED[6]}\n", "")
    plans = {(A, B): ["COMPLETE", "COMPLETE"], (B, A): ["COMPLETE"]}
    server = StandIn(plans, {(A, B): {"pair.a3m": PAIR_A3M}, (B, A): {}})
    try:
        options = MsaServerOptions(server.url, pairing="complete")
        files = fetch_server_pairs("ab", [A, B], tmp_path, options, log=lambda _: None)
        assert _posts(server)[0][1]["mode"] == ["paircomplete"]
        assert [open(f).read() for f in files] == PAIR_A3M.split("\x00")[:2]
        server.results[(A, B)] = {"pair.a3m": uneven}
        with pytest.raises(MsaServerError, match="different numbers of rows"):
            fetch_server_pairs("ab", [A, B], tmp_path / "other", options, log=lambda _: None)
        assert not any((tmp_path / "other").iterdir())  # nothing cached
        server.results[(B, A)] = {"pair.a3m": PAIR_A3M.split("\x00")[0]}  # one block for two queries
        with pytest.raises(MsaServerError, match="no block for query 102"):
            fetch_server_pairs("ba", [B, A], tmp_path, options, log=lambda _: None)
    finally:
        server.close()
