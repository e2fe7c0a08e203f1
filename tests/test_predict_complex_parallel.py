"""Complexes in parallel, on the monomer route's launchers: ``predict --dap 2`` shares each complex
between two gloo processes (:mod:`alphafold_mem.cli.dap_launch`) and gives what one process gives;
``predict --devices 2`` spreads complexes over two processes (:mod:`alphafold_mem.cli.devices_launch`),
each complex's outputs written once by one rank, a failing complex failing alone.

Small AF2-Multimer weights made here (tiny_multimer, random init, heads perturbed as in
tests/test_predict_complex.py), the PDB complexes of tests/data/complexes/fasta cut to their first
residues, no recycling, CPU. Every multi-process run is bounded: the CLI (its launcher in this
process, its ranks spawned interpreters) by a faulthandler timeout that ends this process, the
in-process DAP run in :func:`alphafold_mem.distributed.run_local` (forked ranks) with a timeout
(gloo on 127.0.0.1, every collective with the process group's timeout, a failing rank ends the others)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from alphafold_mem.distributed import COUNTER, run_local
from alphafold_mem.predict import complex_run
from alphafold_mem.weights.af2_npz import export_af2_params
from alphafold_mem.weights.checkpoints import save_checkpoint

from .predict_cli import main_bounded
from .test_predict_complex import _model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "complexes" / "fasta"
RUN_TIMEOUT_S = 600  # a bound, not an expectation (a loaded 2-core machine)
# DAP reorders reductions (sums over sharded axes, then gathered): float32 rounding may differ, nothing
# else. These bounds sit far above that noise (gloo on CPU gave equal bits at these sizes)
# and far below any real difference (a wrong shard or gather moves atoms by Å and ipTM by >1e-3).
COORD_TOL_A = 1e-4
IPTM_TOL = 1e-5
KEYS = ("final_atom_positions", "plddt", "predicted_aligned_error", "chain_pair_iptm", "iptm", "ptm")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """AF2-Multimer-format tiny_multimer.npz, and monomer weights with a PAE head (tiny.ckpt: the
    chain-gap route) beside it."""
    path = tmp_path_factory.mktemp("params")
    export_af2_params(_model(1), path / "tiny_multimer.npz")
    save_checkpoint(_model(2, "tiny"), path / "tiny.ckpt")
    return path


@pytest.fixture(scope="module")
def weights(folder) -> Path:
    return folder / "tiny_multimer.npz"


def _cut(source: Path, dest: Path, n: int) -> Path:
    """A copy of the FASTA ``source`` with every chain cut to its first ``n`` residues."""
    records = []
    for line in source.read_text().splitlines():
        if line.startswith(">"):
            records.append([line, ""])
        elif line.strip():
            records[-1][1] += line.strip()
    dest.write_text("".join(f"{h}\n{s[:n]}\n" for h, s in records))
    return dest


def _cli(capfd, *args) -> tuple[int, str]:
    """``alphafold-mem predict ARGS --device cpu`` with its launcher in this process (the launchers
    are started as commands, fresh interpreters, in tests/test_predict_faults_dap.py (--dap) and
    tests/test_predict_devices.py (--devices); their ranks are spawned interpreters here too): exit
    status and stderr (:func:`tests.predict_cli.main_bounded`)."""
    return main_bounded(capfd, ["predict", *map(str, args), "--device", "cpu"], RUN_TIMEOUT_S)


# -- --dap 2 --------------------------------------------------------------------------------------


def _msa_dir(root: Path, fasta: Path) -> Path:
    """Per-chain folders ``<id>_<chain>/`` of ``fasta`` with 20 mutated rows each (seeds sample differently)."""
    rng, aa = random.Random(0), "ACDEFGHIKLMNPQRSTVWY"
    lines = fasta.read_text().splitlines()
    for header, seq in zip(lines[::2], lines[1::2]):
        rows = [seq] + ["".join(c if rng.random() < 0.7 else rng.choice(aa) for c in seq) for _ in range(20)]
        folder = root / header[1:].split()[0]  # 4zhl_U: the record id
        folder.mkdir(parents=True)
        (folder / "uniref90_hits.a3m").write_text("".join(f">s{i}\n{row}\n" for i, row in enumerate(rows)))
    return root


def _captured_run(fasta: Path, out: Path, weights: Path, dap: int, msa_dir: Path) -> dict:
    """:func:`predict_complexes` on ``fasta`` with the raw model outputs of every prediction captured
    (the files round coordinates to 1e-3 Å and ipTM to 1e-4): ``{tag: {key: array}}``, the order and
    the bytes this process received in the model's collectives."""
    captured: dict = {}
    write = complex_run.write_prediction

    def capture(target_dir, tag, t, arrays, **kw):
        captured[tag] = {k: np.asarray(arrays[k], np.float64) for k in KEYS}
        return write(target_dir, tag, t, arrays, **kw)

    complex_run.write_prediction = capture  # this process only (a test run, or a rank of run_local)
    before = COUNTER.total("forward")  # the counter is per process: earlier tests in it count too
    try:
        run = complex_run.predict_complexes(
            fasta,
            out,
            one_complex=True,
            weights=weights,
            num_predictions_per_model=2,
            num_recycles=0,
            device="cpu",
            msa_dir=msa_dir,
            dap=dap,
            log=lambda line: None,
        )
    finally:
        complex_run.write_prediction = write
    return {"arrays": captured, "order": run.order, "errors": run.errors, "received": COUNTER.total("forward") - before}


