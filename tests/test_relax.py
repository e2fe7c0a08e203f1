"""Amber relaxation (AF2 protocol, OpenMM + pdbfixer): an experimental chain, a chain with an X
residue, and ``predict --relax`` from a bare FASTA with the search databases of ``data/search``."""

import json
import warnings

import numpy as np
import pytest

from alphafold_mem.data import parse_mmcif, read_structure
from alphafold_mem.geometry import residue_constants as rc
from alphafold_mem.predict.outputs import write_pdb
from alphafold_mem.predict.relax import RelaxError, relax_structure, violation_metrics

from .conftest import REPO_DATA
from .predict_cli import prediction

openmm = pytest.importorskip("openmm", reason="OpenMM is not installed (pip install 'alphafold_mem[relax]')")
pytest.importorskip("pdbfixer", reason="pdbfixer is not installed (pip install 'alphafold_mem[relax]')")


def _write_chain(chain, path, aatype=None):
    """The chain as PDB without hydrogens; X residues keep their backbone (N, CA, C, O)."""
    aatype = chain.aatype if aatype is None else aatype
    mask = chain.atom37_mask.copy()
    unk = aatype == rc.unk_restype_index
    mask[unk] *= np.isin(np.arange(37), [rc.atom_order[a] for a in ("N", "CA", "C", "O")])
    write_pdb(
        path,
        chain.name,
        aatype,
        chain.atom37_positions,
        mask,
        chain.atom37_mask[:, 1] * 50.0 + np.arange(len(chain)) * 0.1,
    )


def test_relax_experimental_chain(tmp_path):
    chain = parse_mmcif(REPO_DATA / "mmcif" / "1a8o.cif")  # MSE -> MET; written without hydrogens
    src = tmp_path / "1a8o_A.pdb"
    _write_chain(chain, src)
    out = tmp_path / "1a8o_A_relaxed.pdb"
    result = relax_structure(src, out)
    assert result.violations_after["clashing_atoms"] == 0 and result.violations_after["bond_violations"] == 0
    assert result.ca_rmsd <= 0.5 and result.final_energy < result.initial_energy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        relaxed = read_structure(out).chains["A"]
    heavy = rc.restype_atom37_mask[relaxed.aatype].copy()
    heavy[:, rc.atom_order["OXT"]] = 0
    assert np.array_equal(relaxed.atom37_mask * heavy, heavy)  # every heavy atom of every residue
    # every hydrogen: Amber99sb finds a template for every residue of the written file
    from openmm import app

    pdb = app.PDBFile(str(out))
    app.ForceField("amber99sb.xml").createSystem(pdb.topology)
    assert sum(a.element.symbol == "H" for a in pdb.topology.atoms()) > 500
    # B-factors kept per residue
    bfac = {(int(line[22:26])): float(line[60:66]) for line in out.read_text().splitlines() if line.startswith("ATOM")}
    assert bfac[1] == pytest.approx(50.0) and bfac[70] == pytest.approx(56.9)


def test_relax_keeps_x_residues_and_reports_failures(tmp_path, monkeypatch):
    chain = parse_mmcif(REPO_DATA / "mmcif" / "1lcd.cif")
    aatype = chain.aatype.copy()
    aatype[20] = rc.unk_restype_index  # a residue the force field cannot parametrise: backbone only
    src = tmp_path / "x.pdb"
    _write_chain(chain, src, aatype)
    result = relax_structure(src, tmp_path / "x_relaxed.pdb")
    assert result.excluded_residues == ["A:X21"] and result.violations_after["clashing_atoms"] == 0
    text = (tmp_path / "x_relaxed.pdb").read_text()
    unk = [line for line in text.splitlines() if line.startswith("ATOM") and line[17:20] == "UNK"]
    assert len(unk) == 4 and all(int(line[22:26]) == 21 for line in unk)
    from alphafold_mem.predict.relax import amber

    monkeypatch.setattr(
        amber,
        "require_openmm",
        lambda: (_ for _ in ()).throw(
            RelaxError(
                "Amber relaxation needs OpenMM and pdbfixer (openmm is missing): pip install 'alphafold_mem[relax]'"
            )
        ),
    )
    with pytest.raises(RelaxError, match=r"pip install 'alphafold_mem\[relax\]'"):
        relax_structure(src, tmp_path / "never.pdb")
    assert not (tmp_path / "never.pdb").exists()


def test_violation_check_counts_the_demo_clashes(tmp_path):
    chain = parse_mmcif(REPO_DATA / "mmcif" / "1a8o.cif")
    pos = chain.atom37_positions.copy()
    pos[10] = pos[11]  # two residues on top of each other
    m = violation_metrics(chain.aatype, pos, chain.atom37_mask, np.arange(len(chain)))
    assert m["clashing_atoms"] > 0 and m["bond_violations"] > 0 and 10 in m["violating_residue_indices"]


def test_predict_from_bare_fasta_with_search_templates_and_relax(tmp_path):
    pytest.importorskip("pyhmmer", reason="pyhmmer is not installed")
    from alphafold_mem.cli import main

    fasta = REPO_DATA / "fasta" / "per_entry" / "1lcd.fasta"  # the main job's chain, demo weights
    search = REPO_DATA / "search"
    args = [
        "predict",
        str(fasta),
        "--db",
        str(search / "homologs.fasta"),
        "--template-db",
        str(search / "pdb_seqres.txt"),
        "--mmcif-dir",
        str(REPO_DATA / "mmcif"),
        "--relax",
        "--out",
        str(tmp_path),
        "--no-track-memory",
        "--no-progress",
    ]
    assert main(args) == 0
    scores = json.loads(prediction(tmp_path, "1lcd_A", "_scores.json").read_text())
    assert scores["msa_files"] == ["homologs_hits.a3m"] and scores["msa_depth"] > 100  # no local paths
    hits = {h["name"]: h for h in scores["templates"]["hits"]}
    assert hits["1lcd_A"]["status"] == "dropped" and "identical to the query" in hits["1lcd_A"]["reason"]
    relax = scores["relax"]
    assert relax["status"] == "ok", relax
    assert relax["violations_before"]["clashing_atoms"] > relax["violations_after"]["clashing_atoms"] == 0
    relaxed_pdb = prediction(tmp_path, "1lcd_A", "_relaxed.pdb")
    assert prediction(tmp_path, "1lcd_A").exists() and relaxed_pdb.exists()
    assert (tmp_path / "1lcd_A" / "ranked_0_relaxed.pdb").read_bytes() == relaxed_pdb.read_bytes()
    unrelaxed = read_structure(prediction(tmp_path, "1lcd_A")).chains["A"]
    relaxed_lines = [line for line in relaxed_pdb.read_text().splitlines() if line.startswith("ATOM")]
    plddt = {int(line[22:26]): float(line[60:66]) for line in relaxed_lines}
    assert [plddt[i + 1] for i in range(51)] == pytest.approx(scores["plddt"], abs=0.01)
    assert unrelaxed.num_resolved == 51
