"""``predict --relax`` on a complex (issue 43): every prediction is relaxed as a monomer's is (AF2's
Amber protocol, OpenMM + pdbfixer) into ``<model>_pred_<k>_relaxed.pdb`` and ``ranked_<r>_relaxed.pdb``
with the chain ids, residue counts and numbers kept, every chain its own (its ends are termini: no
peptide bond joins two chains) and no more violations than before.

The tiny random multimer weights of the complex tests put every atom near the origin, which no force
field can take: the model's coordinates are replaced by two stretches of the experimental 1A8O chain
(residues 1-14 and 25-38, the complex's chains A and B), so that the prediction written, relaxed and
ranked is a physical one; everything after the forward is predict's own path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alphafold_mem.cli.main import main
from alphafold_mem.data import parse_mmcif, read_structure
from alphafold_mem.predict import complex_run
from alphafold_mem.predict.complex_outputs import relax_predictions
from alphafold_mem.predict.stages import PipelineOptions
from alphafold_mem.weights.af2_npz import export_af2_params

from .conftest import REPO_DATA
from .test_predict_complex import _model

pytest.importorskip("openmm", reason="OpenMM is not installed (pip install 'alphafold_mem[relax]')")
pytest.importorskip("pdbfixer", reason="pdbfixer is not installed (pip install 'alphafold_mem[relax]')")

A, B = slice(0, 14), slice(24, 38)


def test_predict_relax_on_a_complex_keeps_chains_and_joins_none(tmp_path, monkeypatch, capsys):
    chain = parse_mmcif(REPO_DATA / "mmcif" / "1a8o.cif")
    pos = np.concatenate([chain.atom37_positions[A], chain.atom37_positions[B]])
    mask = np.concatenate([chain.atom37_mask[A], chain.atom37_mask[B]])
    forward = complex_run._forward

    def physical(*args, **kwargs):
        arrays = forward(*args, **kwargs)
        arrays["final_atom_positions"], arrays["final_atom_mask"] = pos.astype(np.float32), mask.astype(np.float32)
        return arrays

    monkeypatch.setattr(complex_run, "_forward", physical)
    weights = tmp_path / "params_model_1_multimer_v3.npz"
    export_af2_params(_model(1), weights)
    fasta = tmp_path / "two.fasta"
    fasta.write_text(f">two\n{chain.sequence[A]}:{chain.sequence[B]}\n")
    out = tmp_path / "out"
    argv = ["predict", str(fasta), "--out", str(out), "--weights", str(weights), "--preset", "tiny_multimer"]
    assert main([*argv, "--device", "cpu", "--num-recycles", "0", "--relax", "--no-progress"]) == 0

    folder, tag = out / "two", "model_1_multimer_v3_pred_0"
    assert f"relax: {tag}: " in capsys.readouterr().err
    relaxed = folder / f"{tag}_relaxed.pdb"
    assert (folder / "ranked_0_relaxed.pdb").read_bytes() == relaxed.read_bytes()
    assert (folder / f"{tag}.pdb").exists() and (folder / "ranked_0.pdb").exists()  # the unrelaxed model stays
    scores = json.loads((folder / f"{tag}_scores.json").read_text())
    record = scores["relax"]
    assert record["status"] == "ok" and record["relaxed_pdb"] == relaxed.name, record
    for key, before in record["violations_before"].items():
        assert record["violations_after"][key] <= before, key
    ranked = json.loads((folder / "two_scores.json").read_text())["predictions"][0]
    assert ranked["ranked_relaxed_pdb"] == "ranked_0_relaxed.pdb"

    # chain ids, residue counts and numbers as predicted; pLDDT kept in the B-factors
    with pytest.warns(Warning, match="no SEQRES"):
        structure = read_structure(relaxed)
    assert {cid: len(c) for cid, c in structure.chains.items()} == {"A": 14, "B": 14}
    assert [c.sequence for c in structure.chains.values()] == [chain.sequence[A], chain.sequence[B]]
    atoms = [line for line in relaxed.read_text().splitlines() if line.startswith("ATOM")]
    numbers = {cid: sorted({int(a[22:26]) for a in atoms if a[21] == cid}) for cid in "AB"}
    assert numbers == {"A": list(range(1, 15)), "B": list(range(1, 15))}
    plddt = {(a[21], int(a[22:26])): float(a[60:66]) for a in atoms}
    assert [plddt[("A", i + 1)] for i in range(14)] + [plddt[("B", i + 1)] for i in range(14)] == pytest.approx(
        scores["plddt"], abs=0.01
    )

    # every chain its own: a C terminus (OXT) at each chain's end, an N terminus (H2, H3) at each start,
    # and A's last C far from B's first N (no peptide bond across the chain break)
    def atom(cid: str, number: int, name: str) -> np.ndarray:
        found = [a for a in atoms if a[21] == cid and int(a[22:26]) == number and a[12:16].strip() == name]
        assert len(found) == 1, (cid, number, name)
        return np.array([float(found[0][30:38]), float(found[0][38:46]), float(found[0][46:54])])

    for cid in "AB":
        atom(cid, 14, "OXT"), atom(cid, 1, "H2"), atom(cid, 1, "H3")
    assert np.linalg.norm(atom("A", 14, "C") - atom("B", 1, "N")) > 3.0


def test_a_complex_without_a_pdb_file_is_not_relaxed_and_says_so(tmp_path):
    """Chain ids too long for the PDB format: mmCIF only, no relaxation, one note; without --relax nothing."""
    (tmp_path / "m_pred_0.cif").write_text("data_x\n")
    lines: list[str] = []
    relax_predictions(str(tmp_path), ["m_pred_0"], PipelineOptions(relax=True, progress=False), lines.append)
    assert len(lines) == 1 and lines[0].startswith("note: relax: m_pred_0: chain ids too long for the PDB format")
    relax_predictions(str(tmp_path), ["m_pred_0"], PipelineOptions(progress=False), lines.append)
    relax_predictions(str(tmp_path), ["m_pred_0"], None, lines.append)
    assert len(lines) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["m_pred_0.cif"]
