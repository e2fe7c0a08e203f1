"""What ``predict`` says and records about a run: the chunking the pre-flight chose, sizes in the
does-not-fit line, the architecture in the scores JSON, the timings a rerun keeps, the template
folders in the provenance, and the one place the command line's options become predict's arguments."""

from __future__ import annotations

import inspect
import json
import os
import re
from pathlib import Path

import pytest
import torch

from alphafold_mem.cli.main import build_parser
from alphafold_mem.cli.predict_options import predict_options
from alphafold_mem.config import model_config
from alphafold_mem.memory.policy import AutoPolicy, MemoryPolicy
from alphafold_mem.model import AlphaFold
from alphafold_mem.predict import predict, preflight
from alphafold_mem.predict.provenance import describe_changes, partition_finished
from alphafold_mem.predict.runner import chunking
from alphafold_mem.predict.stages import PipelineOptions
from alphafold_mem.predict.targets import Target
from alphafold_mem.weights import save_checkpoint
from tests.predict_cli import prediction

RECORDS = {"a": "MKPVTLYDVAEYAGVSYQTV", "b": "SRVVNQASHVSAKTREKVEAAMAE"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("records")
    save_checkpoint(AlphaFold(model_config("tiny")), d / "tiny.ckpt")
    (d / "two.fasta").write_text("".join(f">{k}\n{v}\n" for k, v in RECORDS.items()))
    return d


def _predict(tiny: Path, out: Path, lines: list[str], **options):
    options = {"single_sequence": True, "num_recycles": 0, "track_memory": False, "device": "cpu", **options}
    return predict(tiny / "two.fasta", out, weights=tiny / "tiny.ckpt", log=lines.append, **options)


def test_the_chosen_policy_line_names_the_chunking_and_a_rerun_keeps_the_timings(tiny, tmp_path):
    out, lines = tmp_path / "out", []
    assert _predict(tiny, out, lines).exit_code == 0
    chosen = [ln for ln in lines if "memory policy chosen:" in ln]
    assert len(chosen) == 2, lines
    for line in chosen:  # "auto" resolves to a concrete policy: its chunk, or no chunking
        assert re.search(r", (no chunking|chunk size \d+)$", line) and "None" not in line, line
    weights_line = next(ln for ln in lines if ln.startswith("weights:"))
    assert re.search(r"budget \d+\.\d\d GiB,", weights_line), weights_line
    first = json.loads((out / "timings.json").read_text())
    assert {"a/model", "b/model"} <= set(first["stages"])

    # a rerun that skips both targets: their stages and seconds are those of the run that produced them
    again = []
    assert _predict(tiny, out, again).exit_code == 0
    assert sum(ln.startswith("skip:") for ln in again) == 2, again
    kept = json.loads((out / "timings.json").read_text())
    for name in RECORDS:
        assert kept["targets"][name]["status"] == "skipped"
        assert kept["targets"][name]["seconds"] == first["targets"][name]["seconds"] > 0
        stages = {k: v for k, v in kept["stages"].items() if k.startswith(f"{name}/")}
        assert stages == {k: v for k, v in first["stages"].items() if k.startswith(f"{name}/")} != {}

    # one target recomputed (its scores file removed): its records are new, the other's kept. The stored
    # records are marked first (a measured time can repeat to the stored precision: not a test of "new")
    marked = json.loads((out / "timings.json").read_text())
    for key in ("a/model", "b/model"):
        marked["stages"][key]["seconds"] = -1.0
    (out / "timings.json").write_text(json.dumps(marked))
    os.remove(prediction(out, "b", "_scores.json"))
    third = []
    assert _predict(tiny, out, third).exit_code == 0
    mixed = json.loads((out / "timings.json").read_text())
    assert mixed["targets"]["a"]["status"] == "skipped" and mixed["targets"]["b"]["status"] == "ok"
    assert mixed["stages"]["a/model"] == marked["stages"]["a/model"]  # kept as stored
    assert mixed["stages"]["b/model"]["seconds"] >= 0  # measured again
    scores = json.loads(prediction(out, "a", "_scores.json").read_text())
    assert scores["architecture"] == "tiny"  # the field names it; the value is the preset alone


def test_chunking_names_the_chunk_or_none():
    assert chunking(MemoryPolicy()) == "no chunking"
    assert chunking(MemoryPolicy(chunk_size=16)) == "chunk size 16"


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0.00 GiB"), (1000, "9.31e-07 GiB"), (25 * 2**20, "0.0244 GiB"), (80 * 2**30, "80.00 GiB")],
)
def test_format_bytes_prints_gib(n, text):
    assert preflight.format_bytes(n) == text


@pytest.mark.parametrize("request_", [MemoryPolicy(max_memory=1000), AutoPolicy(max_memory=1000)])
def test_a_small_does_not_fit_line_shows_its_sizes(request_):
    cfg = model_config("tiny")
    fit = preflight.check(cfg, preflight.feature_sizes(cfg, 20, 1), request_, torch.device("cpu"))
    assert not fit.fits and "0.00 GiB" not in fit.message, fit.message  # no size reads as zero
    assert re.fullmatch(
        r"20 residues need 0\.0\d+ GiB \(predicted, .+\) but the budget is 9\.31e-07 GiB "
        r"less a 0\.0\d+ GiB device margin \(docs/memory-budget\.md\); try --low-memory, .+",
        fit.message,
    ), fit.message


def test_template_folders_of_one_name_are_told_apart(tmp_path):
    weights = tmp_path / "w.ckpt"
    weights.write_bytes(b"weights")
    for d in ("data/mmcif", "data/search/mmcif"):
        (tmp_path / d).mkdir(parents=True)
    os.symlink(tmp_path / "data/mmcif", tmp_path / "link")
    options = {"preset": None, "num_recycles": 0, "precision": "fp32", "seed": 0}

    def record(*dirs):
        t = Target("t", "MKVLAGH", "t", f"{tmp_path}/in.fasta:1")
        pipeline = PipelineOptions(mmcif_dirs=tuple(str(tmp_path / d) for d in dirs))
        partition_finished([t], str(tmp_path), str(weights), options, overwrite=False, pipeline=pipeline)
        return t.provenance

    first = record("data/mmcif")
    assert describe_changes(first, record("data/mmcif")) == []  # an unchanged rerun still skips
    assert describe_changes(first, record("link")) == []  # the same folder through a symbolic link
    changed = describe_changes(first, record("data/search/mmcif"))
    assert len(changed) == 1 and changed[0].startswith("pipeline (")
    assert str(tmp_path) not in json.dumps(first)  # names and a digest, no local path
    assert first["options"]["pipeline"]["mmcif_dirs"] == ["mmcif"]
    older = json.loads(json.dumps(first))  # a record of an earlier version: folder names only
    del older["options"]["pipeline"]["mmcif_paths_sha256"]
    assert describe_changes(older, record("data/search/mmcif")) == []
    assert describe_changes(older, record("data/search")) != []


def test_one_function_builds_predicts_arguments_from_the_command_line():
    args = build_parser().parse_args(["predict", "in.fasta", "--out", "o", "--seed", "3", "--record-paths"])
    options = predict_options(args, print, memory_policy="auto", pipeline=None)
    chosen_by_the_caller = {"inputs", "out_dir", "device", "dap", "targets", "output_name", "rank_by"}
    assert set(options) == set(inspect.signature(predict).parameters) - chosen_by_the_caller
    assert options["seed"] == 3 and options["record_paths"] is True and options["memory_policy"] == "auto"
