"""The OpenFold side-by-side driver (benchmarks/openfold.py, outside the installed package): its cell
arithmetic, scripts/compare_openfold.py's modes, and the rows it adds to an ablation result directory."""

from alphafold_mem.memory.host import MMAP_ENV
from benchmarks.openfold import ALLOCATORS, median_cell, run_ratios


def test_median_cell_takes_median_of_numbers_and_keeps_labels():
    runs = [
        {"seconds": 3.0, "rss_bytes": 10, "malloc": "applied: x"},
        {"seconds": 1.0, "rss_bytes": 30, "malloc": "applied: x"},
    ]
    cell = median_cell(runs)
    assert cell == {"seconds": 2.0, "rss_bytes": 20, "malloc": "applied: x"}
    assert median_cell(runs + [{"error": "boom"}]) == {"error": "boom"}


def test_run_ratios_pair_the_interleaved_runs_and_skip_failures():
    ours = [{"seconds": 9.0}, {"seconds": 8.0}, {"error": "killed"}, {"seconds": 6.0}]
    openfold = [{"seconds": 10.0}, {"seconds": 8.0}, {"seconds": 5.0}, {"error": "boom"}]
    assert run_ratios(ours, openfold) == [0.9, 1.0]
    assert run_ratios([{"rss_bytes": 3}], [{"rss_bytes": 4}], key="rss_bytes") == [0.75]
    assert run_ratios([{"seconds": 1.0}], [{"seconds": 0.0}]) == []


def test_allocator_environments():
    assert ALLOCATORS["default"] == {}
    assert ALLOCATORS["glibc"] == {"ALPHAFOLD_MEM_MALLOC": "default"}
    assert ALLOCATORS["release"] == {"ALPHAFOLD_MEM_MALLOC": "release"}
    assert ALLOCATORS["mmap"]["MALLOC_MMAP_THRESHOLD_"] == "65536"
    # the standalone measure cannot import the package: its copy of the ablation RSS worker's environment
    assert ALLOCATORS["mmap"] == MMAP_ENV


FAKE_CONFIG = """
from types import SimpleNamespace as NS


def model_config(preset, train=False):
    stack = lambda: NS(tune_chunk_size=True, no_blocks=48)  # noqa: E731
    return NS(globals=NS(chunk_size=None, use_lma=False, blocks_per_ckpt=None),
              model=NS(evoformer_stack=stack(), extra_msa=NS(extra_msa_stack=stack()),
                       template=NS(template_pair_stack=stack())))
"""

FAKE_MODEL = '''
import torch


class AlphaFold(torch.nn.Module):
    """A stand-in with OpenFold's constructor and call: a config in, a feature dict in, outputs out."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.linear = torch.nn.Linear(1, 3)

    def forward(self, batch):
        x = batch["aatype"][..., 0].float()[..., None]  # [N_res, 1]
        return {"final_atom_positions": self.linear(x)}
'''


