"""``alphafold-mem predict`` end to end on shipped data with the ``tiny`` preset.

The weights are a ``tiny`` model saved by the test (its pLDDT head is re-initialised so that pLDDT
differs per residue). With trained demo weights (``data/demo_weights/demo.ckpt``) the Cα-Cα
geometry check runs too.
"""

import importlib
import json
import os
import shutil
import warnings

import numpy as np
import pytest
import torch
from Bio.PDB import MMCIFParser, PDBParser
from Bio.PDB.MMCIF2Dict import MMCIF2Dict

import alphafold_mem
from alphafold_mem import AlphaFold, AutoPolicy, MemoryPolicy, model_config
from alphafold_mem.cli import main
from alphafold_mem.cli.main import build_parser
from alphafold_mem.cli.memory_args import predict_request
from alphafold_mem.data.errors import InputWarning
from alphafold_mem.data.pdb import parse_pdb
from alphafold_mem.geometry import residue_constants as rc
from alphafold_mem.metrics import ca_rmsd
from alphafold_mem.predict import PredictError
from alphafold_mem.predict.preflight import format_bytes
from alphafold_mem.predict.targets import collect_targets
from alphafold_mem.weights import default_weights_path, save_checkpoint

from .conftest import REPO_DATA
from .predict_cli import prediction, ranked

FASTA_1LCD = REPO_DATA / "fasta" / "per_entry" / "1lcd.fasta"
A3M_1LCD = REPO_DATA / "alignments" / "1lcd_A" / "jackhmmer_pool.a3m"
SEQ_1LCD = "MKPVTLYDVAEYAGVSYQTVSRVVNQASHVSAKTREKVEAAMAELNYIPNR"
PEPTIDE = REPO_DATA / "fasta" / "awkward" / "colabfold_5AWL_1_peptide.fasta"

needs_shipped = pytest.mark.skipif(
    not (FASTA_1LCD.exists() and A3M_1LCD.exists()), reason="shipped example data (data/fasta, data/alignments) missing"
)


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    torch.manual_seed(0)
    model = AlphaFold(model_config("tiny"))
    with torch.no_grad():  # AF2 zero-initialises the pLDDT logits; make pLDDT vary per residue
        model.aux_heads.predicted_lddt.logits.weight.normal_(0.0, 0.5)
        model.structure_module.affine_update.weight.normal_(0.0, 0.1)  # and move the backbone frames
    path = tmp_path_factory.mktemp("weights") / "tiny.ckpt"
    save_checkpoint(model, path)
    return path


def _residues(structure):
    return [r for r in structure.get_residues()]


def _sequence(structure) -> str:
    return "".join(rc.restype_3to1.get(r.get_resname(), "X") for r in _residues(structure))


