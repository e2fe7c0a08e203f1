"""AF2's relaxation protocol (``alphafold/relax/relax.py``, ``amber_minimize.run_pipeline``) on a
model or experimental structure: :func:`relax_structure` reads a PDB/mmCIF file, relaxes every protein
chain and writes a PDB with hydrogens.

Steps:

1. The protein chains are read with :func:`alphafold_mem.data.read_structure` (first model; heavy
   atoms; MSE -> MET). Residues without N, CA and C, and X residues, cannot be parametrised: they are
   left out of the minimisation, keep their input coordinates in the output, and split the chain
   there (the residues next to them are relaxed as chain ends, with terminal atoms).
2. pdbfixer adds missing heavy atoms and hydrogens; OpenMM minimises with Amber99sb and heavy-atom
   restraints (:mod:`.amber`).
3. The project's violation check (:mod:`.checks`) runs on the minimised heavy atoms; while residues
   violate and fewer than ``max_outer_iterations`` (AF2: 3) rounds ran, those residues are freed from
   their restraints and the structure (hydrogens placed anew) is minimised again, as AF2 does.
4. The output keeps each residue's input B-factor (pLDDT for predictions) on all its atoms, chain ids
   and residue numbers (SEQRES positions, 1-based).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from Bio.PDB.PDBIO import PDBIO
from Bio.PDB.StructureBuilder import StructureBuilder

from ...data import InputWarning, read_structure
from ...geometry import residue_constants as rc
from ...io import atomic_write
from .amber import MAX_ATTEMPTS, STIFFNESS, TOLERANCE_KCAL, RelaxError, fix_structure, minimize
from .checks import nonfinite_atoms, violation_metrics

__all__ = ["RelaxResult", "relax_structure", "MAX_OUTER_ITERATIONS"]

MAX_OUTER_ITERATIONS = 3  # AF2 run_alphafold.py RELAX_MAX_OUTER_ITERATIONS
_BACKBONE = [rc.atom_order[a] for a in ("N", "CA", "C")]


@dataclass
class RelaxResult:
    """What :func:`relax_structure` did. Energies in kcal/mol, RMSD in Å, time in s."""

    path: str
    seconds: float
    initial_energy: float
    final_energy: float
    attempts: int
    iterations: int
    ca_rmsd: float
    platform: str
    violations_before: dict
    violations_after: dict
    excluded_residues: list = field(default_factory=list)

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        for key in ("initial_energy", "final_energy", "ca_rmsd", "seconds"):
            out[key] = round(out[key], 3)
        for key in ("violations_before", "violations_after"):
            out[key] = {k: v for k, v in out[key].items() if k != "violating_residue_indices"}
        return out


def _residue_records(chains):
    """Per residue: (chain, index, relaxable). Relaxable: one of the 20 types with N, CA and C."""
    out = []
    for chain in chains:
        for i in range(len(chain)):
            present = chain.atom37_mask[i].any()
            ok = chain.aatype[i] < rc.restype_num and chain.atom37_mask[i, _BACKBONE].all()
            if present:
                out.append((chain, i, bool(ok)))
    return out


def _segments(records):
    """Runs of relaxable residues that are consecutive in their chain's SEQRES."""
    segs, current = [], []
    for rec in records:
        chain, i, ok = rec
        if ok and current and current[-1][0] is chain and current[-1][1] == i - 1:
            current.append(rec)
            continue
        if current:
            segs.append(current)
        current = [rec] if ok else []
    if current:
        segs.append(current)
    return segs


