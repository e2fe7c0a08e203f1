"""``predict --dap 2`` on a complex with searches (issue 43): the launcher runs the sequence search
(``--db``) and the template search (``--template-db``) once, before its two ranks start
(:mod:`alphafold_mem.predict.complex_presearch`); the ranks read them and give what one process gives.

The complex: 1LCD (51 residues, whose homologues are in ``data/search/homologs.fasta``) and the first
60 of the 154 residues of a one-residue mutant of 102M (templates 102M and 8F9H in ``data/search``;
cut for a cheaper forward, both chains still get alignments and templates), tiny AF2-Multimer weights
(tests/test_predict_complex.py), no recycling, CPU. Both runs go through the CLI's ``main`` in this
process; the ``--dap 2`` launcher's ranks are fresh interpreters (the launcher as a command is started
in tests/test_predict_faults_dap.py), bounded as in tests/test_predict_complex_parallel.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alphafold_mem.cli import main
from alphafold_mem.weights.af2_npz import export_af2_params

from .conftest import REPO_DATA
from .test_complex_templates import MMCIF_DIRS, MUTANT, SEQ_1LCD
from .test_predict_complex import _model
from .test_predict_complex_parallel import _atoms, _cli


def test_dap_2_with_db_and_template_search_equals_one_process(tmp_path, capfd):
    pytest.importorskip("pyhmmer", reason="pyhmmer is not installed")
    weights = tmp_path / "tiny_multimer.npz"
    export_af2_params(_model(1), weights)
    fasta = tmp_path / "cx.fasta"
    fasta.write_text(f">cx_L\n{SEQ_1LCD}\n>cx_M\n{MUTANT[:60]}\n")  # chains L and M
    common = [fasta, "--complex", "--weights", weights, "--num-recycles", "0", "--save-features", "--no-progress"]
    search = REPO_DATA / "search"
    common += ["--db", search / "homologs.fasta", "--template-db", search / "pdb_seqres.txt"]
    for d in MMCIF_DIRS:
        common += ["--mmcif-dir", d]
    one = main(["predict", *map(str, [*common, "--out", tmp_path / "one"]), "--device", "cpu"])
    code, err = _cli(capfd, *common, "--out", tmp_path / "two", "--dap", "2")  # ranks spawned
    assert one == 0
    assert code == 0, err
    # searched once: one jackhmmer line per chain and one template search per entity, then reused by the ranks
    searches = [line for line in err.splitlines() if line.startswith("search: ") and "reusing" not in line]
    assert sum(" vs homologs" in line for line in searches) == 2, err
    assert sum(" templates: " in line for line in searches) == 2, err
    assert sum("templates: reusing" in line for line in err.splitlines()) == 2, err
    # the same files, features (alignments and templates), ranking, scores and coordinates
    files = sorted(p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").rglob("*"))
    assert sorted(p.relative_to(tmp_path / "two").as_posix() for p in (tmp_path / "two").rglob("*")) == files
    f1, f2 = (np.load(tmp_path / d / "cx" / "cx_features.npz") for d in ("one", "two"))
    assert sorted(f1.files) == sorted(f2.files) and "template_all_atom_positions" in f1.files
    for key in f1.files:
        np.testing.assert_array_equal(f1[key], f2[key], err_msg=key)
    assert f1["msa"].shape[0] > 10 and f1["template_mask"].sum() >= 1  # the searches found something
    s1, s2 = (json.loads((tmp_path / d / "cx" / "cx_scores.json").read_text()) for d in ("one", "two"))
    assert s2["order"] == s1["order"] and s1["templates"]["used"]
    same_hits = json.dumps(s1["templates"]).replace(str(tmp_path / "one"), str(tmp_path / "two"))
    assert json.loads(same_hits) == s2["templates"]  # hits files under each run's --out
    assert abs(s1["iptm"] - s2["iptm"]) <= 1e-4 + 1e-9  # written with 4 decimals
    a, b = (_atoms(tmp_path / d / "cx" / "ranked_0.pdb") for d in ("one", "two"))
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-3 + 1e-9  # written with 3 decimals
