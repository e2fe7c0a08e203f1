"""Issue 16 through ``alphafold-mem predict``: every shared case (tests/data/cases) gives its
documented behaviour (one line naming file/record/position when something is rejected, the other
targets still run, exit status 1 iff a target failed); directory inputs list every file; finished
targets are skipped only when sequence, MSA, weights and options match; outputs carry no local
paths; a bad input feature never reaches the model."""

import importlib
import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest
import torch
from Bio.PDB import PDBParser

import alphafold_mem
from alphafold_mem.cli import main
from alphafold_mem.predict import PredictError
from alphafold_mem.predict.targets import collect_targets

from .predict_cli import prediction, ranked
from .test_inference import tiny_weights  # noqa: F401  (the module-scoped weights fixture)

CASES = pathlib.Path(__file__).parent / "data" / "cases"
CRAMBIN = "TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN"


def _cli(capsys, *argv):
    code = main(["predict", *map(str, argv), "--num-recycles", "0", "--no-track-memory"])
    return code, capsys.readouterr().err.splitlines()


def _one(lines, start, *parts):
    found = [line for line in lines if line.startswith(start) and all(p in line for p in parts)]
    assert len(found) == 1, (start, parts, lines)
    return found[0]


# -- the shared cases, one CLI run each ------------------------------------------------------------
def test_case_mmcif_without_entity_records(tmp_path, tiny_weights, capsys):
    code, lines = _cli(capsys, CASES / "mmcif-no-entity-records.cif", "--out", tmp_path, "--weights", tiny_weights)
    assert code == 0
    _one(
        lines,
        "warning: ",
        "mmcif-no-entity-records.cif: record 'A': no label_seq_id",
        "residues missing from the model cannot be detected",
    )
    pdb = PDBParser(QUIET=True).get_structure("m", ranked(tmp_path, "mmcif-no-entity-records_A"))
    assert [r.get_resname() for r in pdb.get_residues()] == ["MET", "LYS", "GLY"]


def test_case_seqres_with_nucleic(tmp_path, tiny_weights, capsys):
    code, lines = _cli(capsys, CASES / "seqres-with-nucleic.fasta", "--out", tmp_path, "--weights", tiny_weights)
    assert code == 0
    _one(lines, "warning: ", "seqres-with-nucleic.fasta:3: record '1xyz_B': skipping nucleic-acid record")
    assert not any(line.startswith("error:") for line in lines)
    assert prediction(tmp_path, "1abc_A", "_scores.json").is_file()


def test_case_directory_with_unusual_extensions(tmp_path, tiny_weights, capsys):
    code, lines = _cli(capsys, CASES / "dir-mixed-extensions", "--out", tmp_path, "--weights", tiny_weights)
    assert code == 0
    _one(lines, "note: ", "b.fasta.txt: no FASTA extension, but its content starts with a '>' header")
    _one(lines, "note: input directory ", "2 file(s) used (a.fas, b.fasta.txt), 0 ignored")
    assert ranked(tmp_path, "ubq").is_file() and ranked(tmp_path, "crambin").is_file()


def test_case_query_with_x(tmp_path, tiny_weights, capsys):
    code, lines = _cli(capsys, CASES / "query-with-X.fasta", "--out", tmp_path, "--weights", tiny_weights)
    assert code == 0
    _one(lines, "warning: ", "record 'ubq_x': unknown residue 'X' at positions 1, 31-32 (3 of 76)")
    residues = list(PDBParser(QUIET=True).get_structure("x", ranked(tmp_path, "ubq_x")).get_residues())
    for k in (0, 30, 31):  # first residue and an internal run: a backbone each, not a lone CA
        assert residues[k].get_resname() == "UNK" and [a.get_id() for a in residues[k]] == ["N", "CA", "C", "O"]
    c, n = residues[30]["C"].coord, residues[31]["N"].coord
    assert np.linalg.norm(c - n) < 4.0  # consecutive unknown residues stay chained


