"""The OpenFold side-by-side driver's cell arithmetic (alphafold_mem.ablation.openfold)."""

from alphafold_mem.ablation.openfold import ALLOCATORS, median_cell, run_ratios


def test_median_cell_takes_median_of_numbers_and_keeps_labels():
    runs = [{"seconds": 3.0, "rss_bytes": 10, "malloc": "applied: x"},
            {"seconds": 1.0, "rss_bytes": 30, "malloc": "applied: x"}]
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


FAKE_CONFIG = '''
from types import SimpleNamespace as NS


def model_config(preset, train=False):
    stack = lambda: NS(tune_chunk_size=True, no_blocks=48)  # noqa: E731
    return NS(globals=NS(chunk_size=None, use_lma=False, blocks_per_ckpt=None),
              model=NS(evoformer_stack=stack(), extra_msa=NS(extra_msa_stack=stack()),
                       template=NS(template_pair_stack=stack())))
'''

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
    import importlib.util
    import json
    import pathlib

    (tmp_path / "openfold" / "model").mkdir(parents=True)
    (tmp_path / "openfold" / "__init__.py").write_text("")
    (tmp_path / "openfold" / "model" / "__init__.py").write_text("")
    (tmp_path / "openfold" / "config.py").write_text(FAKE_CONFIG)
    (tmp_path / "openfold" / "model" / "model.py").write_text(FAKE_MODEL)
    script = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "compare_openfold.py"
    spec = importlib.util.spec_from_file_location("compare_openfold", script)
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    out = tmp_path / "rows.json"
    rc = compare.main(["--openfold-src", str(tmp_path), "--n-res", "12", "--n-seq", "3", "--n-extra", "4",
                       "--templates", "1", "--evo-blocks", "1", "--extra-blocks", "1", "--settings", "chunk4",
                       "--allocator", "default", "--same-process", "3", "--json", str(out)])
    assert rc == 0
    (row,) = json.loads(out.read_text())
    assert (row["n_res"], row["setting"]) == (12, "chunk4")
    for side in ("openfold", "ours"):
        assert len(row[f"{side}_seconds"]) == 3 and all(s > 0 for s in row[f"{side}_seconds"])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 12 ")]
    ratios = [o / f for o, f in zip(row["ours_seconds"], row["openfold_seconds"])]
    assert table and f"{sorted(ratios)[1]:.3f}" in table[0]
