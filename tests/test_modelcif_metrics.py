"""The QA-metric table (``_ma_qa_metric``) of the chain and complex ModelCIF writers, which share
their metric classes (:mod:`alphafold_mem.predict.outputs.qa_metrics`) but not their descriptions."""

from __future__ import annotations

import numpy as np

from alphafold_mem.data.complex import make_complex
from alphafold_mem.predict.outputs.complex_files import write_complex_modelcif
from alphafold_mem.predict.outputs.modelcif import write_modelcif
from alphafold_mem.predict.outputs.qa_metrics import ascii_text


def _arrays(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 37, 3)) * 10, (rng.random((n, 37)) > 0.5).astype(np.float32), rng.random(n) * 100


def _metric_rows(path) -> list[str]:
    """The rows of the ``_ma_qa_metric`` loop, as written."""
    lines = path.read_text().splitlines()
    start = lines.index("_ma_qa_metric.software_group_id") + 1
    return lines[start : lines.index("#", start)]


def test_chain_metrics_are_over_the_chain(tmp_path):
    pos, mask, plddt = _arrays(9)
    write_modelcif(tmp_path / "m.cif", "t1", np.arange(9) % 21, pos, mask, plddt, ptm=0.8)
    assert _metric_rows(tmp_path / "m.cif") == [
        "1 pLDDT 'Predicted lDDT-CA per residue (0-100).' pLDDT local . .",
        "2 pLDDT 'Mean predicted lDDT-CA over the chain (0-100).' pLDDT global . .",
        "3 pTM 'Predicted TM-score (0-1).' pTM global . .",
    ]


def test_complex_metrics_are_over_the_complex(tmp_path):
    cx = make_complex([("A", "MKTAYIAKQR"), ("B", "MKTAYIAKQR"), ("C", "GSHMXX")], name="cx")
    pos, mask, plddt = _arrays(cx.num_res)
    write_complex_modelcif(tmp_path / "c.cif", cx, pos, mask, plddt, ptm=0.7, iptm=0.65)
    assert _metric_rows(tmp_path / "c.cif") == [
        "1 pLDDT 'Predicted lDDT-CA per residue (0-100).' pLDDT local . .",
        "2 pLDDT 'Mean predicted lDDT-CA over the complex (0-100).' pLDDT global . .",
        "3 pTM 'Predicted TM-score of the complex (0-1).' pTM global . .",
        "4 ipTM 'Interface predicted TM-score (0-1, AF2-Multimer).' ipTM global . .",
    ]


def test_ascii_text_folds_space_and_replaces_non_ascii():
    assert ascii_text("  a\tb\n é ") == "a b ?"
