"""``alphafold-mem ablate`` (:mod:`alphafold_mem.ablation`): the technique registry, and one tiny grid
(the reference, a test-only perturbed technique and a technique that cannot run here, on two real
chains with a tiny model, 1 scaling length, 2 training steps) checked for its files, columns,
skipped rows, real deviation columns and resuming."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import shutil

import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, model_config
from alphafold_mem.ablation import COLUMNS, AblationConfig, Technique, derive_techniques, run_ablation
from alphafold_mem.ablation import techniques as techniques_module
from alphafold_mem.ablation.results import MEASURES
from alphafold_mem.ablation.techniques import EXCLUDED_VALUES, NOT_ENUMERATED, quick_techniques, select_techniques
from alphafold_mem.cli.main import main as cli_main
from alphafold_mem.memory import policy as policy_module
from alphafold_mem.weights import save_checkpoint

from .conftest import REPO_DATA

CHAINS = [str(REPO_DATA / "fasta" / "per_entry" / "1lcd.fasta"), str(REPO_DATA / "fasta" / "per_entry" / "1a8o.fasta")]
INFERENCE_MEASURES = (
    "peak_counter_bytes",
    "peak_rss_bytes",
    "predicted_peak_bytes",
    "seconds",
    "ca_rmsd_to_reference",
    "plddt_max_abs_diff",
    "plddt_mean_abs_diff",
    "ptm_abs_diff",
    "mean_plddt",
    "lddt_ca",
    "tm_score",
    "gdt_ts",
    "lddt_ca_reference",
    "tm_score_reference",
    "gdt_ts_reference",
)
TRAINING_MEASURES = ("loss", "loss_max_rel_dev", "heldout_lddt_ca", "step_seconds", "train_peak_bytes")
SCALING_MEASURES = ("measured_peak_bytes", "predicted_peak_bytes", "predicted_total_bytes")
PLOTS = ("memory_vs_nres.png", "deviation_vs_saving.png", "training_loss.png", "lddt_per_chain.png")


# -- the registry ----------------------------------------------------------------------------------


def test_techniques_come_from_the_policy_fields_and_presets():
    techniques = derive_techniques()
    names = [t.name for t in techniques]
    assert names[0] == "reference" and len(set(names)) == len(names)
    expected = {
        "chunk_size=64",
        "chunk_size=16",
        "chunk_size=4",
        "attention=chunked",
        "kernels=triton",
        "checkpoint_*=1",
        "checkpoint_*=1,checkpoint_granularity=update",
        "precision=bf16",
        "precision=bf16-full",
        "inplace=True",
        "preset:training",
        "preset:low_memory_inference",
        "dap=2",
        "dap=4",
    }
    assert expected <= set(names)
    by = {t.name: t for t in techniques}
    assert by["checkpoint_*=1,checkpoint_granularity=update"].policy == MemoryPolicy(
        checkpoint_evoformer=1, checkpoint_extra_msa=1, checkpoint_template=1, checkpoint_granularity="update"
    )
    assert by["preset:low_memory_inference"].policy == MemoryPolicy.low_memory_inference()
    policies = [t.policy for t in techniques if t.dap == 1]
    assert len(set(policies)) == len(policies)  # each policy once
    # the chunk sweep is a parameter, not a list: other sizes give other rows, the presets' 16 stays
    swept = {t.name for t in derive_techniques({"chunk_size": (8,)})}
    assert {"chunk_size=8", "chunk_size=16"} <= swept and "chunk_size=64" not in swept
    quick = {t.name for t in quick_techniques(techniques)}
    assert {"reference", "preset:training", "preset:low_memory_inference"} <= quick
    with pytest.raises(ValueError, match="unknown technique.*valid: reference"):
        select_techniques(techniques, ["chunk_size=3"])


def _values_with_rows(techniques) -> set:
    """``(field, value)`` of every policy value some row (the reference included) runs with."""
    return {(f.name, getattr(t.policy, f.name)) for t in techniques for f in dataclasses.fields(MemoryPolicy)}


def test_every_value_of_every_enumerated_field_is_a_row_or_excluded_with_a_reason():
    """The list is built from the fields' types (field_choices), not from any docstring."""
    covered = _values_with_rows(derive_techniques())
    choices = policy_module.field_choices()
    assert choices, "no enumerated policy field: field_choices() reads nothing"
    missing = [(name, v) for name, values in choices.items() for v in values if (name, v) not in covered]
    assert [m for m in missing if m not in EXCLUDED_VALUES] == []
    assert all(reason.strip() for reason in EXCLUDED_VALUES.values())
    # every field is either enumerated (rows from its type) or has its stated treatment
    fields = {f.name for f in dataclasses.fields(MemoryPolicy)}
    assert fields == set(choices) | set(NOT_ENUMERATED) and not set(choices) & set(NOT_ENUMERATED)
    assert ("chunk_size", "auto") not in covered and ("chunk_size", "auto") in EXCLUDED_VALUES