_CHAIN_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _pdb_text(segments, coords) -> str:
    """Heavy-atom PDB text, one chain per segment (pdbfixer's input)."""
    lines, serial = [], 1
    for s, seg in enumerate(segments):
        cid = _CHAIN_IDS[s % len(_CHAIN_IDS)]
        for k, (chain, i, _) in enumerate(seg):
            resname = rc.restype_1to3[rc.restypes[chain.aatype[i]]]
            pos = coords[(id(chain), i)]
            for j in np.flatnonzero(chain.atom37_mask[i]):
                name = rc.atom_types[j]
                x, y, z = pos[j]
                lines.append(
                    f"ATOM  {serial:5d} {name if len(name) == 4 else ' ' + name:<4} {resname} {cid}"
                    f"{k + 1:4d}    {x:8.3f}{y:8.3f}{z:8.3f}  1.00  0.00          {name[0]:>2}"
                )
                serial += 1
        lines.append("TER")
    return "\n".join(lines + ["END", ""])


def _violations(chains, coords) -> dict:
    aatype, pos, mask, index = [], [], [], []
    offset = 0
    for chain in chains:
        aatype.append(chain.aatype)
        pos.append(np.stack([coords.get((id(chain), i), chain.atom37_positions[i]) for i in range(len(chain))]))
        mask.append(chain.atom37_mask)
        index.append(np.arange(len(chain)) + offset)
        offset += len(chain) + 100  # no peptide bond between chains
    return violation_metrics(np.concatenate(aatype), np.concatenate(pos), np.concatenate(mask), np.concatenate(index))


def relax_structure(
    path,
    out_path,
    *,
    stiffness: float = STIFFNESS,
    tolerance_kcal: float = TOLERANCE_KCAL,
    max_outer_iterations: int = MAX_OUTER_ITERATIONS,
    max_attempts: int = MAX_ATTEMPTS,
    device: str = "cpu",
    threads: int = 0,
    remarks=(),
) -> RelaxResult:
    """Relax the protein chains of a PDB or mmCIF file and write ``out_path`` (PDB with hydrogens).

    Args:
        path: input model or structure (``.pdb``/``.cif``, optionally ``.gz``).
        out_path: the relaxed PDB (written atomically; the input is never modified).
        stiffness: restraint constant, kcal/mol/Å² (AF2: 10); tolerance_kcal: kcal/mol (AF2: 2.39).
        max_outer_iterations: violation-check rounds (AF2: 3); max_attempts: retries per round (AF2: 100).
        device: OpenMM platform ``"cpu"`` or ``"cuda"``; threads: CPU threads (0 = OpenMM's default).
        remarks: extra ``REMARK 250`` lines.

    Returns:
        :class:`RelaxResult` (energies, Cα-RMSD to the input, violation counts before/after).

    Raises:
        RelaxError: OpenMM/pdbfixer missing, nothing to relax, an atom with non-finite coordinates
            (refused before OpenMM runs), or the minimisation failed.
        InputError: the input cannot be read.
    """
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # a model file has no SEQRES: its residues are its sequence
        warnings.filterwarnings("ignore", message=".*no SEQRES.*", category=InputWarning)
        structure = read_structure(path)
    chains = list(structure.chains.values())
    bad = nonfinite_atoms(chains)
    if bad:
        raise RelaxError(
            f"{path}: {len(bad)} atom(s) with non-finite (NaN or infinite) coordinates, first {bad[0]}; "
            "such a model cannot be relaxed (OpenMM needs finite positions)"
        )
    records = _residue_records(chains)
    segments = _segments(records)
    if not segments:
        raise RelaxError(f"{path}: no residue with N, CA and C atoms of a standard type to relax")
    excluded = [f"{c.chain_id}:{c.sequence[i]}{i + 1}" for c, i, ok in records if not ok]
    coords = {(id(c), i): c.atom37_positions[i].astype(np.float64) for c, i, _ in records}
    before = _violations(chains, coords)
    freed: set = set()
    iteration, result, after = 0, None, before
    while iteration < max_outer_iterations:
        topology, positions = fix_structure(_pdb_text(segments, coords))
        residues = [r for seg in segments for r in seg]
        top_res = list(topology.residues())
        if len(top_res) != len(residues):
            raise RelaxError(f"pdbfixer returned {len(top_res)} residues for {len(residues)}")
        restrained = np.array(
            [
                a.element is not None
                and a.element.symbol != "H"
                and (id(residues[a.residue.index][0]), residues[a.residue.index][1]) not in freed
                for a in topology.atoms()
            ]
        )
        result = minimize(
            topology,
            positions,
            restrained,
            stiffness=stiffness,
            tolerance_kcal=tolerance_kcal,
            max_attempts=max_attempts,
            device=device,
            threads=threads,
        )
        final_positions = result["positions"]
        for res, (chain, i, _) in zip(top_res, residues):
            new = coords[(id(chain), i)].copy()
            for atom in res.atoms():
                j = rc.atom_order.get(atom.name)
                if j is not None and chain.atom37_mask[i, j]:
                    new[j] = final_positions[atom.index]
            coords[(id(chain), i)] = new
        after = _violations(chains, coords)
        iteration += 1
        if after["violating_residues"] == 0:
            break
        flat = [(id(c), i) for c in chains for i in range(len(c))]
        freed |= {flat[k] for k in after["violating_residue_indices"] if k < len(flat)}
    _write(out_path, chains, top_res, residues, final_positions, coords, remarks, result, iteration)
    ca_rmsd = _ca_rmsd(records, coords)
    return RelaxResult(
        os.fspath(out_path),
        time.perf_counter() - t0,
        result["initial_energy"],
        result["final_energy"],
        result["attempts"],
        iteration,
        ca_rmsd,
        result["platform"],
        before,
        after,
        excluded,
    )


