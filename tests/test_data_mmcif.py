"""mmCIF / PDB parsing on the real structures in data/, checked against Biopython's own reading."""

import pathlib
import time

import numpy as np
import pytest
from Bio.PDB import MMCIFParser
from Bio.PDB.MMCIF2Dict import MMCIF2Dict

from alphafold_mem.data import InputError, InputWarning, parse_fasta, parse_mmcif, parse_pdb, read_structure
from alphafold_mem.geometry import residue_constants as rc

DATA = pathlib.Path(__file__).parent.parent / "data"
CA = rc.atom_order["CA"]


def _fasta(pdb_id, chain):
    return {r.name: r.sequence for r in parse_fasta(DATA / f"fasta/per_entry/{pdb_id}.fasta")}[f"{pdb_id}_{chain}"]


def _ca_ca(chain):
    m = chain.atom37_mask[:, CA] > 0
    both = m[1:] & m[:-1]
    return np.linalg.norm(np.diff(chain.atom37_positions[:, CA], axis=0), axis=-1)[both]


def test_altlocs_unresolved_against_biopython():
    """3U8V A: sequence = SEQRES, masks 0 exactly at unresolved atoms, altloc = Bio.PDB's choice."""
    path = DATA / "mmcif/3u8v.cif"
    chain = parse_mmcif(path, "A")
    assert chain.sequence == _fasta("3u8v", "A") and len(chain) == 93
    d = MMCIF2Dict(str(path))
    unobs = {
        int(s) - 1
        for s, a in zip(
            d["_pdbx_unobs_or_zero_occ_residues.label_seq_id"], d["_pdbx_unobs_or_zero_occ_residues.label_asym_id"]
        )
        if a == "A"
    }
    assert set(np.flatnonzero(chain.atom37_mask.sum(-1) == 0)) == unobs
    # Atom level: same atoms and coordinates as Bio.PDB's structure (highest-occupancy altloc).
    scheme = {
        (int(n), i if i not in ".?" else " "): int(s) - 1
        for n, i, s, c in zip(
            d["_pdbx_poly_seq_scheme.pdb_seq_num"],
            d["_pdbx_poly_seq_scheme.pdb_ins_code"],
            d["_pdbx_poly_seq_scheme.seq_id"],
            d["_pdbx_poly_seq_scheme.pdb_strand_id"],
        )
        if c == "A"
    }
    expected_mask = np.zeros_like(chain.atom37_mask)
    expected_pos = np.zeros_like(chain.atom37_positions)
    bio = MMCIFParser(QUIET=True).get_structure("x", str(path))[0]["A"]
    for res in bio:
        if res.id[0] != " ":
            continue
        k = scheme[(res.id[1], res.id[2])]
        for atom in res:
            a = rc.atom_order.get(atom.get_id())
            if a is not None and rc.restype_atom37_mask[chain.aatype[k], a]:
                expected_mask[k, a] = 1.0
                expected_pos[k, a] = atom.coord
    # AF2 renames arginine NH1/NH2 so that NH1 is the one closer to CD; Bio.PDB keeps the file's names.
    cd, nh1, nh2 = (rc.atom_order[a] for a in ("CD", "NH1", "NH2"))
    for k in np.flatnonzero(chain.aatype == rc.restype_order["R"]):
        if expected_mask[k, [cd, nh1, nh2]].all() and (
            np.linalg.norm(expected_pos[k, nh1] - expected_pos[k, cd])
            > np.linalg.norm(expected_pos[k, nh2] - expected_pos[k, cd])
        ):
            expected_pos[k, [nh1, nh2]] = expected_pos[k, [nh2, nh1]]
    np.testing.assert_array_equal(chain.atom37_mask, expected_mask)
    np.testing.assert_allclose(chain.atom37_positions, expected_pos, atol=1e-4)
    assert np.all(np.abs(_ca_ca(chain) - 3.8) <= 0.1)


def test_mse_and_zero_occupancy():
    chain = parse_mmcif(DATA / "mmcif/1a8o.cif")
    assert chain.sequence == _fasta("1a8o", "A")
    d = MMCIF2Dict(str(DATA / "mmcif/1a8o.cif"))
    mse = sorted(
        {int(s) - 1 for s, c in zip(d["_atom_site.label_seq_id"], d["_atom_site.label_comp_id"]) if c == "MSE"}
    )
    assert mse and all(chain.sequence[k] == "M" for k in mse)
    assert all(chain.atom37_mask[k, rc.atom_order["SD"]] == 1 for k in mse)  # SE stored as SD
    zero = [
        (int(s) - 1, a)
        for s, a, o in zip(d["_atom_site.label_seq_id"], d["_atom_site.label_atom_id"], d["_atom_site.occupancy"])
        if float(o) == 0.0
    ]
    assert zero and all(chain.atom37_mask[k, rc.atom_order[a]] == 0 for k, a in zero)
    assert np.all(np.abs(_ca_ca(chain) - 3.8) <= 0.1)