# -- the main job: FASTA + a3m -------------------------------------------------------------------
@needs_shipped
def test_main_job_outputs(tmp_path, tiny_weights, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "predict",
            str(FASTA_1LCD),
            "--msa",
            str(A3M_1LCD),
            "--out",
            str(out),
            "--weights",
            str(tiny_weights),
            "--num-recycles",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    name = "1lcd_A"
    for suffix in (".pdb", ".cif", "_scores.json", "_pae.json", "_plddt.png", "_pae.png"):
        path = prediction(out, name, suffix, tiny_weights)  # <out>/<id>/tiny_seed_0<suffix>
        assert path.is_file() and path.stat().st_size > 0, suffix
    for ranked_file in ("ranked_0.pdb", "ranked_0.cif", "ranking_debug.json", f"{name}_scores.json"):
        assert (out / name / ranked_file).is_file(), ranked_file
    assert json.loads((out / name / "ranking_debug.json").read_text())["order"] == ["tiny_seed_0"]
    assert (out / "timings.json").is_file() and not list(out.glob("*.pdb"))
    assert "1lcd_A" in err and "mean pLDDT" in err and "status" in err  # progress line and summary table

    scores = json.loads(prediction(out, name, "_scores.json").read_text())
    plddt = np.asarray(scores["plddt"])
    assert scores["sequence"] == SEQ_1LCD and scores["length"] == len(SEQ_1LCD)
    assert plddt.shape == (len(SEQ_1LCD),) and np.all((plddt >= 0) & (plddt <= 100))
    assert plddt.std() > 0.1  # per-residue values, so the comparisons below are meaningful
    assert scores["mean_plddt"] == pytest.approx(plddt.mean(), abs=0.01)
    assert scores["msa_depth"] > 1 and scores["msa_mode"] == "msa"
    assert 0 <= scores["ptm"] <= 1 and scores["max_pae"] > 0 and scores["num_recycles"] == 1

    for suffix in (".pdb", ".cif"):  # PDB and mmCIF 1.1 are ASCII
        prediction(out, name, suffix).read_bytes().decode("ascii")

    # PDB: parses, sequence equals the input, B-factor = pLDDT of the residue on every atom.
    pdb = PDBParser(QUIET=True).get_structure(name, ranked(out, name))
    assert _sequence(pdb) == SEQ_1LCD
    for res, value in zip(_residues(pdb), plddt):
        assert {round(a.get_bfactor(), 2) for a in res} == {round(float(value), 2)}
        assert "CA" in res

    # mmCIF (ModelCIF): parses, same sequence, QA metric and B_iso are the same pLDDT (0-100).
    cif = MMCIFParser(QUIET=True).get_structure(name, prediction(out, name, ".cif"))
    assert _sequence(cif) == SEQ_1LCD
    cif_bfactors = [next(iter(r)).get_bfactor() for r in _residues(cif)]
    np.testing.assert_allclose(cif_bfactors, plddt, atol=0.006)
    d = MMCIF2Dict(str(prediction(out, name, ".cif")))
    metric_ids = {i: (n, t) for i, n, t in zip(d["_ma_qa_metric.id"], d["_ma_qa_metric.name"], d["_ma_qa_metric.type"])}
    local = [
        (int(s), float(v))
        for s, m, v in zip(
            d["_ma_qa_metric_local.label_seq_id"],
            d["_ma_qa_metric_local.metric_id"],
            d["_ma_qa_metric_local.metric_value"],
        )
        if metric_ids[m] == ("pLDDT", "pLDDT")
    ]
    assert [s for s, _ in local] == list(range(1, len(SEQ_1LCD) + 1))
    np.testing.assert_allclose([v for _, v in local], plddt, atol=0.006)
    pdb_b = [next(iter(r)).get_bfactor() for r in _residues(pdb)]
    np.testing.assert_allclose(pdb_b, [v for _, v in local], atol=0.006)
    global_values = dict(zip(d["_ma_qa_metric_global.metric_id"], d["_ma_qa_metric_global.metric_value"]))
    names = {metric_ids[m][0]: float(v) for m, v in global_values.items()}
    assert names["pLDDT"] == pytest.approx(plddt.mean(), abs=0.01)
    assert names["pTM"] == pytest.approx(scores["ptm"], abs=1e-3)

    # PAE file in the AlphaFold DB layout.
    pae = json.loads(prediction(out, name, "_pae.json").read_text())
    assert isinstance(pae, list) and len(pae) == 1
    matrix = np.asarray(pae[0]["predicted_aligned_error"])
    assert matrix.shape == (len(SEQ_1LCD), len(SEQ_1LCD))
    assert 0 <= matrix.min() and matrix.max() <= pae[0]["max_predicted_aligned_error"] + 1e-6

    timings = json.loads((out / "timings.json").read_text())
    assert {"load_weights", f"{name}/features", f"{name}/model", f"{name}/outputs"} <= set(timings["stages"])
    assert all(s["seconds"] >= 0 for s in timings["stages"].values())
    assert timings["stages"][f"{name}/model"]["peak_mib"] > 0
    keys = {"peak_mib"} if timings["device"].startswith("cuda") else {"process_max_rss_mib"}
    assert all(keys <= set(s) for s in timings["stages"].values())
    assert set(timings["memory_measure"]) >= keys | {"peak_mib"}


# -- batch behaviour -----------------------------------------------------------------------------
@needs_shipped
def test_batch_with_one_invalid_record(tmp_path, tiny_weights):
    """Valid records get outputs, the invalid one one clear line, and the run exits non-zero."""
    peptide = "".join(PEPTIDE.read_text().splitlines()[1:]).strip()
    fasta = tmp_path / "batch.fasta"
    fasta.write_text(
        f">1lcd_A Lac repressor\n{SEQ_1LCD}\n>broken bad record\nMKV1LAG\n>5AWL_1 peptide\n{peptide}\n"
        ">with_x\nMKVXLAG\n"
    )
    lines = []
    run = alphafold_mem.predict(
        fasta, tmp_path / "out", weights=tiny_weights, single_sequence=True, num_recycles=0, log=lines.append
    )
    assert run.exit_code == 1
    status = {r.name: r.status for r in run.results}
    assert status == {"1lcd_A": "ok", "broken": "invalid", "5AWL_1": "ok", "with_x": "ok"}
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [f"error: {fasta}:4:4: record 'broken': digit '1' in a protein sequence (residue 4)"]
    assert not any("Traceback" in line for line in lines)
    for name in ("1lcd_A", "5AWL_1"):
        assert ranked(tmp_path / "out", name).exists() and prediction(tmp_path / "out", name, "_scores.json").exists()
    assert not any(p.name.startswith("broken") for p in (tmp_path / "out").iterdir())
    # 'X' is written as UNK with its backbone N, CA, C, O (placed like glycine's), so the sequence
    # round-trips and the chain stays continuous.
    with_x = PDBParser(QUIET=True).get_structure("x", ranked(tmp_path / "out", "with_x"))
    assert _sequence(with_x) == "MKVXLAG"
    unk = _residues(with_x)[3]
    assert unk.get_resname() == "UNK" and [a.get_id() for a in unk] == ["N", "CA", "C", "O"]
    assert abs(np.linalg.norm(unk["N"].coord - unk["CA"].coord) - 1.458) < 0.01  # ideal N-CA, Å
    assert abs(np.linalg.norm(unk["C"].coord - unk["O"].coord) - 1.23) < 0.02  # ideal C=O, Å
    assert "invalid" in run.summary_table()


def test_a_target_that_runs_out_of_memory_fails_alone(tmp_path, tiny_weights, monkeypatch):
    original = AlphaFold.forward

    def forward(self, batch, recycle_dim=None):
        if batch["aatype"].shape[-1] == 12:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return original(self, batch, recycle_dim)

    monkeypatch.setattr(AlphaFold, "forward", forward)
    fasta = tmp_path / "two.fasta"
    fasta.write_text(">big\nMKVLAGHHWKLV\n>small\nMKVLAGH\n")
    lines = []
    run = alphafold_mem.predict(
        fasta, tmp_path / "out", weights=tiny_weights, single_sequence=True, num_recycles=0, log=lines.append
    )
    assert run.exit_code == 1
    assert {r.name: r.status for r in run.results} == {"big": "failed", "small": "ok"}
    assert f"error: {fasta}:1: record 'big': out of memory at 12 residues" in "\n".join(lines)
    assert not prediction(tmp_path / "out", "big", "_scores.json", tiny_weights).exists()
    assert not (tmp_path / "out" / "big" / "ranked_0.pdb").exists()


def test_preflight_fails_a_too_long_target_at_once(tmp_path, tiny_weights, monkeypatch, capsys):
    """--max-memory below a target's predicted need: that target fails before any model work, with
    one line naming its length, the need and the budget; the batch continues; exit status 1."""
    from alphafold_mem.planner.margins import device_margin
    from alphafold_mem.predict import preflight

    cfg = model_config("tiny")
    needs = [
        preflight.check(cfg, preflight.feature_sizes(cfg, n, 1), AutoPolicy(max_memory=1), torch.device("cpu")).need
        for n in (7, 60)
    ]  # nothing fits 1 byte: the need under the most frugal policy
    margin = device_margin("cpu", 0).total  # what the planner takes off a CPU budget (host library caches)
    budget = margin + (needs[0] + needs[1]) // 2
    from torch._subclasses.fake_tensor import FakeTensor

    forwards = []  # lengths of the real (not the estimator's fake) forwards
    original = AlphaFold.forward

    def forward(self, batch, recycle_dim=None):
        if not isinstance(batch["aatype"], FakeTensor):
            forwards.append(batch["aatype"].shape[-1])
        return original(self, batch, recycle_dim)

    monkeypatch.setattr(AlphaFold, "forward", forward)
    fasta = tmp_path / "two.fasta"
    fasta.write_text(">long\n" + "MKVLAGHHWK" * 6 + "\n>short\nMKVLAGH\n")
    argv = [
        "predict",
        str(fasta),
        "--out",
        str(tmp_path / "out"),
        "--weights",
        str(tiny_weights),
        "--single-sequence",
        "--num-recycles",
        "0",
        "--max-memory",
        str(budget),
    ]
    assert main(argv) == 1
    log = capsys.readouterr().err
    assert f"record 'long': does not fit: 60 residues need {format_bytes(needs[1])} (predicted" in log
    assert f"but the budget is {format_bytes(budget)} less a {format_bytes(margin)} device margin" in log
    assert "(docs/memory-budget.md); try --low-memory" in log
    assert forwards == [7]  # the long target never reached the model
    timings = json.loads((tmp_path / "out" / "timings.json").read_text())
    assert not any(k.startswith("long/") for k in timings["stages"]) and "short/model" in timings["stages"]
    assert timings["targets"]["long"]["status"] == "failed" and timings["targets"]["short"]["status"] == "ok"


@needs_shipped
def test_finished_outputs_are_skipped_unless_overwrite(tmp_path, tiny_weights, peptide_reference, capsys):
    out = tmp_path / "out"
    argv = [
        "predict",
        str(PEPTIDE),
        "--out",
        str(out),
        "--weights",
        str(tiny_weights),
        "--single-sequence",
        "--num-recycles",
        "0",
    ]
    shutil.copytree(peptide_reference, out)  # what main(argv) writes: the same command line
    pdb = prediction(out, "5AWL_1")
    os.utime(pdb, (1_000_000, 1_000_000))
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "skip: 5AWL_1" in err and "skipped" in err
    assert pdb.stat().st_mtime == 1_000_000  # untouched
    assert main(argv + ["--overwrite"]) == 0
    assert pdb.stat().st_mtime != 1_000_000


@needs_shipped
def test_msa_dir_lookup_and_missing_alignment(tmp_path, tiny_weights):
    """--msa-dir finds <id>.a3m; a record without an alignment is reported and the others run."""
    msa_dir = tmp_path / "msas"
    msa_dir.mkdir()
    shutil.copy(A3M_1LCD, msa_dir / "1lcd_A.a3m")
    fasta = tmp_path / "two.fasta"
    fasta.write_text(f">1lcd_A\n{SEQ_1LCD}\n>other\nMKVLAGHHW\n")
    lines = []
    run = alphafold_mem.predict(
        fasta, tmp_path / "out", msa_dir=msa_dir, weights=tiny_weights, num_recycles=0, log=lines.append
    )
    assert run.exit_code == 1
    by_name = {r.name: r for r in run.results}
    assert by_name["1lcd_A"].status == "ok" and by_name["1lcd_A"].msa_depth > 1
    assert by_name["other"].status == "invalid"
    assert any("record 'other': no alignment in" in line for line in lines)


@needs_shipped
def test_bf16_prediction(tmp_path, tiny_weights):
    run = alphafold_mem.predict(
        PEPTIDE,
        tmp_path,
        weights=tiny_weights,
        single_sequence=True,
        num_recycles=0,
        memory_policy=AutoPolicy(precision="bf16"),
        device="cpu",
        log=lambda _: None,
    )
    assert run.exit_code == 0
    scores = json.loads(prediction(tmp_path, "5AWL_1", "_scores.json").read_text())
    assert scores["precision"] == "bf16" and np.all(np.isfinite(scores["plddt"]))


@needs_shipped
def test_bf16_demo_weights_match_fp32_on_1lcd(tmp_path):
    """On the main job: bf16 and bf16-full inference with the demo weights, Cα-RMSD to the fp32
    prediction <= 0.5 Å (after superposition) and mean |ΔpLDDT| <= 1. 1lcd_A was bf16-full's worst
    ablation chain; all of them: ``alphafold-mem ablate --techniques precision=bf16 precision=bf16-full``."""
    precisions = ("fp32", "bf16", "bf16-full")
    for precision in precisions:
        run = alphafold_mem.predict(
            str(FASTA_1LCD),
            tmp_path / precision,
            msa=str(A3M_1LCD),
            memory_policy=AutoPolicy(precision=precision),
            device="cpu",
            track_memory=False,
            log=lambda _: None,
        )
        assert run.exit_code == 0
    with warnings.catch_warnings():  # predictions carry no SEQRES
        warnings.simplefilter("ignore", InputWarning)
        a, *others = (parse_pdb(ranked(tmp_path / prec, "1lcd_A")) for prec in precisions)
    ca = rc.atom_order["CA"]
    for precision, b in zip(precisions[1:], others):
        assert len(a) == len(b) == 51
        x, y, mask = (
            torch.tensor(t, dtype=torch.float64) for t in (a.atom37_positions, b.atom37_positions, a.atom37_mask)
        )
        rmsd = ca_rmsd(y, x, mask).item()
        assert 0 < rmsd <= 0.5, (precision, rmsd)  # Å; bf16 does change the prediction, within the bound
        assert np.abs(a.b_factors[:, ca] - b.b_factors[:, ca]).mean() <= 1.0, precision  # pLDDT: B-factors


def _peptide_predict(tiny_weights, out, *options: str) -> int:
    common = ["predict", str(PEPTIDE), "--weights", str(tiny_weights), "--single-sequence", "--num-recycles", "0"]
    return main(common + ["--out", str(out), *options])


@pytest.fixture(scope="module")
def peptide_reference(tmp_path_factory, tiny_weights):
    """The default-options prediction the memory options are compared with: one run for all of them
    (the same command line each time, so the same result)."""
    out = tmp_path_factory.mktemp("peptide_reference")
    assert _peptide_predict(tiny_weights, out) == 0
    return out


@needs_shipped
@pytest.mark.parametrize("options", [["--chunk-size", "3"], ["--low-memory"], ["--chunk-size", "auto"]])
def test_memory_options_give_the_reference_result(tmp_path, tiny_weights, peptide_reference, options):
    """--chunk-size / --low-memory bind a MemoryPolicy; the structure and confidences do not change."""
    assert _peptide_predict(tiny_weights, tmp_path / "mem", *options) == 0
    ref = json.loads(prediction(peptide_reference, "5AWL_1", "_scores.json").read_text())
    mem = json.loads(prediction(tmp_path / "mem", "5AWL_1", "_scores.json").read_text())
    # auto: the pre-flight's choice (with memory to spare, no chunking: the reference itself)
    assert ref["memory_policy"] == "reference" and (mem["memory_policy"] != "reference" or "auto" in options)
    np.testing.assert_allclose(mem["plddt"], ref["plddt"], atol=0.02)
    xyz = [
        np.array([a.coord for a in PDBParser(QUIET=True).get_structure("x", ranked(d, "5AWL_1")).get_atoms()])
        for d in (peptide_reference, tmp_path / "mem")
    ]
    np.testing.assert_allclose(xyz[1], xyz[0], atol=2e-3)


@needs_shipped
def test_chunk_size_flag_and_memory_set_bind_the_same_policy(tmp_path, tiny_weights, monkeypatch):
    """``--chunk-size 7`` and ``--memory-set chunk_size=7`` are one policy: the one predict binds."""
    runner = importlib.import_module("alphafold_mem.predict.runner")  # alphafold_mem.predict: the function
    bound, original = [], runner.bind
    monkeypatch.setattr(runner, "bind", lambda model, policy, *a, **kw: bound.append(policy) or original(model, policy))
    common = ["predict", str(PEPTIDE), "--weights", str(tiny_weights), "--single-sequence", "--num-recycles", "0"]
    for i, options in enumerate((["--chunk-size", "7"], ["--memory-set", "chunk_size=7"])):
        assert main(common + ["--out", str(tmp_path / str(i))] + options) == 0
    assert bound == [MemoryPolicy(chunk_size=7)] * 2


def _request(*options: str):
    return predict_request(build_parser().parse_args(["predict", "x.fasta", "--out", "o", *options]))


def test_memory_flags_become_the_one_memory_argument():
    """The command line's memory options are turned into one request in ``cli/`` alone."""
    assert _request() == AutoPolicy()
    assert _request("--precision", "bf16", "--max-memory", "2GB") == AutoPolicy(precision="bf16", max_memory=2 * 10**9)
    assert _request("--chunk-size", "7") == _request("--memory-set", "chunk_size=7") == MemoryPolicy(chunk_size=7)
    assert _request("--chunk-size", "auto", "--max-memory", "1GB") == MemoryPolicy(chunk_size="auto", max_memory=10**9)
    assert _request("--low-memory", "--chunk-size", "8") == MemoryPolicy.low_memory_inference(chunk_size=8)
    assert _request("--memory-policy", "reference", "--memory-set", "attention=chunked") == MemoryPolicy(
        attention="chunked"
    )
    for options, message in [
        (("--chunk-size", "7", "--memory-set", "chunk_size=8"), "give chunk_size once"),
        (("--memory-policy", "reference", "--low-memory"), "not both"),
        (("--memory-set", "offload=disk"), "unknown offload 'disk'"),
        (("--memory-set", "no_such_field=1"), "no_such_field"),
    ]:
        with pytest.raises(ValueError, match=message):
            _request(*options)
    with pytest.raises(SystemExit):  # choices read from the policy's types
        _request("--precision", "fp16")


# -- validation before model work (no model runs) ------------------------------------------------
def test_ids_repeated_across_files_get_numbered_names(tmp_path):
    for i, (first, second) in enumerate([("pep", "pep_2"), ("pep", "other")]):
        (tmp_path / f"{i}.fasta").write_text(f">{first}\nMKVLAG\n>{second}\nMKVLAGG\n")
    lines = []
    targets, rejected = collect_targets([tmp_path / "0.fasta", tmp_path / "1.fasta"], log=lines.append)
    assert not rejected
    # the second 'pep' cannot take 'pep_2' (already an id of this run), so it becomes 'pep_3'
    assert [t.name for t in targets] == ["pep", "pep_2", "pep_3", "other"]
    assert any("record 'pep' repeats an id of this run; its outputs are named 'pep_3'" in line for line in lines)


@needs_shipped
def test_a3m_input_and_msa_mismatch_are_validated_up_front(tmp_path):
    lines = []
    targets, rejected = collect_targets(A3M_1LCD, None, None, lines.append)
    assert not rejected and len(targets) == 1
    assert targets[0].name == "1lcd_A" and targets[0].sequence == SEQ_1LCD and targets[0].msa_depth > 1

    fasta = tmp_path / "q.fasta"
    fasta.write_text(f">shorter\n{SEQ_1LCD[:-3]}\n")
    targets, rejected = collect_targets(fasta, A3M_1LCD, None, lines.append)
    assert not targets and len(rejected) == 1
    message = rejected[0].message
    assert str(A3M_1LCD) in message and "\n" not in message


def test_run_level_errors_are_one_line(tmp_path, tiny_weights, capsys):
    fasta = tmp_path / "a.fasta"
    fasta.write_text(">a\nMKV\n>b\nMKL\n")
    assert (
        main(["predict", str(fasta), "--out", str(tmp_path / "o"), "--msa", str(fasta), "--weights", str(tiny_weights)])
        == 2
    )
    assert "error: --msa" in capsys.readouterr().err

    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"definitely not weights")
    assert (
        main(["predict", str(fasta), "--out", str(tmp_path / "o"), "--weights", str(garbage), "--single-sequence"]) == 2
    )
    err = capsys.readouterr().err
    assert f"error: {garbage}: not a recognised weights file" in err and "Traceback" not in err

    with pytest.raises(PredictError, match="input not found"):
        alphafold_mem.predict(tmp_path / "missing.fasta", tmp_path / "o", weights=tiny_weights)


# -- trained demo weights ------------------------------------------------------------------------
@needs_shipped
@pytest.mark.skipif(
    not default_weights_path().exists(), reason="demo weights (data/demo_weights/demo.ckpt) not built yet"
)
def test_demo_weights_give_plausible_backbone(tmp_path):
    """With the default (trained demo) weights, consecutive Cα-Cα distances average 3.8 ± 0.2 Å."""
    run = alphafold_mem.predict(FASTA_1LCD, tmp_path, msa=A3M_1LCD, num_recycles=1, log=lambda _: None)
    assert run.exit_code == 0
    pdb = PDBParser(QUIET=True).get_structure("x", ranked(tmp_path, "1lcd_A"))
    ca = np.array([r["CA"].coord for r in pdb.get_residues()])
    d = np.linalg.norm(ca[1:] - ca[:-1], axis=-1)
    assert abs(d.mean() - 3.8) <= 0.2, d.mean()