def test_case_a3m_upper_case_insertion_and_mismatch(tmp_path, tiny_weights, capsys):
    a3m = CASES / "a3m-uppercase-insertion-and-mismatch.a3m"
    code, lines = _cli(capsys, CASES / "crambin.fasta", "--msa", a3m, "--out", tmp_path, "--weights", tiny_weights)
    assert code == 1
    line = _one(lines, "error: ", f"{a3m}:1: 2 problems:")
    assert "position 5 ('S' in the MSA, 'P' in the query)" in line and "insertions written in upper case" in line
    # in a batch (--msa-dir), the target with the bad MSA fails and the other one still runs
    msas, fasta = tmp_path / "msas", tmp_path / "two.fasta"
    msas.mkdir()
    shutil.copy(a3m, msas / "query.a3m")
    (msas / "good.a3m").write_text(f">good\n{CRAMBIN[:20]}\n>hit\n{CRAMBIN[:10]}--{CRAMBIN[12:20]}\n")
    fasta.write_text(f">query\n{CRAMBIN}\n>good\n{CRAMBIN[:20]}\n")
    code, lines = _cli(capsys, fasta, "--msa-dir", msas, "--out", tmp_path / "out", "--weights", tiny_weights)
    assert code == 1 and len([line for line in lines if line.startswith("error:")]) == 1
    scores = json.loads(prediction(tmp_path / "out", "good", "_scores.json").read_text())
    assert scores["msa_depth"] == 2 and scores["msa_neff_80"] == 1.0  # 18 of 20 identical: one effective row


def test_case_a3m_query_only(tmp_path, tiny_weights, capsys):
    a3m = CASES / "a3m-query-only.a3m"
    argv = [CASES / "crambin.fasta", "--msa", a3m, "--weights", tiny_weights]
    code, lines = _cli(capsys, *argv, "--out", tmp_path / "a")
    assert code == 0
    _one(
        lines,
        "warning: ",
        "record 'query': the MSA (a3m-query-only.a3m) holds only the query (depth 1): this is single-sequence mode",
    )
    scores = json.loads(prediction(tmp_path / "a", "query", "_scores.json").read_text())
    assert (scores["msa_depth"], scores["msa_neff_80"], scores["msa_neff_80_exact"]) == (1, 1.0, True)
    code, lines = _cli(capsys, *argv, "--out", tmp_path / "b", "--min-msa-depth", "2")
    assert code == 1
    _one(lines, "error: ", "crambin.fasta:1: record 'query': MSA depth 1 (Neff 1.0) is below --min-msa-depth 2")
    assert not ranked(tmp_path / "b", "query").exists()


# -- directory inputs --------------------------------------------------------------------------------
def test_every_file_of_an_input_directory_is_used_or_listed(tmp_path):
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / "a.fasta").write_text(">a\nMKVL\n")
    (d / "b.fasta.txt").write_text("\n; a comment first\n>b\nMKVLA\n")
    (d / "c.seq.gz").write_bytes(__import__("gzip").compress(b">c\nMKVLAG\n"))
    shutil.copy(CASES / "mmcif-no-entity-records.cif", d / "m.cif")
    (d / "notes.txt").write_text("MKVL without a header\n")
    (d / "empty.txt").write_text("")
    (d / "blob.bin").write_bytes(b"\x00\x01>x")
    (d / ".DS_Store").write_bytes(b"\x00")
    (d / "x.a3m").write_text(">x\nMKV\n")
    lines = []
    targets, rejected = collect_targets(d, log=lines.append)
    assert [t.name for t in targets] == ["a", "b", "c", "m_A"] and rejected == []
    assert f"note: input directory {d}: 4 file(s) used (a.fasta, b.fasta.txt, c.seq.gz, m.cif), 6 ignored:" in lines
    prefix = f"note: {d}{os.sep}"
    reasons = dict(line[len(prefix) :].split(": ignored: ") for line in lines if ": ignored: " in line)
    assert reasons == {
        ".DS_Store": "hidden file",
        "blob.bin": "binary file",
        "empty.txt": "empty file",
        "notes.txt": "no FASTA header: its first line is 'MKVL without a header', not '>...'",
        "sub/": "a directory (input directories are not searched recursively)",
        "x.a3m": "an alignment: give it as the input itself, or with --msa / --msa-dir",
    }
    (d / "a.fasta").unlink(), (d / "b.fasta.txt").unlink(), (d / "c.seq.gz").unlink(), (d / "m.cif").unlink()
    with pytest.raises(PredictError, match="directory without FASTA or structure files"):
        collect_targets(d, log=lines.append)


