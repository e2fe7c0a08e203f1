"""A complex that fits under no policy gets the largest complex like it that would (issue 43, item 6):
``memory-plan --chains`` prints one line (and ``"largest"`` in ``--json``) with every chain cropped to
one fraction and the first chains whole, each searched by the planner; the advised complexes, planned
on their own, fit, and one step bigger does not. (predict's pre-flight note: tests/test_predict_complex.py,
``test_complex_over_max_memory_is_one_line_and_the_next_runs``.)"""

from __future__ import annotations

import json
import shlex

import pytest

from alphafold_mem.cli import main, memory_plan_complex
from alphafold_mem.cli.main import build_parser
from alphafold_mem.cli.memory_args import predict_request
from alphafold_mem.planner import Chains
from alphafold_mem.planner.largest import frugal_policy, scaled_chains

#: tiny_multimer at 100+100+300 residues needs about 0.08 GiB under the most frugal policy; 44 MiB less
#: the CPU margin (32 MiB) leaves about 0.0117 GiB: some 250 residues fit.
BASE = ["--preset", "tiny_multimer", "--max-memory", "44MiB", "--device", "cpu", "--precision", "fp32"]
BASE += ["--no-progress"]


def _plan(capsys, lengths, json_=True) -> tuple[int, dict | str]:
    argv = ["memory-plan", "--chains", ",".join(map(str, lengths)), *BASE] + (["--json"] if json_ else [])
    code = main(argv)
    out = capsys.readouterr().out
    return code, (json.loads(out) if json_ else out)


def test_scaled_chains_keep_entities_and_equal_chains():
    chains = Chains((300, 100, 300), (1, 2, 1))
    half = scaled_chains(chains, 350)
    assert half.lengths == (150, 50, 150) and half.entity_ids == (1, 2, 1)
    assert scaled_chains(chains, 3).lengths == (1, 1, 1)  # every chain keeps a residue
    assert scaled_chains(chains, chains.n_res) == chains


def test_memory_plan_complex_that_does_not_fit_gets_the_largest_that_would(capsys):
    code, plan = _plan(capsys, (100, 100, 300))
    assert code == 1 and plan["recommended"] is None
    largest = plan["largest"]
    usable = plan["config"]["usable_budget_bytes"]
    assert largest["usable_budget_bytes"] == usable and not largest["whole_fits"]
    cropped, bigger = largest["cropped"], largest["bigger"]
    # proportional: one fraction for every chain (floors), the bigger one a step further
    assert cropped[0] == cropped[1] and abs(cropped[2] / cropped[0] - 3) < 0.1, cropped
    assert sum(cropped) == largest["cropped_n_res"] < sum(bigger) < 500
    assert 0 < largest["cropped_peak_bytes"] <= usable
    assert largest["first_chains"] == 2 and largest["first_chains_n_res"] == 200
    assert 0 < largest["first_chains_peak_bytes"] <= usable
    flags = largest["flags"]
    assert flags.startswith("predict --low-memory") and flags.endswith("--preset tiny_multimer")
    # the flags bind the policy the search ran under
    request = predict_request(
        build_parser().parse_args(["predict", "x.fasta", "--out", "o", *shlex.split(flags)[1:-2]])
    )
    assert request == frugal_policy("fp32", "cpu")
    # planned on their own: the advised complexes fit; one step bigger does not
    code, fit = _plan(capsys, cropped)
    assert code == 0 and fit["recommended"]["peak_bytes"] <= usable and fit.get("largest") is None
    with pytest.MonkeyPatch.context() as mp:  # its exit status only: no search of its own largest complex
        mp.setattr(memory_plan_complex, "largest", lambda *a, **k: None)
        assert _plan(capsys, bigger)[0] == 1
    assert _plan(capsys, (100, 100))[0] == 0
    # the text output: one line, figures in GiB, the command that runs it
    code, out = _plan(capsys, (100, 100, 300), json_=False)
    lines = [line for line in out.splitlines() if line.startswith("the largest that fits")]
    assert code == 1 and len(lines) == 1, out
    line = lines[0]
    assert f"{'+'.join(map(str, cropped))} = {sum(cropped)} residues" in line and " GiB" in line
    assert f"{sum(bigger)} residues do not fit" in line
    assert "the first 2 chains whole (A+B: 100+100 = 200 residues" in line and "drop C" in line
    assert line.endswith(f"flags: alphafold-mem {flags}")
