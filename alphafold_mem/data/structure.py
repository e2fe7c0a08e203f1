"""Experimental structure records: :class:`ProteinChain` (one chain of one model as atom37 arrays)
and :class:`Structure` (the protein chains of one file), plus :func:`build_chain`, the atom37
reduction shared by the mmCIF (:mod:`.mmcif`) and PDB (:mod:`.pdb`) readers.

Every protein chain comes out in SEQRES order (the sequence the MSA was built for), with unresolved
residues present and masked, as AF2 needs for training (Jumper et al. 2021, Suppl. 1.2.1). The
rules :func:`build_chain` applies to the atoms a reader hands it:

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

from dataclasses import dataclass, field

import numpy as np
from Bio.Data.PDBData import protein_letters_3to1_extended

from ..geometry import residue_constants as rc
from .errors import InputError, note_input, warn_input

__all__ = ["ProteinChain", "Structure", "build_chain", "modified_residues", "one_letter"]

_BACKBONE = np.zeros(rc.atom_type_num, dtype=np.float32)
for _a in ("N", "CA", "C", "O"):
    _BACKBONE[rc.atom_order[_a]] = 1.0
# Heavy atoms kept per residue type: the type's atom37 set; X keeps its backbone.
_ALLOWED_ATOMS = rc.restype_atom37_mask.copy()
_ALLOWED_ATOMS[rc.unk_restype_index] = _BACKBONE


def one_letter(resname: str) -> str:
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
        modified: ``(name, parent, count)`` per non-standard residue name of the SEQRES and the
            standard residue it was mapped to (``("MSE", "MET", 4)``; ``"UNK"`` when it has none).
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
    modified: tuple = ()
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
        dropped: ``(chain id, reason)`` for protein chains the file names that yield no record
            (e.g. ``"no modelled atoms"``), so that callers can report them.
    """

    pdb_id: str
    chains: dict = field(default_factory=dict)
    resolution: float | None = None
    release_date: str | None = None
    method: str = ""
    model: int = 1
    num_models: int = 1
    path: str | None = None
    dropped: tuple = ()

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
        raise InputError(
            f"no protein chain with {'author or label' if id_type == 'auto' else id_type} "
            f"id '{chain_id}' (protein chains by auth_asym_id: {auth}; by label_asym_id: "
            f"{label})",
            file=self.path,
            record=chain_id,
        )


# ----------------------------------------------------------------------------------------------
# Shared chain builder


def build_chain(
    *,
    pdb_id,
    chain_id,
    seqres_names,
    pos,
    atom_names,
    comp_ids,
    xyz,
    occupancy,
    bfactor,
    meta,
    path,
    letters: str | None = None,
    altloc=None,
    label_asym_id: str | None = None,
) -> ProteinChain:
    """Place atoms (one row each) at SEQRES positions ``pos`` and reduce to atom37.

    ``letters``: the entry's own canonical one-letter SEQRES when it is 1:1 with ``seqres_names``
    (preferred: it is what the MSAs were built from); else the names are translated here.
    """
    n = len(seqres_names)
    if letters is None or len(letters) != n:
        letters = "".join(one_letter(r) for r in seqres_names)
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
                warn_input(
                    f"{int((counts[counts > 1] - 1).sum())} duplicate atom record(s) dropped "
                    f"(first: residue {first_dup // rc.atom_type_num + 1} atom "
                    f"{rc.atom_types[first_dup % rc.atom_type_num]})",
                    file=path,
                    record=chain_id,
                    stacklevel=5,
                )
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
    modified = modified_residues(seqres_names, sequence)
    if modified:
        note_input(
            "modified residues mapped to their parents: "
            + ", ".join(f"{name}->{parent} ({count})" for name, parent, count in modified),
            file=path,
            record=chain_id,
            stacklevel=5,
        )
    return ProteinChain(
        pdb_id=pdb_id,
        chain_id=chain_id,
        sequence=sequence,
        aatype=aatype,
        atom37_positions=positions,
        atom37_mask=mask,
        b_factors=bfac,
        label_asym_id=label_asym_id,
        modified=modified,
        path=path,
        **meta,
    )


def modified_residues(seqres_names, sequence: str) -> tuple:
    """``(name, parent, count)`` for every residue name outside the 20 standard ones and UNK, with
    the standard residue ``sequence`` holds at its positions (``"UNK"`` for X), in order of first
    appearance."""
    counts: dict[tuple[str, str], int] = {}
    for name, letter in zip(seqres_names, sequence):
        if name in rc.restype_3to1 or name == rc.unk_restype:
            continue
        key = (str(name), rc.restype_1to3.get(letter, rc.unk_restype))
        counts[key] = counts.get(key, 0) + 1
    return tuple((name, parent, n) for (name, parent), n in counts.items())