def test_a_value_added_to_a_fields_type_becomes_a_row(monkeypatch):
    """A new ``Literal`` value appears as a technique without touching the ablation or a docstring."""
    choices = dict(policy_module.field_choices())
    choices["templates"] = choices["templates"] + ("test-only-mode",)
    for module in (policy_module, techniques_module):  # the policy's validation and the derivation
        monkeypatch.setattr(module, "field_choices", lambda: choices)
    by = {t.name: t for t in derive_techniques()}
    assert by["templates=test-only-mode"].policy == MemoryPolicy.reference().replace(templates="test-only-mode")


def test_techniques_that_cannot_run_here_say_why():
    by = {t.name: t for t in derive_techniques()}
    assert "interpreter" in by["kernels=triton"].skip_reason("inference", "cpu")
    assert "only in training" in by["checkpoint_*=1"].skip_reason("inference", "cpu")
    assert by["checkpoint_*=1"].skip_reason("training", "cpu") is None
    assert "bf16-mixed" in by["precision=bf16-full"].skip_reason("training", "cpu")
    assert by["precision=bf16"].skip_reason("training", "cpu") is None
    assert "inference-only" in by["inplace=True"].skip_reason("training", "cpu")
    assert "no-op on a CPU device" in by["offload=idle"].skip_reason("inference", "cpu")
    assert by["preset:low_memory_inference"].skip_reason("inference", "cpu") is None
    try:
        import alphafold_mem.distributed  # noqa: F401
    except ImportError:
        assert "alphafold_mem.distributed" in by["dap=2"].skip_reason("inference", "cpu")


# -- the tiny grid ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _noise(model: torch.nn.Module):
    """Test-only technique: N(0, 0.05) on every weight while it runs, then the weights are restored."""
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(p.device) * 0.05)
    try:
        yield
    finally:
        model.load_state_dict(saved)


NOISY = Technique("test:noisy-weights", MemoryPolicy.reference(), "test", "weights + N(0, 0.05)", prepare=_noise)


def _config(out, weights) -> AblationConfig:
    return AblationConfig(
        out=out,
        chains=CHAINS,
        weights=str(weights),
        techniques=["kernels=triton"],
        n_res=(16,),
        predict_n_res=(),
        training_steps=2,
        repeats=1,
        scaling_preset="tiny",
        scaling_n_seq=8,
        scaling_n_extra=16,
    )


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    torch.manual_seed(0)
    model = AlphaFold(model_config("tiny"))
    with torch.no_grad():  # AF2 zero-initialises final layers: perturb so no output is trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    path = tmp_path_factory.mktemp("weights") / "tiny.ckpt"
    save_checkpoint(model, path)
    return path


def _values(rows, section, technique, measure):
    return [
        r["value"]
        for r in rows
        if r["section"] == section and r["technique"] == technique and r["measure"] == measure and r["status"] == "ok"
    ]


def test_tiny_grid(tiny_weights, tmp_path):
    """The acceptance grid, one run (the long part) and one resumed run, checked in the helpers below."""
    out = tmp_path / "out"
    report = run_ablation(_config(out, tiny_weights), extra_techniques=[NOISY])
    assert report == out / "report.md"
    rows = json.loads((out / "results.json").read_text())["rows"]
    _check_outputs_and_columns(out, rows)
    _check_rows_that_cannot_run_here(out, rows)
    _check_deviation_columns(rows)
    _check_resume(out, rows, tiny_weights, tmp_path / "partial")