# -- finished targets: skipped only when what produced them matches -----------------------------------
def _predict(fasta, out, weights, **kw):
    lines = []
    kw = {"single_sequence": True, "num_recycles": 0, "track_memory": False, **kw}
    run = alphafold_mem.predict(fasta, out, weights=weights, log=lines.append, **kw)
    return run, {r.name: r for r in run.results}, lines


def test_finished_target_is_skipped_only_when_its_provenance_matches(tmp_path, tiny_weights):
    fasta, out = tmp_path / "in.fasta", tmp_path / "out"
    fasta.write_text(">t1\nMKVLAGH\n>t2\nGSHMKV\n")
    run, res, _ = _predict(fasta, out, tiny_weights)
    assert run.exit_code == 0 and {r.status for r in res.values()} == {"ok"}
    record = json.loads(prediction(out, "t1", "_scores.json").read_text())["provenance"]
    assert record["sequence"] == "MKVLAGH" and record["msa_sha256"] is None and len(record["weights_sha256"]) == 64
    assert record["options"] == {"preset": None, "num_recycles": 0, "precision": "fp32", "seed": 0, "pipeline": None}
    assert "tiny_seed_0.pdb" in record["outputs"] and "tiny_seed_0_scores.json" in record["outputs"]
    run, res, lines = _predict(fasta, out, tiny_weights)  # nothing changed: skipped
    assert run.exit_code == 0 and res["t1"].status == "skipped" and "skip: t1" in "\n".join(lines)

    fasta.write_text(">t1\nMKVLAGHW\n>t2\nGSHMKV\n")  # same id, other sequence: refused, t2 still skipped
    run, res, lines = _predict(fasta, out, tiny_weights)
    assert run.exit_code == 1 and res["t1"].status == "failed" and res["t2"].status == "skipped"
    assert (
        f"{prediction(out, 't1', '_scores.json')} exists but was produced from another sequence "
        "(8 residues now, 7 before); use --overwrite to replace it, or another --out"
    ) in res["t1"].message
    old = json.loads(prediction(out, "t1", "_scores.json").read_text())
    assert old["sequence"] == "MKVLAGH"  # the old result is untouched

    run, res, _ = _predict(fasta, out, tiny_weights, num_recycles=1)
    assert "num_recycles (1 now, 0 before)" in res["t2"].message
    run, res, _ = _predict(fasta, out, tiny_weights, seed=3)  # another seed: another prediction beside it
    assert res["t2"].status == "ok" and prediction(out, "t2", "_scores.json", "tiny.ckpt", seed=3).is_file()
    assert json.loads(prediction(out, "t2", "_scores.json", "tiny.ckpt").read_text())["seed"] == 0
    msa = tmp_path / "t2.a3m"
    msa.write_text(">t2\nGSHMKV\n>h\nGSHLKV\n")
    run, res, _ = _predict(fasta, out, tiny_weights, single_sequence=False, msa_dir=tmp_path)
    assert re.search(r"MSA \(sha256 [0-9a-f]{12} now, none before\)", res["t2"].message)
    other = tmp_path / "other" / "tiny.ckpt"  # other weights of the same name: the same prediction name
    other.parent.mkdir()
    torch.manual_seed(1)
    alphafold_mem.weights.save_checkpoint(alphafold_mem.AlphaFold(alphafold_mem.model_config("tiny")), other)
    run, res, _ = _predict(fasta, out, other)
    assert re.search(r"weights \(sha256 [0-9a-f]{12} now, [0-9a-f]{12} before\)", res["t2"].message)

    run, res, _ = _predict(fasta, out, tiny_weights, overwrite=True)  # --overwrite: recomputed
    assert run.exit_code == 0 and {r.status for r in res.values()} == {"ok"}
    prediction(out, "t2").unlink()  # an output went missing: run again, without --overwrite
    run, res, lines = _predict(fasta, out, tiny_weights)
    assert res["t2"].status == "ok" and res["t1"].status == "skipped" and prediction(out, "t2").is_file()
    assert ranked(out, "t2").read_bytes() == prediction(out, "t2").read_bytes()
    assert "rerun: t2: outputs incomplete" in "\n".join(lines)
    scores = json.loads(prediction(out, "t2", "_scores.json").read_text())  # written by an older version: no record
    del scores["provenance"]
    prediction(out, "t2", "_scores.json").write_text(json.dumps(scores))
    run, res, _ = _predict(fasta, out, tiny_weights)
    assert res["t2"].status == "failed" and "without a provenance record" in res["t2"].message


