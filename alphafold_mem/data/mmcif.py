"""Experimental structures (mmCIF and legacy PDB) as per-chain atom37 records, via Biopython.

mmCIF files are tokenised by ``Bio.PDB.MMCIF2Dict``; the ``_atom_site`` columns are then gathered
with numpy (no ``Structure`` object is built, which keeps a 1 MB file under 0.3 s). Legacy PDB files
are read with ``Bio.PDB.PDBParser`` and their SEQRES with ``Bio.SeqIO`` (``pdb-seqres``).

Entry points: :func:`parse_mmcif` / :func:`parse_pdb` (one chain, by author or label chain id) and
:func:`read_mmcif` / :func:`read_pdb` / :func:`read_structure` (all protein chains of one model).

Every protein chain comes out in SEQRES order (the sequence the MSA was built for), with unresolved
residues present and masked, as AF2 needs for training (Jumper et al. 2021, Suppl. 1.2.1):

* residues: ``_entity_poly_seq`` (first monomer where microheterogeneity lists several); atoms are
  placed by ``label_seq_id`` so author numbering, insertion codes and offsets do not matter;
* one model (the first, or ``model=``); NMR ensembles keep their other models out;
* alternate locations: per atom the highest occupancy wins, first in file on ties; duplicate atom
  records (same residue, atom and altloc) are dropped with a warning; zero-occupancy atoms are
  masked;
* selenomethionine (MSE) becomes MET with SE stored as SD, and modified residues map to their
  parent type (``Bio.Data.PDBData.protein_letters_3to1_extended``) as in AF2; anything else is
  X (index 20) with only its backbone N, CA, C, O kept;
* arginine NH1/NH2 swapped where NH2 is the one closer to CD (AF2 ``templates._get_atom_positions``);
* atoms outside the residue type's heavy-atom set (hydrogens, OXT, modification atoms) dropped.
"""

from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from Bio.Data.PDBData import protein_letters_3to1_extended
from Bio.PDB.MMCIF2Dict import MMCIF2Dict

from ..geometry import residue_constants as rc
from .errors import InputError, warn_input

__all__ = ["ProteinChain", "Structure", "parse_mmcif", "parse_pdb", "read_mmcif", "read_pdb",
           "read_structure", "STRUCTURE_SUFFIXES"]

STRUCTURE_SUFFIXES = (".cif", ".mmcif", ".pdb", ".ent", ".cif.gz", ".mmcif.gz", ".pdb.gz", ".ent.gz")

_BACKBONE = np.zeros(rc.atom_type_num, dtype=np.float32)
for _a in ("N", "CA", "C", "O"):
    _BACKBONE[rc.atom_order[_a]] = 1.0
# Heavy atoms kept per residue type: the type's atom37 set; X keeps its backbone.
_ALLOWED_ATOMS = rc.restype_atom37_mask.copy()
_ALLOWED_ATOMS[rc.unk_restype_index] = _BACKBONE


def _one_letter(resname: str) -> str:
    """Three-letter code (standard or modified) to one of the 20 letters or 'X'."""
    letter = rc.restype_3to1.get(resname) or protein_letters_3to1_extended.get(resname, "X")
    return letter if letter in rc.restype_order else "X"


@dataclass(frozen=True, eq=False)
class ProteinChain:
    """One protein chain of one model, in SEQRES order.

    Attributes:
        pdb_id: entry id (lower case).
        chain_id: author chain id (``auth_asym_id`` / PDB chain letter).
        sequence: SEQRES one-letter codes (20 standard + X), length ``N_res``.
        aatype: ``[N_res]`` int64, AF2 order (``restypes``), 20 = X.
        atom37_positions: ``[N_res, 37, 3]`` float32, Å, zero where absent.
        atom37_mask: ``[N_res, 37]`` float32, 1 where the atom was resolved (occupancy > 0).
        b_factors: ``[N_res, 37]`` float32, Å^2.
        label_asym_id: the mmCIF ``label_asym_id`` of the chain (``None`` for PDB files).
        resolution: Å; ``None`` when the entry gives none ('?', '.', or absent, e.g. NMR).
        release_date: ``YYYY-MM-DD`` of the first release (or deposition), or ``None``.
        method: experimental method(s), e.g. ``"X-RAY DIFFRACTION"``.
        model: the model number the coordinates come from.
        path: source file.
    """

    pdb_id: str
    chain_id: str
    sequence: str
    aatype: np.ndarray
    atom37_positions: np.ndarray
    atom37_mask: np.ndarray
    b_factors: np.ndarray
    label_asym_id: str | None = None
    resolution: float | None = None
    release_date: str | None = None
    method: str = ""
    model: int = 1
    path: str | None = None

    def __post_init__(self):
        for name in ("aatype", "atom37_positions", "atom37_mask", "b_factors"):
            getattr(self, name).setflags(write=False)

    def __len__(self) -> int:
        return len(self.sequence)

    @property
    def name(self) -> str:
        """``<pdb_id>_<chain_id>``, the id used by the alignment directories."""
        return f"{self.pdb_id}_{self.chain_id}"

    @property
    def residue_mask(self) -> np.ndarray:
        """``[N_res]`` float32: 1 where the residue has a resolved CA."""
        return self.atom37_mask[:, rc.atom_order["CA"]].copy()

    @property
    def num_resolved(self) -> int:
        """Number of residues with a resolved CA."""
        return int(self.atom37_mask[:, rc.atom_order["CA"]].sum())