def test_legacy_pdb_matches_mmcif_and_maps_gaps():
    cif, pdb = parse_mmcif(DATA / "mmcif/1a8o.cif"), parse_pdb(DATA / "pdb/1a8o.pdb")
    assert cif.sequence == pdb.sequence and pdb.resolution == pytest.approx(1.7)
    np.testing.assert_array_equal(cif.atom37_mask, pdb.atom37_mask)
    np.testing.assert_allclose(cif.atom37_positions, pdb.atom37_positions, atol=1e-3)
    # 3HTN (PDB format): MSE, altlocs and unresolved residues, incl. an internal gap in chain B.
    s = read_structure(DATA / "pdb/3htn.pdb")
    assert list(s.chains) == ["A", "B", "C"]
    for cid, chain in s.chains.items():
        assert chain.sequence == _fasta("3htn", cid)
        off = np.abs(_ca_ca(chain) - 3.8) > 0.15
        # The one exception is a real altloc junction: C GLU166 is best as altloc A (0.60) and
        # C ARG167 as altloc B (0.60); per-atom highest occupancy (AF2/Bio.PDB rule) joins them at 4.2 Å.
        assert off.sum() == (1 if cid == "C" else 0)
    unresolved = np.flatnonzero(s.chain("B").atom37_mask[:, CA] == 0)
    assert len(unresolved) == 10 and 0 < unresolved[-1] < 148  # internal gap placed inside the chain


def test_nmr_first_model_and_model_choice():
    s1 = read_structure(DATA / "mmcif/1lcd.cif")
    assert s1.num_models == 3 and s1.model == 1 and s1.resolution is None
    assert list(s1.chains) == ["A"] and s1.chain("A").sequence == _fasta("1lcd", "A")  # DNA chains ignored
    s2 = read_structure(DATA / "mmcif/1lcd.cif", model=2)
    assert not np.allclose(s1.chain("A").atom37_positions, s2.chain("A").atom37_positions)
    with pytest.raises(InputError, match="model 7 not in file"):
        read_structure(DATA / "mmcif/1lcd.cif", model=7)


def test_chain_selection_by_auth_or_label():
    path = DATA / "mmcif/2q2k.cif"
    a = parse_mmcif(path, "A")
    assert a.chain_id == "A" and a.label_asym_id == "B" and a.num_resolved == 45
    assert parse_mmcif(path, "B", id_type="label").chain_id == "A"
    assert parse_mmcif(path).chain_id == "A"
    with pytest.raises(InputError, match=r"by auth_asym_id: A, B; by label_asym_id: B, C") as exc:
        parse_mmcif(path, "Q")
    assert exc.value.file.endswith("2q2k.cif") and exc.value.record == "Q"
    assert a.resolution == pytest.approx(3.0) and a.release_date == "2008-02-05"
    assert np.all(a.atom37_mask[:20] == 0)  # His-tag: in the sequence, not in the crystal


def test_sequence_from_atoms_without_entity_poly_seq():
    s = read_structure(DATA / "mmcif/721p-assembly1.cif")
    assert s.chain("A").sequence == _fasta("721p", "A") and s.chain("A").num_resolved == 166


def test_duplicate_atoms_warned_and_bad_files(tmp_path):
    lines = (DATA / "mmcif/1a8o.cif").read_text().splitlines(keepends=True)
    first_atom = next(i for i, line in enumerate(lines) if line.startswith("ATOM"))
    dup = tmp_path / "dup.cif"
    dup.write_text("".join(lines[: first_atom + 1] + [lines[first_atom]] + lines[first_atom + 1 :]))
    with pytest.warns(InputWarning, match="1 duplicate atom record"):
        chain = parse_mmcif(dup)
    np.testing.assert_array_equal(chain.atom37_mask, parse_mmcif(DATA / "mmcif/1a8o.cif").atom37_mask)
    bad = tmp_path / "bad.cif"
    bad.write_text("data_x\n_cell.length_a 1.0\n")
    with pytest.raises(InputError, match="no _atom_site") as exc:
        parse_mmcif(bad)
    assert exc.value.file == str(bad)
    with pytest.raises(InputError, match="unknown structure format"):
        read_structure(tmp_path / "x.xyz")


def test_parse_speed_of_shipped_set():
    files = sorted((DATA / "mmcif").iterdir()) + sorted((DATA / "pdb").iterdir())
    t0 = time.perf_counter()
    for f in files:
        read_structure(f)
    per_structure = (time.perf_counter() - t0) / len(files)
    print(f"parse: {per_structure:.3f} s per structure over {len(files)} files")
    assert per_structure < 1.0