def test_provenance_covers_template_and_relax_settings_without_local_paths(tmp_path):
    from alphafold_mem.predict.provenance import describe_changes, partition_finished
    from alphafold_mem.predict.stages import PipelineOptions
    from alphafold_mem.predict.targets import Target

    weights, hits = tmp_path / "w.ckpt", tmp_path / "hits.hhr"
    weights.write_bytes(b"weights")
    hits.write_text("hit 1")
    options = {"preset": None, "num_recycles": 0, "precision": "fp32", "seed": 0}

    def record(pipeline):
        t = Target("t", "MKVLAGH", "t", f"{tmp_path}/in.fasta:1")
        todo, _, _ = partition_finished([t], str(tmp_path), str(weights), options, overwrite=False, pipeline=pipeline)
        assert todo == [t]
        return t.provenance

    plain = record(None)
    assert describe_changes(plain, record(PipelineOptions(relax=True)))[0].startswith(
        "pipeline ({'template_db': None, 'mmcif_dirs': [], 'max_template_date': None, 'max_templates': 4, "
        "'obsolete': False, 'relax': True} now, None before)"
    )
    dated = PipelineOptions(mmcif_dirs=(str(tmp_path / "mmcif"),), max_template_date="2000-01-01")
    dated._hits["t"] = str(hits)
    first = record(dated)
    assert describe_changes(
        first, record(PipelineOptions(mmcif_dirs=(str(tmp_path / "mmcif"),), max_template_date="2020-01-01"))
    )[0].startswith("template hits (sha256 none now, ")
    hits.write_text("hit 1 and hit 2")
    changes = describe_changes(first, record(dated))
    assert len(changes) == 1 and re.match(r"template hits \(sha256 [0-9a-f]{12} now, [0-9a-f]{12} before\)", changes[0])
    assert str(tmp_path) not in json.dumps(first) and first["options"]["pipeline"]["mmcif_dirs"] == ["mmcif"]