@dataclass(frozen=True)
class Structure:
    """The protein chains of one structure file (one model).

    Attributes:
        pdb_id, resolution (Å), release_date, method, model, num_models, path: entry metadata.
        chains: author chain id -> :class:`ProteinChain`, in file order.
    """

    pdb_id: str
    chains: dict = field(default_factory=dict)
    resolution: float | None = None
    release_date: str | None = None
    method: str = ""
    model: int = 1
    num_models: int = 1
    path: str | None = None

    def chain(self, chain_id: str | None = None, *, id_type: str = "auto") -> ProteinChain:
        """Select a protein chain.

        Args:
            chain_id: author chain id (``auth_asym_id``) or mmCIF ``label_asym_id``; ``None`` = the
                first protein chain in the file.
            id_type: ``"auth"``, ``"label"`` or ``"auto"`` (author id first, then label id).

        Raises:
            InputError: no such chain; the message lists the author and label ids that exist.
        """
        if id_type not in ("auto", "auth", "label"):
            raise ValueError(f"id_type must be 'auto', 'auth' or 'label', got {id_type!r}")
        if chain_id is None:
            return next(iter(self.chains.values()))
        if id_type in ("auto", "auth") and chain_id in self.chains:
            return self.chains[chain_id]
        if id_type in ("auto", "label"):
            for chain in self.chains.values():
                if chain.label_asym_id == chain_id:
                    return chain
        auth = ", ".join(self.chains) or "none"
        label = ", ".join(c.label_asym_id for c in self.chains.values() if c.label_asym_id) or "none"
        raise InputError(f"no protein chain with {'author or label' if id_type == 'auto' else id_type} "
                         f"id '{chain_id}' (protein chains by auth_asym_id: {auth}; by label_asym_id: "
                         f"{label})", file=self.path, record=chain_id)


# ----------------------------------------------------------------------------------------------
# Shared chain builder


