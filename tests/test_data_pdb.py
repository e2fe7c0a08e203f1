"""The legacy PDB reader lists protein chains named by SEQRES without atoms as the mmCIF reader lists
them (``Structure.dropped``); chains of other molecules (DNA) are not listed."""

import pathlib

import pytest

from alphafold_mem.data import InputError, read_structure

DATA = pathlib.Path(__file__).parent.parent / "data"


def _with_seqres_chains(text: str) -> str:
    """1a8o.pdb with chain A's SEQRES repeated as chain B and a DNA chain C, neither with atoms."""
    lines = text.splitlines(keepends=True)
    seqres_a = [ln for ln in lines if ln.startswith("SEQRES") and ln[11] == "A"]
    extra = [ln[:11] + "B" + ln[12:] for ln in seqres_a]
    extra.append("SEQRES   1 C    3   DA  DT  DG                                              \n")
    at = lines.index(seqres_a[-1]) + 1
    return "".join(lines[:at] + extra + lines[at:])


def test_seqres_chain_without_atoms_is_dropped_as_in_mmcif(tmp_path):
    pdb = tmp_path / "1a8o.pdb"
    pdb.write_text(_with_seqres_chains((DATA / "pdb" / "1a8o.pdb").read_text()))
    cif = tmp_path / "1a8o.cif"
    text = (DATA / "mmcif" / "1a8o.cif").read_text()
    assert text.count("_entity_poly.pdbx_strand_id                 A \n") == 1
    cif.write_text(
        text.replace("_entity_poly.pdbx_strand_id                 A \n", "_entity_poly.pdbx_strand_id  A,B\n")
    )
    from_pdb, from_cif = read_structure(pdb), read_structure(cif)
    assert list(from_pdb.chains) == list(from_cif.chains) == ["A"]
    assert from_pdb.dropped == from_cif.dropped == (("B", "no modelled atoms"),)
    assert read_structure(DATA / "pdb" / "1a8o.pdb").dropped == ()  # every SEQRES chain has atoms


def _atoms(chain: str, serial: int) -> list[str]:
    out = []
    for k, res in enumerate(("MET", "LYS", "GLY")):
        for a, name in enumerate(("N", "CA", "C", "O")):
            x = 3.8 * k + 1.2 * a
            out.append(
                f"ATOM  {serial:5d}  {name:<3s} {res} {chain}{k + 1:4d}    {x:8.3f}{0.0:8.3f}{0.0:8.3f}"
                f"{1.0:6.2f}{20.0:6.2f}           {name[0]}\n"
            )
            serial += 1
    return out


def test_dropped_names_the_model_read(tmp_path):
    seqres = "".join(f"SEQRES   1 {c}    3  MET LYS GLY                                         \n" for c in "AB")
    model_1 = ["MODEL        1\n", *_atoms("A", 1), "ENDMDL\n"]
    model_2 = ["MODEL        2\n", *_atoms("A", 1), *_atoms("B", 13), "ENDMDL\n"]
    path = tmp_path / "nmr.pdb"
    path.write_text(seqres + "".join(model_1 + model_2) + "END\n")
    first = read_structure(path)
    assert list(first.chains) == ["A"] and first.dropped == (("B", "no modelled atoms in model 1"),)
    second = read_structure(path, model=1)
    assert list(second.chains) == ["A", "B"] and second.dropped == ()
    assert second.chains["B"].sequence == "MKG"


def test_seqres_alone_is_still_an_error(tmp_path):
    path = tmp_path / "seqres_only.pdb"
    path.write_text("SEQRES   1 A    3  MET LYS GLY                                         \nEND\n")
    with pytest.raises(InputError, match="no ATOM/HETATM records"):
        read_structure(path)