def test_searched_msas_get_depth_neff_and_min_depth(tmp_path):
    from alphafold_mem.data.neff import neff
    from alphafold_mem.predict.targets import Target, measure_searched

    query_only, deep = tmp_path / "q.a3m", tmp_path / "deep.a3m"
    query_only.write_text(">q\nMKVLAGH\n")
    deep.write_text(">q\nMKVLAGH\n>h1\nMKVLSGH\n>h2\nAKVLSGW\n")
    given = Target("given", "MKVLAGH", "", "in.fasta:1", msa_depth=1, neff=neff(["MKVLAGH"]))
    given.measured_files = given.msa_files = (str(tmp_path / "gone.a3m"),)  # measured before: not read again
    searched = Target("searched", "MKVLAGH", "", "in.fasta:3", msa_files=(str(query_only),))
    rich = Target("rich", "MKVLAGH", "", "in.fasta:5", msa_files=(str(deep),))
    bad = tmp_path / "bad.a3m"
    bad.write_text(">q\nMKVLAGH\n>h1\nMKV\n")
    broken = Target("broken", "MKVLAGH", "", "in.fasta:7", msa_files=(str(bad),))
    lines = []
    kept, rejected = measure_searched([given, searched, rich, broken], 2, lines.append)
    assert kept == [rich] and (rich.msa_depth, rich.neff.value) == (3, 2.0)
    assert [r.name for r in rejected] == ["given", "searched", "broken"]
    assert rejected[2].message.startswith(f"{bad}:") and "match columns" in rejected[2].message
    assert rejected[1].message == "in.fasta:3: record 'searched': MSA depth 1 (Neff 1.0) is below --min-msa-depth 2"
    warned = [line for line in lines if "holds only the query" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: in.fasta:3: record 'searched'")


def test_outputs_hold_no_local_paths_unless_asked(tmp_path, tiny_weights):
    fasta = tmp_path / "inputs" / "in.fasta"
    fasta.parent.mkdir()
    fasta.write_text(">p\nMKVLAGH\n")
    msa = tmp_path / "inputs" / "p.a3m"
    msa.write_text(">p\nMKVLAGH\n>h\nMKVLSGH\n")
    out = tmp_path / "out"
    run, _, _ = _predict(fasta, out, tiny_weights, single_sequence=False, msa=msa)
    assert run.exit_code == 0
    local = [str(tmp_path).encode(), str(pathlib.Path(tiny_weights).parent).encode()]
    for f in (f for f in out.rglob("*") if f.is_file()):
        data = f.read_bytes()
        assert not any(p in data for p in local), f.name
    scores = json.loads(prediction(out, "p", "_scores.json").read_text())
    assert (scores["source"], scores["msa_files"], scores["weights"]) == ("in.fasta:1", ["p.a3m"], "tiny.ckpt")
    run, _, _ = _predict(fasta, tmp_path / "out2", tiny_weights, single_sequence=False, msa=msa, record_paths=True)
    scores = json.loads(prediction(tmp_path / "out2", "p", "_scores.json").read_text())
    assert scores["source"] == f"{fasta}:1" and scores["msa_files"] == [str(msa)]
    assert scores["weights"] == str(tiny_weights)


def test_a_long_header_is_capped_in_the_scores_json(tmp_path, tiny_weights):
    from alphafold_mem.predict.targets import DESCRIPTION_CHARS, DESCRIPTION_FULL_CHARS

    header = "p " + "w" * 2_000_000
    fasta = tmp_path / "in.fasta"
    fasta.write_text(f">{header}\nMKVLAGH\n")
    run, _, _ = _predict(fasta, tmp_path / "out", tiny_weights)
    assert run.exit_code == 0
    text = prediction(tmp_path / "out", "p", "_scores.json").read_text()
    scores = json.loads(text)
    assert len(text) < DESCRIPTION_FULL_CHARS + 20_000
    more = len(header) - DESCRIPTION_CHARS
    assert scores["description"] == header[:DESCRIPTION_CHARS] + f" [... {more} more characters]"
    assert scores["description_full"].startswith(header[:DESCRIPTION_FULL_CHARS] + " [... ")
    assert scores["description_length"] == len(header)


def test_a_nan_template_coordinate_never_reaches_the_model(tmp_path, tiny_weights, monkeypatch):
    import alphafold_mem.data as data

    original, calls = data.make_features, []

    def make_features(sequence, *args, **kw):
        feats = original(sequence, *args, **kw)
        if sequence == "MKVLAGH":
            feats["template_all_atom_positions"][0, 3, 1, 0] = float("nan")
        return feats

    monkeypatch.setattr(data, "make_features", make_features)
    forward_stage = importlib.import_module("alphafold_mem.predict.target_forward")
    monkeypatch.setattr(forward_stage, "make_features", make_features)  # the run stage imports it at its top
    forward = alphafold_mem.AlphaFold.forward
    from torch._subclasses.fake_tensor import FakeTensor

    def counted(self, batch, *a):
        if not isinstance(batch["aatype"], FakeTensor):  # the pre-flight's size estimate traces fake tensors
            calls.append(batch["aatype"].shape[-1])
        return forward(self, batch, *a)

    monkeypatch.setattr(alphafold_mem.AlphaFold, "forward", counted)
    fasta = tmp_path / "in.fasta"
    fasta.write_text(">bad\nMKVLAGH\n>good\nGSHMKV\n")
    run, res, lines = _predict(fasta, tmp_path / "out", tiny_weights)
    assert run.exit_code == 1 and res["bad"].status == "failed" and res["good"].status == "ok"
    assert calls == [6]  # the model only ever saw the good target
    assert res["bad"].message == (
        f"{fasta}:1: record 'bad': feature 'template_all_atom_positions': non-finite value "
        "nan at template 1, residue 4, atom CA, x; not passed to the model"
    )
    assert f"error: {res['bad'].message}" in lines
