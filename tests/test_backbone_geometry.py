"""scripts/backbone_geometry.py: consecutive Cα-Cα distances on a real experimental chain."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from backbone_geometry import consecutive_ca_distances  # noqa: E402


def test_experimental_chain_has_trans_peptide_spacing():
    d = consecutive_ca_distances(ROOT / "data" / "mmcif" / "1lcd.cif")["A"]
    assert d.size == 50
    # trans peptide bonds: consecutive Cα atoms 3.80 Å apart (Engh & Huber geometry), within 0.1 Å
    assert abs(d.mean() - 3.80) < 0.1
    assert d.min() > 3.6 and d.max() < 4.0


def test_unreadable_file_named(tmp_path):
    bad = tmp_path / "broken.pdb"
    bad.write_text("not a structure\n")
    with pytest.raises(ValueError, match="broken.pdb"):
        consecutive_ca_distances(bad)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "backbone_geometry.py"), str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "broken.pdb" in proc.stderr
