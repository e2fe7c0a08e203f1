"""mmCIF reader: the protein chains of one model of an mmCIF file (optionally ``.gz``) as
:class:`~.structure.ProteinChain` records.

Files are tokenised by ``Bio.PDB.MMCIF2Dict``; the ``_atom_site`` columns are then gathered with
numpy (no ``Bio.PDB`` ``Structure`` object is built, which keeps a 1 MB file under 0.3 s) and
reduced to atom37 by :func:`~.structure.build_chain` (alternate locations, MSE, modified residues,
arginine naming: see :mod:`.structure`). Entry points: :func:`parse_mmcif` (one chain, by author or
label chain id) and :func:`read_mmcif` (all protein chains).

* residues: ``_entity_poly_seq`` (first monomer where microheterogeneity lists several); atoms are
  placed by ``label_seq_id`` so author numbering, insertion codes and offsets do not matter;
* one model (the first, or ``model=``); NMR ensembles keep their other models out;
* metadata: resolution, first release date and experimental method from the entry's categories.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
from Bio.PDB.MMCIF2Dict import MMCIF2Dict

from .errors import InputError, warn_input
from .structure import ProteinChain, Structure, build_chain, one_letter

__all__ = ["parse_mmcif", "read_mmcif"]


def _valid(values) -> list[str]:
    return [v for v in (values or []) if v not in ("?", ".", "")]


def _first_float(d: dict, keys) -> float | None:
    for key in keys:
        for v in _valid(d.get(key)):
            try:
                return float(v)
            except ValueError:
                continue
    return None


def _read_mmcif_dict(path: str) -> dict:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                return MMCIF2Dict(handle)
        return MMCIF2Dict(path)
    except (ValueError, KeyError, IndexError) as exc:
        raise InputError(f"cannot read mmCIF: {exc}", file=path) from exc


def _entity_sequences(d: dict) -> dict[str, list[str]]:
    """entity id -> SEQRES three-letter names (first monomer of each ``num``)."""
    ent, num, mon = (d.get(f"_entity_poly_seq.{k}") for k in ("entity_id", "num", "mon_id"))
    seqs: dict[str, dict[int, str]] = {}
    if ent and num and mon:
        for e, i, m in zip(ent, num, mon):
            seqs.setdefault(e, {}).setdefault(int(i), m)
    return {e: [s[i] for i in sorted(s)] for e, s in seqs.items()}


def _entity_letters(d: dict) -> dict[str, str]:
    """entity id -> ``pdbx_seq_one_letter_code_can`` without whitespace (may not be 1:1)."""
    ids, can = d.get("_entity_poly.entity_id"), d.get("_entity_poly.pdbx_seq_one_letter_code_can")
    if not ids or not can:
        return {}
    return {e: "".join(c.split()) for e, c in zip(ids, can) if c not in ("?", ".")}


def _protein_entities(d: dict) -> set[str] | None:
    ids, types = d.get("_entity_poly.entity_id"), d.get("_entity_poly.type")
    if not ids or not types:
        return None
    return {e for e, t in zip(ids, types) if t.lower().startswith("polypeptide")}


def parse_mmcif(path, chain_id: str | None = None, *, id_type: str = "auto",
                model: int | None = None) -> ProteinChain:
    """One protein chain of an mmCIF file (optionally ``.gz``); see :func:`read_mmcif` and
    :meth:`Structure.chain` (``chain_id`` is the author chain id, or the ``label_asym_id`` when no
    author id matches; ``None`` = the first protein chain)."""
    return read_mmcif(path, model=model).chain(chain_id, id_type=id_type)


def read_mmcif(path, *, model: int | None = None) -> Structure:
    """Parse the protein chains of an mmCIF file (optionally ``.gz``).

    Args:
        path: the file.
        model: ``pdbx_PDB_model_num`` to read; ``None`` = the first model in the file.

    Returns:
        :class:`Structure` with one :class:`ProteinChain` per author chain id of a
        ``polypeptide`` entity that has at least one atom in the chosen model.

    Raises:
        InputError: unreadable file, no ``_atom_site`` loop, the requested model absent, or no
            protein chain.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("file not found", file=path)
    d = _read_mmcif_dict(path)
    if "_atom_site.Cartn_x" not in d:
        raise InputError("no _atom_site coordinates", file=path)
    pdb_id = (_valid(d.get("_entry.id")) or [Path(path).name.split(".")[0]])[0].lower()
    pdb_id = pdb_id.split("-")[0]

    col = {k: np.asarray(d[f"_atom_site.{k}"]) for k in (
        "label_atom_id", "label_comp_id", "label_asym_id", "label_entity_id", "label_seq_id",
        "auth_asym_id", "Cartn_x", "Cartn_y", "Cartn_z")}
    n_atoms = len(col["Cartn_x"])

    def optional(name, default):
        v = d.get(f"_atom_site.{name}")
        return np.asarray(v) if v is not None else np.full(n_atoms, default)

    models = optional("pdbx_PDB_model_num", "1")
    model_ids = list(dict.fromkeys(models.tolist()))
    chosen = model_ids[0] if model is None else str(model)
    if chosen not in model_ids:
        raise InputError(f"model {model} not in file (models: {', '.join(model_ids[:10])})", file=path)

    proteins = _protein_entities(d)
    polymer = (col["label_seq_id"] != ".") & (col["label_seq_id"] != "?") & (models == chosen)
    if proteins is not None:
        polymer &= np.isin(col["label_entity_id"], list(proteins))
    else:  # no _entity_poly: decide by residue names
        polymer &= np.array([one_letter(c) != "X" or c == "UNK" for c in col["label_comp_id"]])
    idx = np.flatnonzero(polymer)
    if idx.size == 0:
        raise InputError("no protein chain with coordinates", file=path)

    meta = dict(
        resolution=_first_float(d, ("_refine.ls_d_res_high", "_em_3d_reconstruction.resolution",
                                    "_reflns.d_resolution_high")),
        release_date=min(_valid(d.get("_pdbx_audit_revision_history.revision_date"))
                         or _valid(d.get("_database_PDB_rev.date"))
                         or _valid(d.get("_pdbx_database_status.recvd_initial_deposition_date"))
                         or [None]),
        method=", ".join(_valid(d.get("_exptl.method"))),
        model=int(chosen) if chosen.isdigit() else 1,
    )
    entity_seqs = _entity_sequences(d)
    entity_letters = _entity_letters(d)
    seq_id = np.asarray(col["label_seq_id"][idx], dtype=np.int64)
    xyz = np.stack([col["Cartn_x"][idx], col["Cartn_y"][idx], col["Cartn_z"][idx]], -1).astype(np.float32)
    occupancy = optional("occupancy", "1.0")[idx]
    occupancy = np.where(np.isin(occupancy, ["?", "."]), "1.0", occupancy).astype(np.float32)
    bfactor = optional("B_iso_or_equiv", "0.0")[idx]
    bfactor = np.where(np.isin(bfactor, ["?", "."]), "0.0", bfactor).astype(np.float32)
    names, comps = col["label_atom_id"][idx], col["label_comp_id"][idx]
    auth, entity = col["auth_asym_id"][idx], col["label_entity_id"][idx]
    label_asym = col["label_asym_id"][idx]
    altloc = optional("label_alt_id", ".")[idx]

    chains: dict[str, ProteinChain] = {}
    for chain_id in dict.fromkeys(auth.tolist()):
        sel = np.flatnonzero(auth == chain_id)
        ent = entity[sel[0]]
        sel = sel[entity[sel] == ent]  # one polymer entity per author chain
        seqres = entity_seqs.get(ent)
        if seqres is None:  # no _entity_poly_seq (e.g. re-processed assembly files)
            amino = np.array([one_letter(c) != "X" or c == "UNK" for c in comps[sel]], dtype=bool)
            sel = sel[amino]
            if sel.size == 0:
                continue
            by_pos = dict(zip(seq_id[sel].tolist(), comps[sel].tolist()))
            last = max(by_pos)
            if len(by_pos) != last:
                warn_input(f"no _entity_poly_seq; {last - len(by_pos)} unobserved residues filled "
                           "with UNK", file=path, record=chain_id)
            seqres = [by_pos.get(i, "UNK") for i in range(1, last + 1)]
        pos = seq_id[sel] - 1
        if pos.min() < 0 or pos.max() >= len(seqres):
            raise InputError(f"label_seq_id outside 1..{len(seqres)} of entity {ent}", file=path,
                             record=chain_id)
        chains[chain_id] = build_chain(
            pdb_id=pdb_id, chain_id=chain_id, seqres_names=seqres, pos=pos, atom_names=names[sel],
            comp_ids=comps[sel], xyz=xyz[sel], occupancy=occupancy[sel], bfactor=bfactor[sel],
            meta=meta, path=path, letters=entity_letters.get(ent), altloc=altloc[sel],
            label_asym_id=str(label_asym[sel[0]]))
    return Structure(pdb_id=pdb_id, chains=chains, num_models=len(model_ids), path=path, **meta)
