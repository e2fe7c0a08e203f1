"""scripts/demo_weights_report.py: the README's demo-weights figures, printed from the training record."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import demo_weights_report  # noqa: E402


def test_report_prints_lddt_rmsd_size_parameters_and_minutes(capsys):
    assert demo_weights_report.main([]) == 0
    out = capsys.readouterr().out
    assert "| lDDT-Cα (full chains, EMA weights) |" in out and "| Cα-RMSD (Å) (full chains, EMA weights) |" in out
    assert out.count("| 8 training chains (") == 2 and out.count("| 4 held-out chains") == 2
    size = (ROOT / "data" / "demo_weights" / "demo.ckpt").stat().st_size
    assert f"{size:,} bytes" in out and " parameters (preset demo)" in out
    assert "# stage 1: " in out and " min (" in out
