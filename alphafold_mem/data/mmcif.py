"""mmCIF reader: the protein chains of one model of an mmCIF file (optionally ``.gz``) as
:class:`~.structure.ProteinChain` records.

Files are tokenised by ``Bio.PDB.MMCIF2Dict``; the ``_atom_site`` columns are then gathered with
numpy (no ``Bio.PDB`` ``Structure`` object is built, which keeps a 1 MB file under 0.3 s) and
reduced to atom37 by :func:`~.structure.build_chain` (alternate locations, MSE, modified residues,
arginine naming: see :mod:`.structure`). Entry points: :func:`parse_mmcif` (one chain, by author or
label chain id) and :func:`read_mmcif` (all protein chains).

* residues: ``_entity_poly_seq`` (first monomer where microheterogeneity lists several); atoms are
  placed by ``label_seq_id`` so author numbering, insertion codes and offsets do not matter;
* a protein chain without ``label_seq_id`` (and often without ``_entity``/``_entity_poly``, as some
  tools write them) is read from ``_atom_site`` alone: author chain, residues by author number and
  insertion code in file order, with a warning that missing residues cannot be detected;
* protein chains named by ``_entity_poly.pdbx_strand_id`` without atoms are listed in
  ``Structure.dropped``;
* one model (the first, or ``model=``); NMR ensembles keep their other models out;
* metadata: resolution, first release date and experimental method from the entry's categories.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
from Bio.PDB.MMCIF2Dict import MMCIF2Dict

from . import formats
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
        if formats.is_gzip(path):
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


def parse_mmcif(path, chain_id: str | None = None, *, id_type: str = "auto", model: int | None = None) -> ProteinChain:
    """One protein chain of an mmCIF file (optionally ``.gz``); see :func:`read_mmcif` and
    :meth:`Structure.chain` (``chain_id`` is the author chain id, or the ``label_asym_id`` when no
    author id matches; ``None`` = the first protein chain)."""
    return read_mmcif(path, model=model).chain(chain_id, id_type=id_type)


def _strands(d: dict, proteins: set[str] | None) -> list[str]:
    """Author chain ids of the protein entities (``_entity_poly.pdbx_strand_id``), in file order."""
    ids, strands = d.get("_entity_poly.entity_id"), d.get("_entity_poly.pdbx_strand_id")
    if not ids or not strands or proteins is None:
        return []
    out = []
    for e, text in zip(ids, strands):
        if e in proteins and text not in ("?", "."):
            out.extend(c.strip() for c in text.split(",") if c.strip())
    return out


def _residue_keys(seq_num: np.ndarray, ins: np.ndarray) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Residue index (file order of first appearance) of every atom, keyed by author number and
    insertion code, and the keys in that order."""
    keys = list(zip(seq_num.tolist(), np.where(np.isin(ins, ["?", "."]), "", ins).tolist()))
    order: dict[tuple[str, str], int] = {}
    pos = np.array([order.setdefault(k, len(order)) for k in keys], dtype=np.int64)
    return pos, list(order)


