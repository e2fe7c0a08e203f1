"""``alphafold-mem ablate``'s training section trains with the templates its training data gives (hit
files in the alignment folders, template mmCIFs from ``templates/``), so the template stack takes part
in the training steps and in the measured step."""

from __future__ import annotations

import re
import shutil
import warnings

import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, model_config
from alphafold_mem.ablation.results import ResultStore
from alphafold_mem.ablation.techniques import Technique
from alphafold_mem.ablation.training import TrainingRun, run_training, template_options
from alphafold_mem.train.data_module import DataOptions

from .conftest import REPO_DATA
from .test_train_templates import HITS, MMCIF, _chain, write_hhr

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """2q2k (template hits in its alignment folder; chains A and B) and 1lcd (alignment, no hits)."""
    if not (MMCIF / "2q2k.cif").is_file():
        pytest.skip("data/ example set not shipped")
    d = tmp_path_factory.mktemp("ablation_templates")
    (d / "mmcif").mkdir()
    for name in ("2q2k.cif", "1lcd.cif"):
        shutil.copy(MMCIF / name, d / "mmcif" / name)
    for name in ("2q2k_A", "1lcd_A"):
        shutil.copytree(REPO_DATA / "alignments" / name, d / "alignments" / name)
    (d / "templates").mkdir()
    for name, src in (("102m", "102m.cif"), ("3u8v", "3u8v.cif"), ("721p", "721p-assembly1.cif")):
        shutil.copy(MMCIF / src, d / "templates" / f"{name}.cif")
    write_hhr(d / "alignments" / "2q2k_A" / "pdb70_hits.hhr", "2q2k_A", _chain("2q2k_A").sequence, HITS)
    return d


def _train(data_dir, out, options):
    cfg = model_config(
        "tiny", **{"num_recycles": 0, "data.crop_size": 24, "data.max_msa_clusters": 4, "data.max_extra_msa": 4}
    )
    torch.manual_seed(0)
    model = AlphaFold(cfg)
    with torch.no_grad():  # AF2 zero-initialises final layers: perturb so the template stack matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    store = ResultStore(out)
    run = TrainingRun(cfg, model.state_dict(), data_dir, out / "index", store, {}, steps=3, data_options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_training(run, [Technique("reference", MemoryPolicy.reference(), "reference")])
    rows = {r["measure"]: r for r in store.rows if r["measure"] != "loss"}
    losses = [r["value"] for r in sorted(store.get("training", "loss"), key=lambda r: r["step"])]
    assert all(r["status"] == "ok" for r in store.rows), store.rows
    return rows, losses


def test_training_section_trains_and_measures_the_template_stack(data_dir, tmp_path):
    options = template_options(data_dir)
    assert options.template_mmcif_dirs == (str(data_dir / "templates"),)
    rows, losses = _train(data_dir, tmp_path / "with", None)  # None: the data's own templates
    peak = rows["train_peak_bytes"]
    held = int(re.search(r"holding (\d+) template", peak["reason"]).group(1))
    assert held >= 1, peak["reason"]  # tiny: at most 2 templates
    assert "2 of 3 training chains have a template hit file" in peak["reason"]  # 2q2k_A, 2q2k_B; not 1lcd_A
    assert peak["config"]["template_mmcif_dirs"] == [str(data_dir / "templates")]
    # the same draws without templates: the template stack changes the training losses
    rows_off, losses_off = _train(data_dir, tmp_path / "without", DataOptions())
    assert rows_off["train_peak_bytes"]["reason"].startswith("no templates")
    assert len(losses) == len(losses_off) == 3 and losses != losses_off