def _build_chain(*, pdb_id, chain_id, seqres_names, pos, atom_names, comp_ids, xyz, occupancy,
                 bfactor, meta, path, letters: str | None = None, altloc=None,
                 label_asym_id: str | None = None) -> ProteinChain:
    """Place atoms (one row each) at SEQRES positions ``pos`` and reduce to atom37.

    ``letters``: the entry's own canonical one-letter SEQRES when it is 1:1 with ``seqres_names``
    (preferred: it is what the MSAs were built from); else the names are translated here.
    """
    n = len(seqres_names)
    if letters is None or len(letters) != n:
        letters = "".join(_one_letter(r) for r in seqres_names)
    sequence = "".join(c if c in rc.restype_order else "X" for c in letters.upper())
    aatype = np.array([rc.restype_order_with_x[c] for c in sequence], dtype=np.int64)
    positions = np.zeros((n, rc.atom_type_num, 3), dtype=np.float32)
    mask = np.zeros((n, rc.atom_type_num), dtype=np.float32)
    bfac = np.zeros((n, rc.atom_type_num), dtype=np.float32)

    if len(pos):
        seq_names = np.asarray(seqres_names, dtype=object)
        names = np.where((atom_names == "SE") & (comp_ids == "MSE"), "SD", atom_names)
        atom_idx = np.array([rc.atom_order.get(a, -1) for a in names], dtype=np.int64)
        # Microheterogeneity: keep the monomer SEQRES names at that position.
        keep = (atom_idx >= 0) & (comp_ids == seq_names[pos])
        pos, atom_idx = pos[keep], atom_idx[keep]
        xyz, occupancy, bfactor = xyz[keep], occupancy[keep], bfactor[keep]
        # Duplicate atoms (same residue, atom name and altloc) are errors in the file: warn.
        key = pos * rc.atom_type_num + atom_idx
        if altloc is not None:
            alt = np.asarray(altloc)[keep]
            _, alt_code = np.unique(alt, return_inverse=True)
            full = key * (int(alt_code.max(initial=0)) + 1) + alt_code
            if len(np.unique(full)) != len(full):
                uniq, counts = np.unique(full, return_counts=True)
                dup = uniq[counts > 1]
                first_dup = int(dup[0] // (int(alt_code.max(initial=0)) + 1))
                warn_input(f"{int((counts[counts > 1] - 1).sum())} duplicate atom record(s) dropped "
                           f"(first: residue {first_dup // rc.atom_type_num + 1} atom "
                           f"{rc.atom_types[first_dup % rc.atom_type_num]})", file=path, record=chain_id,
                           stacklevel=5)
        # Alternate locations: highest occupancy first, then file order; keep the first per atom.
        order = np.lexsort((np.arange(len(key)), -occupancy, key))
        key_sorted = key[order]
        first = order[np.r_[True, key_sorted[1:] != key_sorted[:-1]]] if len(key) else order
        positions[pos[first], atom_idx[first]] = xyz[first]
        mask[pos[first], atom_idx[first]] = (occupancy[first] > 0).astype(np.float32)
        bfac[pos[first], atom_idx[first]] = bfactor[first]

    mask *= _ALLOWED_ATOMS[aatype]
    positions *= mask[..., None]
    bfac *= mask
    # AF2: fix arginines whose NH2 is closer to CD than NH1 (naming errors in the PDB).
    cd, nh1, nh2 = (rc.atom_order[a] for a in ("CD", "NH1", "NH2"))
    arg = (aatype == rc.restype_order["R"]) & (mask[:, [cd, nh1, nh2]].min(axis=1) > 0)
    if arg.any():
        d1 = np.linalg.norm(positions[:, nh1] - positions[:, cd], axis=-1)
        d2 = np.linalg.norm(positions[:, nh2] - positions[:, cd], axis=-1)
        swap = arg & (d1 > d2)
        positions[swap, nh1], positions[swap, nh2] = positions[swap, nh2].copy(), positions[swap, nh1].copy()
        bfac[swap, nh1], bfac[swap, nh2] = bfac[swap, nh2].copy(), bfac[swap, nh1].copy()
    return ProteinChain(pdb_id=pdb_id, chain_id=chain_id, sequence=sequence, aatype=aatype,
                        atom37_positions=positions, atom37_mask=mask, b_factors=bfac,
                        label_asym_id=label_asym_id, path=path, **meta)


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


# ----------------------------------------------------------------------------------------------
# mmCIF


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
        polymer &= np.array([_one_letter(c) != "X" or c == "UNK" for c in col["label_comp_id"]])
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
            amino = np.array([_one_letter(c) != "X" or c == "UNK" for c in comps[sel]], dtype=bool)
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
        chains[chain_id] = _build_chain(
            pdb_id=pdb_id, chain_id=chain_id, seqres_names=seqres, pos=pos, atom_names=names[sel],
            comp_ids=comps[sel], xyz=xyz[sel], occupancy=occupancy[sel], bfactor=bfactor[sel],
            meta=meta, path=path, letters=entity_letters.get(ent), altloc=altloc[sel],
            label_asym_id=str(label_asym[sel[0]]))
    return Structure(pdb_id=pdb_id, chains=chains, num_models=len(model_ids), path=path, **meta)


# ----------------------------------------------------------------------------------------------
# Legacy PDB


def _map_to_seqres(observed: str, numbers: list[int], seqres: str) -> np.ndarray | None:
    """SEQRES index of every observed residue: by a constant numbering offset when that explains
    the residue names, else by a global alignment (Biopython ``PairwiseAligner``) that never gaps
    the observed residues. ``None`` when no consistent mapping exists."""
    nums = np.asarray(numbers)
    obs = np.frombuffer(observed.encode(), np.uint8)
    ref = np.frombuffer(seqres.encode(), np.uint8)
    if len(nums) and np.all(np.diff(nums) > 0):
        rel = nums - nums[0]
        best = None
        for start in range(0, len(seqres) - rel[-1]):
            p = rel + start
            score = np.mean((ref[p] == obs) | (ref[p] == ord("X")) | (obs == ord("X")))
            if best is None or score > best[0]:
                best = (score, p)
            if score == 1.0:
                return p
        if best is not None and best[0] >= 0.95:
            return best[1]
    from Bio import Align

    aligner = Align.PairwiseAligner(mode="global", match_score=2.0, mismatch_score=-1.0)
    aligner.target_end_gap_score = 0.0
    aligner.target_internal_open_gap_score = -3.0
    aligner.target_internal_extend_gap_score = -0.1
    aligner.query_gap_score = -100.0  # observed residues must all land on SEQRES
    try:
        aln = aligner.align(seqres, observed)[0]
    except (ValueError, OverflowError):
        return None
    mapping = np.full(len(observed), -1, dtype=np.int64)
    for (t0, t1), (q0, q1) in zip(*aln.aligned):
        mapping[q0:q1] = np.arange(t0, t1)
    if (mapping < 0).any():
        return None
    return mapping


def parse_pdb(path, chain_id: str | None = None, *, model: int | None = None) -> ProteinChain:
    """One protein chain of a legacy PDB file (``None`` = the first); see :func:`read_pdb`."""
    return read_pdb(path, model=model).chain(chain_id, id_type="auth")


def read_pdb(path, *, model: int | None = None) -> Structure:
    """Parse the protein chains of a legacy PDB-format file (optionally ``.gz``) with Biopython.

    Residues are mapped onto the SEQRES records (``Bio.SeqIO`` ``pdb-seqres``) by numbering offset or
    alignment; without SEQRES the observed residues are the sequence (with a warning). Chains
    without amino-acid residues (DNA/RNA, ligands) are skipped.

    Args:
        path: the file.
        model: 0-based model index (``None`` = first model).

    Returns:
        :class:`Structure`; see :func:`parse_mmcif`.

    Raises:
        InputError: unreadable file, missing model, no protein chain, or residues that cannot be
            placed on the SEQRES.
    """
    from Bio import SeqIO
    from Bio.PDB import PDBParser

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("file not found", file=path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    try:
        structure = PDBParser(QUIET=True).get_structure(Path(path).name.split(".")[0], io.StringIO(text))
        seqres = {r.annotations["chain"]: str(r.seq) for r in SeqIO.parse(io.StringIO(text), "pdb-seqres")}
    except (ValueError, KeyError, IndexError) as exc:
        raise InputError(f"cannot read PDB file: {exc}", file=path) from exc
    models = list(structure)
    if not models:
        raise InputError("no ATOM/HETATM records", file=path)
    index = 0 if model is None else int(model)
    if not 0 <= index < len(models):
        raise InputError(f"model index {model} out of range (file has {len(models)} models)", file=path)
    header = structure.header
    pdb_id = (header.get("idcode") or Path(path).name.split(".")[0]).lower()
    meta = dict(resolution=float(header["resolution"]) if header.get("resolution") else None,
                release_date=header.get("release_date") or header.get("deposition_date") or None,
                method=str(header.get("structure_method") or "").upper(), model=index + 1)

    chains: dict[str, ProteinChain] = {}
    for chain in models[index]:
        residues = [r for r in chain if r.id[0] != "W" and (
            r.resname in rc.restype_3to1 or r.resname in protein_letters_3to1_extended)]
        if not residues:
            continue
        observed = "".join(_one_letter(r.resname) for r in residues)
        seq = seqres.get(chain.id)
        if seq is None or set(seq) == {"X"}:
            warn_input("no SEQRES for chain; using the observed residues as its sequence",
                       file=path, record=chain.id)
            seq_names = [r.resname for r in residues]
            mapping = np.arange(len(residues))
        else:
            mapping = _map_to_seqres(observed, [r.id[1] for r in residues], seq)
            if mapping is None:
                raise InputError("observed residues do not align to the SEQRES records", file=path,
                                 record=chain.id)
            seq_names = [rc.restype_1to3.get(c, "UNK") for c in seq]
            for k, r in zip(mapping, residues):  # keep the observed (possibly modified) names
                seq_names[k] = r.resname
        rows = [(k, a.get_id(), r.resname, a.coord, a.occupancy if a.occupancy is not None else 1.0,
                 a.bfactor, a.get_altloc()) for k, r in zip(mapping, residues)
                for a in r.get_unpacked_list()]
        pos = np.array([x[0] for x in rows], dtype=np.int64)
        chains[chain.id] = _build_chain(
            pdb_id=pdb_id, chain_id=chain.id, seqres_names=seq_names, pos=pos,
            atom_names=np.array([x[1] for x in rows], dtype=object),
            comp_ids=np.array([x[2] for x in rows], dtype=object),
            xyz=np.array([x[3] for x in rows], dtype=np.float32).reshape(-1, 3),
            occupancy=np.array([x[4] for x in rows], dtype=np.float32),
            bfactor=np.array([x[5] for x in rows], dtype=np.float32), meta=meta, path=path,
            altloc=np.array([x[6] for x in rows], dtype=object))
    if not chains:
        raise InputError("no protein chain with coordinates", file=path)
    return Structure(pdb_id=pdb_id, chains=chains, num_models=len(models), path=path, **meta)


def read_structure(path, *, model: int | None = None) -> Structure:
    """All protein chains: :func:`read_mmcif` for ``.cif``/``.mmcif`` (``.gz``), :func:`read_pdb` for
    ``.pdb``/``.ent``."""
    name = os.fspath(path).lower()
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith((".cif", ".mmcif")):
        return read_mmcif(path, model=model)
    if base.endswith((".pdb", ".ent")):
        return read_pdb(path, model=model)
    raise InputError("unknown structure format (expected .cif, .mmcif, .pdb or .ent, optionally .gz)",
                     file=os.fspath(path))