def _numbering_gaps(keys: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """``(before, after)`` author numbers where consecutive residues skip numbers."""
    nums = []
    for number, _ in keys:
        try:
            nums.append(int(number))
        except ValueError:
            return []
    return [(a, b) for a, b in zip(nums[:-1], nums[1:]) if b > a + 1]


def _check_atom_site_complete(d: dict, path: str) -> None:
    """Every ``_atom_site`` column has one value per atom; a file cut inside the loop does not."""
    lengths = {k: len(v) for k, v in d.items() if k.startswith("_atom_site.") and isinstance(v, list)}
    if len(set(lengths.values())) > 1:
        short = min(lengths, key=lengths.get)
        raise InputError(
            f"truncated file: the _atom_site table ends inside a row ({lengths[short]} values of {short}, "
            f"{max(lengths.values())} of others)",
            file=path,
        )


def read_mmcif(path, *, model: int | None = None) -> Structure:
    """Parse the protein chains of an mmCIF file (optionally ``.gz``).

    Residues come from ``_entity_poly_seq`` and atoms are placed by ``label_seq_id``. A protein
    chain whose atoms carry no ``label_seq_id`` ('.', '?' or no such column; files written by some
    modelling and conversion tools, often without ``_entity`` / ``_entity_poly`` too) is read from
    ``_atom_site`` alone: author chain, residues in file order keyed by author number
    (``auth_seq_id``) and insertion code; a warning says that residues missing from the model cannot
    be detected there.

    Args:
        path: the file.
        model: ``pdbx_PDB_model_num`` to read; ``None`` = the first model in the file.

    Returns:
        :class:`Structure` with one :class:`ProteinChain` per author chain id of a
        ``polypeptide`` entity that has at least one atom in the chosen model; the protein chains
        named by ``_entity_poly.pdbx_strand_id`` without any atom there are listed in
        ``Structure.dropped``.

    Raises:
        InputError: unreadable file, no ``_atom_site`` loop, an ``_atom_site`` loop cut inside a row
            (a truncated file), the requested model absent, or no protein chain.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("file not found", file=path)
    d = _read_mmcif_dict(path)
    if "_atom_site.Cartn_x" not in d:
        raise InputError("no _atom_site coordinates", file=path)
    _check_atom_site_complete(d, path)
    pdb_id = (_valid(d.get("_entry.id")) or [Path(path).name.split(".")[0]])[0].lower()
    pdb_id = pdb_id.split("-")[0]
    n_atoms = len(d["_atom_site.Cartn_x"])

    def optional(name, default):
        v = d.get(f"_atom_site.{name}")
        return np.asarray(v) if v is not None else np.full(n_atoms, default)

    col = {
        k: optional(k, ".")
        for k in (
            "label_atom_id",
            "label_comp_id",
            "label_asym_id",
            "label_entity_id",
            "label_seq_id",
            "Cartn_x",
            "Cartn_y",
            "Cartn_z",
        )
    }
    for label, auth in (("label_atom_id", "auth_atom_id"), ("label_comp_id", "auth_comp_id")):
        if f"_atom_site.{label}" not in d and f"_atom_site.{auth}" in d:
            col[label] = optional(auth, ".")
    col["auth_asym_id"] = optional("auth_asym_id", ".")
    col["auth_asym_id"] = np.where(col["auth_asym_id"] == ".", col["label_asym_id"], col["auth_asym_id"])

    models = optional("pdbx_PDB_model_num", "1")
    model_ids = list(dict.fromkeys(models.tolist()))
    chosen = model_ids[0] if model is None else str(model)
    if chosen not in model_ids:
        raise InputError(f"model {model} not in file (models: {', '.join(model_ids[:10])})", file=path)

    proteins = _protein_entities(d)
    in_model = models == chosen
    has_seq_id = (col["label_seq_id"] != ".") & (col["label_seq_id"] != "?")
    names_u, inverse = np.unique(col["label_comp_id"], return_inverse=True)  # one lookup per residue name
    amino = np.array([one_letter(c) != "X" or c == "UNK" for c in names_u], dtype=bool)[inverse.reshape(-1)]
    if proteins is not None:
        protein_atom = np.isin(col["label_entity_id"], list(proteins))
    else:  # no _entity_poly: decide by residue names
        protein_atom = amino
    polymer = has_seq_id & in_model & protein_atom
    # _atom_site fallback: author chains of amino-acid residues with no label_seq_id at all (an
    # entity that is known not to be a protein, e.g. a ligand, stays out).
    candidate = in_model & amino & ~has_seq_id
    if proteins is not None:
        candidate &= protein_atom | np.isin(col["label_entity_id"], ["?", "."])
    no_seq_chains = set(col["auth_asym_id"][candidate].tolist())
    no_seq_chains -= set(col["auth_asym_id"][has_seq_id & in_model].tolist())
    group = optional("group_PDB", "ATOM")
    no_seq_chains &= set(col["auth_asym_id"][in_model & (group == "ATOM")].tolist())  # not a lone ligand
    fallback = candidate & np.isin(col["auth_asym_id"], sorted(no_seq_chains))
    idx = np.flatnonzero(polymer | fallback)
    if idx.size == 0:
        raise InputError("no protein chain with coordinates", file=path)

    meta = dict(
        resolution=_first_float(
            d, ("_refine.ls_d_res_high", "_em_3d_reconstruction.resolution", "_reflns.d_resolution_high")
        ),
        release_date=min(
            _valid(d.get("_pdbx_audit_revision_history.revision_date"))
            or _valid(d.get("_database_PDB_rev.date"))
            or _valid(d.get("_pdbx_database_status.recvd_initial_deposition_date"))
            or [None]
        ),
        method=", ".join(_valid(d.get("_exptl.method"))),
        model=int(chosen) if chosen.isdigit() else 1,
    )
    entity_seqs = _entity_sequences(d)
    entity_letters = _entity_letters(d)
    seq_id = np.where(has_seq_id[idx], col["label_seq_id"][idx], "0").astype(np.int64)
    from_atom_site = fallback[idx]
    xyz = np.stack([col["Cartn_x"][idx], col["Cartn_y"][idx], col["Cartn_z"][idx]], -1).astype(np.float32)
    occupancy = optional("occupancy", "1.0")[idx]
    occupancy = np.where(np.isin(occupancy, ["?", "."]), "1.0", occupancy).astype(np.float32)
    bfactor = optional("B_iso_or_equiv", "0.0")[idx]
    bfactor = np.where(np.isin(bfactor, ["?", "."]), "0.0", bfactor).astype(np.float32)
    names, comps = col["label_atom_id"][idx], col["label_comp_id"][idx]
    auth, entity = col["auth_asym_id"][idx], col["label_entity_id"][idx]
    label_asym = col["label_asym_id"][idx]
    altloc = optional("label_alt_id", ".")[idx]
    auth_seq, ins_code = optional("auth_seq_id", "?")[idx], optional("pdbx_PDB_ins_code", "?")[idx]

    chains: dict[str, ProteinChain] = {}
    for chain_id in dict.fromkeys(auth.tolist()):
        sel = np.flatnonzero(auth == chain_id)
        ent = entity[sel[0]]
        if from_atom_site[sel[0]]:
            if np.isin(auth_seq[sel], ["?", "."]).any():
                raise InputError(
                    "no label_seq_id and no auth_seq_id: residues cannot be numbered", file=path, record=chain_id
                )
            pos, keys = _residue_keys(auth_seq[sel], ins_code[sel])
            first = np.unique(pos, return_index=True)[1]  # first atom of each residue
            seqres = [str(c) for c in comps[sel][first]]
            gaps = _numbering_gaps(keys)
            jumps = (
                (
                    f"; author numbering jumps {len(gaps)} time(s) (first {gaps[0][0]} -> {gaps[0][1]}), "
                    "so residues are probably missing there"
                )
                if gaps
                else ""
            )
            warn_input(
                "no label_seq_id (and no _entity_poly_seq) for this chain: residues taken from "
                "_atom_site by author number and insertion code; residues missing from the model "
                f"cannot be detected{jumps}",
                file=path,
                record=chain_id,
            )
            letters = None
        else:
            sel = sel[(entity[sel] == ent) & ~from_atom_site[sel]]  # one polymer entity per author chain
            seqres = entity_seqs.get(ent)
            if seqres is None:  # no _entity_poly_seq (e.g. re-processed assembly files)
                amino_sel = np.array([one_letter(c) != "X" or c == "UNK" for c in comps[sel]], dtype=bool)
                sel = sel[amino_sel]
                if sel.size == 0:
                    continue
                by_pos = dict(zip(seq_id[sel].tolist(), comps[sel].tolist()))
                last = max(by_pos)
                if len(by_pos) != last:
                    warn_input(
                        f"no _entity_poly_seq; {last - len(by_pos)} unobserved residues filled with UNK",
                        file=path,
                        record=chain_id,
                    )
                seqres = [by_pos.get(i, "UNK") for i in range(1, last + 1)]
            pos = seq_id[sel] - 1
            if pos.min() < 0 or pos.max() >= len(seqres):
                raise InputError(f"label_seq_id outside 1..{len(seqres)} of entity {ent}", file=path, record=chain_id)
            letters = entity_letters.get(ent)
        chains[chain_id] = build_chain(
            pdb_id=pdb_id,
            chain_id=chain_id,
            seqres_names=seqres,
            pos=pos,
            atom_names=names[sel],
            comp_ids=comps[sel],
            xyz=xyz[sel],
            occupancy=occupancy[sel],
            bfactor=bfactor[sel],
            meta=meta,
            path=path,
            letters=letters,
            altloc=altloc[sel],
            label_asym_id=None if label_asym[sel[0]] in ("?", ".") else str(label_asym[sel[0]]),
        )
    dropped = tuple(
        (c, "no modelled atoms" + (f" in model {chosen}" if len(model_ids) > 1 else ""))
        for c in dict.fromkeys(_strands(d, proteins))
        if c not in chains
    )
    return Structure(pdb_id=pdb_id, chains=chains, num_models=len(model_ids), path=path, dropped=dropped, **meta)