def _ca_rmsd(records, coords) -> float:
    ca = rc.atom_order["CA"]
    d = [coords[(id(c), i)][ca] - c.atom37_positions[i][ca] for c, i, _ in records if c.atom37_mask[i, ca]]
    return float(np.sqrt(np.mean(np.sum(np.square(d), axis=-1)))) if d else 0.0


def _write(out_path, chains, top_res, residues, final_positions, coords, remarks, result, iteration) -> None:

    relaxed = {(id(c), i): res for res, (c, i, _) in zip(top_res, residues)}
    sb = StructureBuilder()
    sb.init_structure("relaxed")
    sb.init_model(0)
    for chain in chains:
        sb.init_chain(chain.chain_id[:1] or "A")
        sb.init_seg("    ")
        ca = rc.atom_order["CA"]
        for i in range(len(chain)):
            if not chain.atom37_mask[i].any():
                continue
            bfac = float(chain.b_factors[i, ca] if chain.atom37_mask[i, ca] else chain.b_factors[i].max())
            sb.init_residue(rc.restype_1to3.get(chain.sequence[i], "UNK"), " ", i + 1, " ")
            res = relaxed.get((id(chain), i))
            if res is None:  # kept as given
                atoms = [
                    (rc.atom_types[j], coords[(id(chain), i)][j], rc.atom_types[j][0])
                    for j in np.flatnonzero(chain.atom37_mask[i])
                ]
            else:
                atoms = [
                    (a.name, final_positions[a.index], a.element.symbol if a.element else a.name[0])
                    for a in res.atoms()
                ]
            for name, xyz, element in atoms:
                fullname = name if len(name) == 4 else f" {name:<3}"
                sb.init_atom(name, np.asarray(xyz, dtype=np.float64), bfac, 1.0, " ", fullname, element=element)
    io = PDBIO()
    io.set_structure(sb.get_structure())
    with atomic_write(out_path) as tmp, open(tmp, "w") as fh:
        fh.write(
            f"REMARK 250 alphafold-mem Amber relaxation (Amber99sb, OpenMM {result['platform']}): "
            f"{iteration} round(s), energy {result['initial_energy']:.1f} -> {result['final_energy']:.1f} kcal/mol\n"
        )
        fh.write("REMARK 250 B-factor column = the input's per-residue value (pLDDT for predictions)\n")
        for line in remarks:
            fh.write(f"REMARK 250 {' '.join(str(line).split())[:69]}\n")
        io.save(fh)
