"""Legacy PDB-format reader: the protein chains of one model of a ``.pdb``/``.ent`` file (optionally
``.gz``) as :class:`~.structure.ProteinChain` records, via Biopython.

Coordinates are read with ``Bio.PDB.PDBParser`` and the SEQRES records with ``Bio.SeqIO``
(``pdb-seqres``); observed residues are placed on the SEQRES by numbering offset or alignment
(:func:`_map_to_seqres`) and reduced to atom37 by :func:`~.structure.build_chain` under the rules
of :mod:`.structure`. Protein chains named by SEQRES without atoms in the model read are listed in
``Structure.dropped``, as the mmCIF reader lists them. Entry points: :func:`parse_pdb` (one chain) and
:func:`read_pdb` (all protein chains).
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import numpy as np
from Bio import Align, SeqIO
from Bio.Data.PDBData import protein_letters_3to1_extended
from Bio.PDB import PDBParser

from ..geometry import residue_constants as rc
from . import formats
from .errors import InputError, warn_input
from .structure import ProteinChain, Structure, build_chain, one_letter

__all__ = ["parse_pdb", "read_pdb"]


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
    without amino-acid residues (DNA/RNA, ligands) are skipped. A protein chain named by SEQRES (one
    holding an amino acid) with no amino-acid residue in the model read is listed in
    ``Structure.dropped`` as ``(chain id, "no modelled atoms")`` (``" in model K"`` added when the file
    has several models), as :func:`~.mmcif.read_mmcif` lists them.

    Args:
        path: the file.
        model: 0-based model index (``None`` = first model).

    Returns:
        :class:`Structure`; see :func:`~.mmcif.read_mmcif`.

    Raises:
        InputError: unreadable file, missing model, no protein chain, or residues that cannot be
            placed on the SEQRES.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("file not found", file=path)
    opener = gzip.open if formats.is_gzip(path) else open
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
    meta = dict(
        resolution=float(header["resolution"]) if header.get("resolution") else None,
        release_date=header.get("release_date") or header.get("deposition_date") or None,
        method=str(header.get("structure_method") or "").upper(),
        model=index + 1,
    )

    chains: dict[str, ProteinChain] = {}
    for chain in models[index]:
        residues = [
            r
            for r in chain
            if r.id[0] != "W"
            and (r.resname in rc.restype_3to1 or r.resname in protein_letters_3to1_extended or r.resname == "UNK")
        ]
        if not residues:
            continue
        observed = "".join(one_letter(r.resname) for r in residues)
        seq = seqres.get(chain.id)
        if seq is None or set(seq) == {"X"}:
            warn_input("no SEQRES for chain; using the observed residues as its sequence", file=path, record=chain.id)
            seq_names = [r.resname for r in residues]
            mapping = np.arange(len(residues))
        else:
            mapping = _map_to_seqres(observed, [r.id[1] for r in residues], seq)
            if mapping is None:
                raise InputError("observed residues do not align to the SEQRES records", file=path, record=chain.id)
            seq_names = [rc.restype_1to3.get(c, "UNK") for c in seq]
            for k, r in zip(mapping, residues):  # keep the observed (possibly modified) names
                seq_names[k] = r.resname
        rows = [
            (
                k,
                a.get_id(),
                r.resname,
                a.coord,
                a.occupancy if a.occupancy is not None else 1.0,
                a.bfactor,
                a.get_altloc(),
            )
            for k, r in zip(mapping, residues)
            for a in r.get_unpacked_list()
        ]
        pos = np.array([x[0] for x in rows], dtype=np.int64)
        chains[chain.id] = build_chain(
            pdb_id=pdb_id,
            chain_id=chain.id,
            seqres_names=seq_names,
            pos=pos,
            atom_names=np.array([x[1] for x in rows], dtype=object),
            comp_ids=np.array([x[2] for x in rows], dtype=object),
            xyz=np.array([x[3] for x in rows], dtype=np.float32).reshape(-1, 3),
            occupancy=np.array([x[4] for x in rows], dtype=np.float32),
            bfactor=np.array([x[5] for x in rows], dtype=np.float32),
            meta=meta,
            path=path,
            altloc=np.array([x[6] for x in rows], dtype=object),
        )
    if not chains:
        raise InputError("no protein chain with coordinates", file=path)
    where = f" in model {index + 1}" if len(models) > 1 else ""
    dropped = tuple(
        (c, "no modelled atoms" + where) for c, seq in seqres.items() if c not in chains and set(seq) - {"X"}
    )
    return Structure(pdb_id=pdb_id, chains=chains, num_models=len(models), path=path, dropped=dropped, **meta)