def test_same_process_mode_times_both_models_alternately(tmp_path, capsys):
    """``compare_openfold.py --same-process K``: one process per cell runs OpenFold's model (here a
    stand-in checkout with OpenFold's module layout) and ours, K timed runs each; the table gives the
    median of the per-round ratios and the JSON every run."""
    import json

    (tmp_path / "openfold" / "model").mkdir(parents=True)
    (tmp_path / "openfold" / "__init__.py").write_text("")
    (tmp_path / "openfold" / "model" / "__init__.py").write_text("")
    (tmp_path / "openfold" / "config.py").write_text(FAKE_CONFIG)
    (tmp_path / "openfold" / "model" / "model.py").write_text(FAKE_MODEL)
    compare = _compare_script()
    out = tmp_path / "rows.json"
    rc = compare.main(
        [
            "--openfold-src",
            str(tmp_path),
            "--n-res",
            "12",
            "--n-seq",
            "3",
            "--n-extra",
            "4",
            "--templates",
            "1",
            "--evo-blocks",
            "1",
            "--extra-blocks",
            "1",
            "--settings",
            "chunk4",
            "--allocator",
            "default",
            "--same-process",
            "3",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    (row,) = json.loads(out.read_text())
    assert (row["n_res"], row["setting"]) == (12, "chunk4")
    for side in ("openfold", "ours"):
        assert len(row[f"{side}_seconds"]) == 3 and all(s > 0 for s in row[f"{side}_seconds"])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 12 ")]
    ratios = [o / f for o, f in zip(row["ours_seconds"], row["openfold_seconds"])]
    assert table and f"{sorted(ratios)[1]:.3f}" in table[0]


def _compare_script():
    import importlib.util
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "compare_openfold.py"
    spec = importlib.util.spec_from_file_location("compare_openfold", script)
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    return compare


def test_against_itself_pairs_fresh_runs_of_one_side(tmp_path, capsys, monkeypatch):
    """``compare_openfold.py --against-itself ours --repeats 3``: two fresh runs per repeat of the one
    side (A, B, A, B, ...), each pair's time and RSS ratio, and the count of pairs above 1.0. The runs
    are replaced by a recorder with known times, so the ratios and the count are checked exactly."""
    import json

    compare = _compare_script()
    times = iter([10.0, 8.0, 9.0, 9.0, 8.0, 10.0])
    calls = []

    def fake_run_cell(setup, side, n_res, setting, allocator, tmp, alternations=3):
        calls.append(side)
        return {"seconds": next(times), "rss_bytes": 4_000_000 + 1_000_000 * len(calls)}

    monkeypatch.setattr(compare, "run_cell", fake_run_cell)
    out = tmp_path / "rows.json"
    rc = compare.main(
        [
            "--against-itself",
            "ours",
            "--n-res",
            "12",
            "--settings",
            "chunk4",
            "--allocator",
            "default",
            "--repeats",
            "3",
            "--json",
            str(out),
        ]
    )
    assert rc == 0 and calls == ["ours"] * 6
    (row,) = json.loads(out.read_text())
    assert row["seconds_ratio_per_run"] == [1.25, 1.0, 0.8]
    assert row["rss_ratio_per_run"] == [5 / 6, 7 / 8, 9 / 10]
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| 12 ")]
    assert "| 1.25, 1.00, 0.80 | 1 of 3 |" in line


def test_against_itself_openfold_needs_a_checkout():
    import pytest

    with pytest.raises(SystemExit):
        _compare_script().main(["--against-itself", "openfold", "--n-res", "12"])


def test_ablation_out_adds_the_openfold_section_to_an_ablation_directory(tmp_path, monkeypatch, capsys):
    """``compare_openfold.py --ablation-out DIR``: one cell per side x setting x N_res (allocator mmap)
    becomes rows ``openfold:<setting>`` / ``ours:<setting>`` beside the rows already there, and the
    report gets its OpenFold section. The cells are replaced by a recorder with known results; a
    second run keeps the finished cells."""
    import json

    from alphafold_mem.ablation.results import ResultStore, row

    compare = _compare_script()
    import benchmarks.openfold as driver

    calls = []

    def fake_run_cell(setup, side, n_res, setting, allocator, tmp, alternations=3):
        calls.append((side, n_res, setting, allocator))
        seconds = {"openfold": 4.0, "ours": 3.0}[side]
        return {
            "seconds": seconds,
            "cpu_s": seconds,
            "rss_bytes": 2e8,
            **({"counter_bytes": 1e8} if side == "ours" else {}),
        }

    monkeypatch.setattr(driver, "run_cell", fake_run_cell)
    out = tmp_path / "ablation"
    ResultStore(out, {}).add([row("inference", "reference", "1lcd_A", "seconds", 1.0)])
    argv = ["--openfold-src", str(tmp_path), "--n-res", "12", "--settings", "chunk4", "low_memory"]
    assert compare.main(argv + ["--ablation-out", str(out)]) == 0
    assert calls == [
        (side, 12, setting, "mmap") for setting in ("chunk4", "low_memory") for side in ("openfold", "ours")
    ]
    rows = json.loads((out / "results.json").read_text())["rows"]
    got = {(r["technique"], r["measure"]): r["value"] for r in rows if r["section"] == "openfold"}
    assert got[("openfold:chunk4", "seconds")] == 4.0 and got[("ours:low_memory", "peak_counter_bytes")] == 1e8
    assert ("reference", "seconds") in {(r["technique"], r["measure"]) for r in rows if r["section"] == "inference"}
    report = (out / "report.md").read_text()
    assert "## OpenFold side by side" in report
    assert f"report: {out / 'report.md'}" in capsys.readouterr().out
    assert compare.main(argv + ["--ablation-out", str(out)]) == 0 and len(calls) == 4  # finished cells kept


def test_ablation_out_needs_a_checkout(tmp_path):
    import pytest

    with pytest.raises(SystemExit):
        _compare_script().main(["--ablation-out", str(tmp_path)])