def _check_outputs_and_columns(out, rows):
    """Every output file exists with the documented columns; every measure of every section is there."""
    for name in ("results.csv", "results.json", "report.md", "run.json") + PLOTS:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "work" / ".gitignore").read_text().strip().endswith("*")  # intermediates stay out of git
    with open(out / "results.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == COLUMNS
        assert len(list(reader)) == len(rows)
    assert all(tuple(r) == COLUMNS for r in rows)
    assert {r["measure"] for r in rows if r["measure"]} <= set(MEASURES)
    for name in ("reference", NOISY.name):
        for m in INFERENCE_MEASURES:
            values = _values(rows, "inference", name, m)
            assert len(values) == 2 and all(v is not None for v in values), (name, m)
        for m in TRAINING_MEASURES:
            assert _values(rows, "training", name, m), (name, m)
        assert len(_values(rows, "training", name, "loss")) == 2
    for m in SCALING_MEASURES:
        assert _values(rows, "scaling", "reference", m), m
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(r["versions"]["torch"] == torch.__version__ and r["policy"] for r in ok)
    text = (out / "report.md").read_text()
    for heading in ("## Inference", "## Training", "## Scaling", "## Rows not measured here"):
        assert heading in text
    for plot in PLOTS:
        assert f"]({plot})" in text
    assert "alphafold_mem.memory.track_peak" in text  # the measures table


def _check_rows_that_cannot_run_here(out, rows):
    """A technique that cannot run here (Triton on CPU) is a row with the reason in every section."""
    skipped = [r for r in rows if r["technique"] == "kernels=triton"]
    assert {r["section"] for r in skipped} == {"inference", "training", "scaling"}
    assert all(r["status"] == "skipped" and "Triton" in r["reason"] for r in skipped)
    assert not [r for r in rows if r["status"] == "failed"]
    assert "`kernels=triton`" in (out / "report.md").read_text()


def _check_deviation_columns(rows):
    """The perturbed technique deviates, the reference row is exactly zero."""
    for m in ("ca_rmsd_to_reference", "plddt_max_abs_diff", "plddt_mean_abs_diff", "ptm_abs_diff"):
        assert _values(rows, "inference", "reference", m) == [0.0, 0.0], m
        assert min(_values(rows, "inference", NOISY.name, m)) > 0, m
    assert min(_values(rows, "inference", NOISY.name, "ca_rmsd_to_reference")) > 1e-3
    assert _values(rows, "training", "reference", "loss_max_rel_dev") == [0.0]
    assert _values(rows, "training", NOISY.name, "loss_max_rel_dev")[0] > 0
    # the same policy: the same memory, by the storage counter and the planner
    for m in ("peak_counter_bytes", "predicted_peak_bytes"):
        assert _values(rows, "inference", NOISY.name, m) == _values(rows, "inference", "reference", m)
    # accuracy against the experimental structure: the perturbed run's own, and the reference's
    ref_lddt = _values(rows, "inference", "reference", "lddt_ca")
    assert _values(rows, "inference", NOISY.name, "lddt_ca_reference") == ref_lddt
    assert _values(rows, "inference", NOISY.name, "lddt_ca") != ref_lddt


def _check_resume(out, rows, weights, partial):
    """An interrupted run (one technique x chain never written) resumes: only that is computed."""
    partial.mkdir()
    kept = [r for r in rows if not (r["technique"] == NOISY.name and r["chain"] == "1a8o_A")]
    (partial / "results.json").write_text(json.dumps({"rows": kept}))
    shutil.copytree(out / "work", partial / "work")  # the kept predictions, as an interrupted run leaves them
    run_ablation(_config(partial, weights), extra_techniques=[NOISY])
    again = json.loads((partial / "results.json").read_text())["rows"]
    stamp = {(r["section"], r["technique"], r["chain"], r["measure"], r["step"]): r["finished_at"] for r in again}
    for r in kept:  # every finished row kept as it was
        assert stamp[(r["section"], r["technique"], r["chain"], r["measure"], r["step"])] == r["finished_at"]
    redone = [r for r in again if r["technique"] == NOISY.name and r["chain"] == "1a8o_A"]
    assert {r["measure"] for r in redone} >= set(INFERENCE_MEASURES)
    # the same policy as the kept reference rows: their peak RSS, no second fresh process
    assert _values(redone, "inference", NOISY.name, "peak_rss_bytes") == [
        r["value"]
        for r in kept
        if r["technique"] == "reference" and r["chain"] == "1a8o_A" and r["measure"] == "peak_rss_bytes"
    ]
    assert len(again) == len(rows)


def test_cli_lists_techniques_and_rejects_bad_options(capsys, tmp_path):
    assert cli_main(["ablate", "--list-techniques"]) == 0
    listed = capsys.readouterr().out
    assert "preset:low_memory_inference" in listed and "not here" in listed
    assert cli_main(["ablate"]) == 2
    assert cli_main(["ablate", "--out", str(tmp_path / "x"), "--techniques", "no-such"]) == 2
    assert "unknown technique" in capsys.readouterr().err


def test_technique_rows_carry_the_exact_policy():
    t = next(t for t in derive_techniques() if t.name == "chunk_size=4")
    assert t.policy_json() == {**dataclasses.asdict(MemoryPolicy(chunk_size=4)), "dap": 1}


def test_dap_rows_run_through_predict_with_dap(tiny_weights, tmp_path, monkeypatch):
    """A DAP row runs ``alphafold-mem predict --dap 2`` (two real gloo processes), one batch per MSA
    directory (here: one chain with an MSA, one without), and reads its outputs back per chain: the
    per-rank peak from timings.json, the deviation from the one-process reference, the accuracy.

    The command ``run_dap`` launches (checked: ``python -m alphafold_mem.cli predict ... --dap 2``
    with the repository on PYTHONPATH) runs through the CLI's ``main`` in this process, its two ranks
    forked: 6 fresh interpreters were 2/3 of this test's CPU time, and the launch of ``predict --dap``
    as a user runs it is tested end to end in tests/test_dap_cli.py."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    from alphafold_mem.ablation import dap
    from alphafold_mem.ablation.chains import chain_features, discover_chains
    from alphafold_mem.ablation.scores import Prediction
    from alphafold_mem.cli import dap_launch
    from alphafold_mem.weights import load_weights

    launched = []

    def run_in_process(cmd, capture_output, text, env):
        assert cmd[:4] == [sys.executable, "-m", "alphafold_mem.cli", "predict"] and capture_output and text
        assert str(dap.ROOT) in env["PYTHONPATH"].split(os.pathsep)
        launched.append(cmd)
        return subprocess.CompletedProcess(cmd, cli_main(cmd[3:]), "", "")

    def run_forked(fn, nprocs, run, args, threads, **kw):  # one thread per forked rank, as in tests/test_dap.py
        return run_local(fn, nprocs, run, args, 1, start_method="fork", timeout=240, **kw)

    run_local = dap_launch.run_local
    monkeypatch.setattr(dap, "subprocess", SimpleNamespace(run=run_in_process))
    monkeypatch.setattr(dap_launch, "run_local", run_forked)

    rows = [t for t in derive_techniques() if t.dap > 1]
    assert [t.name for t in rows] == ["dap=2", "dap=4"] and all(t.skip_reason("inference", "cpu") is None for t in rows)
    chains = discover_chains(CHAINS)
    assert sorted(bool(c.msa_files) for c in chains) == [False, True]
    model = load_weights(tiny_weights).model
    with torch.no_grad():
        refs = {c.name: Prediction.from_output(model(chain_features(c, model.config))) for c in chains}
    run = SimpleNamespace(work_dir=tmp_path, config={}, weights=str(tiny_weights), seed=0, device=torch.device("cpu"))
    out = dap.run_dap(run, rows[0], chains, refs)
    assert all(r.get("status") != "failed" for r in out), out
    assert len(launched) == 2 and all(cmd[cmd.index("--dap") + 1] == "2" for cmd in launched)
    assert sorted((tmp_path / "dap" / "P2").iterdir()) == [
        tmp_path / "dap" / "P2" / "batch0",
        tmp_path / "dap" / "P2" / "batch1",
    ]
    for c in chains:
        got = {r["measure"]: r for r in out if r["chain"] == c.name}
        assert got["peak_counter_bytes"]["value"] > 0 and "per-rank" in got["peak_counter_bytes"]["reason"]
        assert got["seconds"]["value"] > 0
        assert got["ca_rmsd_to_reference"]["value"] < 5e-3  # the PDB file's 1e-3 Å rounding
        assert got["plddt_max_abs_diff"]["value"] < 0.01 and got["lddt_ca"]["value"] > 0
    assert dap.largest_peak_mib({"ranks": [{"peak_mib": 3.0}, {"peak_mib": 5.5}], "seconds": 9}) == 5.5


def test_planner_limit_counts_cpu_time_not_wall_time():
    """A loaded machine must not cut a prediction short: waiting is not counted, computing is."""
    import time

    from alphafold_mem.ablation.planning import PlannerTimeout, _time_limit

    with _time_limit(0.2):
        time.sleep(0.4)  # no CPU used: no timeout
    with pytest.raises(PlannerTimeout, match="CPU seconds"):
        with _time_limit(0.2):
            while True:
                sum(range(1000))