def _dap_rank(rank: int, world: int, fasta: str, out: str, weights: str, msa_dir: str) -> dict:
    torch.set_num_threads(1)
    return _captured_run(Path(fasta), Path(out), Path(weights), world, Path(msa_dir))


@pytest.mark.parametrize("file", ["tiny_multimer.npz", "tiny.ckpt"])
def test_dap_2_equals_one_process(tmp_path, folder, file):
    """The in-process run, AF2-Multimer weights and monomer weights on the chain-gap route (ipTM from
    the PAE head on each rank's rows): every raw output of every prediction within DAP's rounding
    noise, the same ranking, and the same files (rank 0 alone writes)."""
    weights = folder / file
    fasta = _cut(DATA / "4zhl.fasta", tmp_path / "4zhl.fasta", 14)  # U 14 + P 10 residues
    msas = _msa_dir(tmp_path / "msas", fasta)
    one = _captured_run(fasta, tmp_path / "one", weights, 1, msas)
    # forked ranks (fresh interpreters under the launcher: test_cli_dap_2_writes_what_one_process_writes)
    two = run_local(
        _dap_rank,
        2,
        str(fasta),
        str(tmp_path / "two"),
        str(weights),
        str(msas),
        start_method="fork",
        timeout=RUN_TIMEOUT_S,
    )[0]
    assert one["errors"] == [] and two["errors"] == []
    assert one["received"] == 0 and two["received"] > 0  # the representations were sharded and exchanged
    assert two["order"] == one["order"] and len(one["order"]["4zhl"]) == 2
    assert sorted(two["arrays"]) == sorted(one["arrays"])
    for tag, ref in one["arrays"].items():
        got = two["arrays"][tag]
        coords = np.linalg.norm(got["final_atom_positions"] - ref["final_atom_positions"], axis=-1)
        assert coords.max() <= COORD_TOL_A, (tag, coords.max())
        assert abs(float(got["iptm"]) - float(ref["iptm"])) <= IPTM_TOL, tag
        assert abs(float(got["ptm"]) - float(ref["ptm"])) <= IPTM_TOL, tag
        assert np.abs(got["chain_pair_iptm"] - ref["chain_pair_iptm"]).max() <= IPTM_TOL, tag
        assert np.abs(got["plddt"] - ref["plddt"]).max() <= 1e-3, tag
        assert np.abs(got["predicted_aligned_error"] - ref["predicted_aligned_error"]).max() <= 1e-3, tag
    files = sorted(p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").rglob("*"))
    assert sorted(p.relative_to(tmp_path / "two").as_posix() for p in (tmp_path / "two").rglob("*")) == files


def test_cli_dap_2_writes_what_one_process_writes(tmp_path, weights, capfd):
    """``alphafold-mem predict --dap 2`` on ':' records: the same files as one process, the same ranking,
    the written scores and coordinates equal to their printed precision; a complex of no more residues
    than processes fails on both ranks in one line and the next complex still runs (exit 1)."""
    pair = ">pair\nMKTAYIAKQRQISFVKSHFS:GSHMLEDPVDAFQW\n"
    (tmp_path / "pair.fasta").write_text(pair)
    (tmp_path / "batch.fasta").write_text(">tiny\nM:G\n" + pair)
    common = ["--weights", weights, "--num-recycles", "0", "--num-predictions-per-model", "2"]
    # both in this process (the ranks under test are --dap 2's, in fresh interpreters)
    one, _ = _cli(capfd, tmp_path / "pair.fasta", *common, "--out", tmp_path / "one")
    two, stderr = _cli(capfd, tmp_path / "batch.fasta", *common, "--out", tmp_path / "two", "--dap", "2")
    assert one == 0
    assert two == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "complex 'tiny'" in errors[0] and "--dap 2" in errors[0], stderr
    assert not (tmp_path / "two" / "tiny").exists()
    files = sorted(p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").rglob("*"))
    assert sorted(p.relative_to(tmp_path / "two").as_posix() for p in (tmp_path / "two").rglob("*")) == files
    assert "pair/ranked_0.pdb" in files and "pair/ranked_1.pdb" in files
    r1, r2 = (json.loads((tmp_path / d / "pair" / "ranking_debug.json").read_text()) for d in ("one", "two"))
    assert r2["order"] == r1["order"]
    s1, s2 = (json.loads((tmp_path / d / "pair" / "pair_scores.json").read_text()) for d in ("one", "two"))
    assert abs(s1["iptm"] - s2["iptm"]) <= 1e-4 + 1e-9  # written with 4 decimals
    for rank in (0, 1):
        a, b = (_atoms(tmp_path / d / "pair" / f"ranked_{rank}.pdb") for d in ("one", "two"))
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-3 + 1e-9  # written with 3 decimals


def _atoms(path: Path) -> np.ndarray:
    return np.array(
        [[float(x[30:38]), float(x[38:46]), float(x[46:54])] for x in path.read_text().splitlines() if x[:4] == "ATOM"]
    )


# -- --devices 2 ----------------------------------------------------------------------------------


def test_devices_2_writes_each_complex_once_and_a_failing_one_fails_alone(tmp_path, weights, capfd):
    """Three real complexes (cut) and a fourth whose output folder cannot be made (a file is in its
    place): the three are ranked, each by exactly one rank; the fourth fails in one line; exit 1."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    sizes = {"4zhl": 12, "3u8v": 16, "5eil": 8}  # 22, 32 and 24 residues
    for name, n in sizes.items():
        _cut(DATA / f"{name}.fasta", inputs / f"{name}.fasta", n)
    (inputs / "blocked.fasta").write_text(">blocked_A\nMKTAYIAKQRQ\n>blocked_B\nGSHMLEDPVDA\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "blocked").write_text("a file where the complex's folder goes\n")
    code, stderr = _cli(
        capfd, inputs, "--complex", "--weights", weights, "--num-recycles", "0", "--out", out, "--devices", "2"
    )
    assert code == 1, stderr
    for name in sizes:
        assert (out / name / "ranked_0.pdb").is_file(), stderr
        assert sorted(p.name for p in (out / name).glob("*_pred_*.pdb")) == ["tiny_multimer_pred_0.pdb"]
        ranked = [line for line in stderr.splitlines() if f"] {name}: ranked " in line]
        assert len(ranked) == 1, stderr  # one rank ran it
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "complex 'blocked'" in errors[0], stderr
    timings = json.loads((out / "timings.json").read_text())
    shared = [name for r in timings["ranks"] for name in r["targets"]]
    assert sorted(shared) == sorted([*sizes, "blocked"])  # every complex on exactly one rank
    assert timings["ranks"][0]["targets"][0] == "3u8v"  # the longest first
    assert {n: timings["targets"][n]["status"] for n in shared} == {**dict.fromkeys(sizes, "ok"), "blocked": "failed"}
