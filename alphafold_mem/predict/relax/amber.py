"""AF2's restrained Amber minimisation (``alphafold/relax/amber_minimize.py``, Jumper et al. 2021,
Suppl. 1.8.6) with pdbfixer and OpenMM.

* :func:`fix_structure`: pdbfixer adds missing heavy atoms (``addMissingAtoms(seed=0)``) and hydrogens
  at pH 7 (AF2 ``cleanup.fix_pdb``); no missing residues are built.
* :func:`minimize`: the Amber99sb force field (``amber99sb.xml``, H-bond constraints, no cutoff),
  harmonic restraints ``0.5 k |x - x0|^2`` with k = 10 kcal/mol/Å² on the heavy atoms of every
  residue not excluded, L-BFGS minimisation (``Simulation.minimizeEnergy``) to AF2's tolerance of
  2.39 kcal/mol, which is 10 kJ/mol: OpenMM >= 7.7 reads its tolerance as the RMS force in
  kJ/mol/nm, so 10 is passed, with no iteration limit (AF2 ``max_iterations=0``); a failed attempt
  (OpenMM exception, non-finite energy) is retried up to ``max_attempts`` times (AF2: 100).
"""

from __future__ import annotations

import io
import math

import numpy as np

__all__ = ["RelaxError", "require_openmm", "fix_structure", "minimize", "STIFFNESS", "TOLERANCE_KCAL", "MAX_ATTEMPTS"]

STIFFNESS = 10.0  # kcal/mol/Å², AF2 run_alphafold.py RELAX_STIFFNESS
TOLERANCE_KCAL = 2.39  # kcal/mol, AF2 run_alphafold.py RELAX_ENERGY_TOLERANCE
MAX_ATTEMPTS = 100  # AF2 amber_minimize.run_pipeline max_attempts
_KJ_PER_KCAL = 4.184


class RelaxError(RuntimeError):
    """Relaxation cannot run or did not succeed (one line: the reason)."""


def require_openmm():
    """``(openmm, openmm.app, openmm.unit, PDBFixer)`` or :class:`RelaxError` with the install command."""
    try:
        import openmm  # optional: OpenMM and pdbfixer come with the relax extra
        from openmm import app, unit  # optional: OpenMM and pdbfixer come with the relax extra
        from pdbfixer import PDBFixer  # optional: OpenMM and pdbfixer come with the relax extra
    except ImportError as exc:
        raise RelaxError(
            f"Amber relaxation needs OpenMM and pdbfixer ({exc.name or exc} is missing): "
            "pip install 'alphafold_mem[relax]'  (or: pip install openmm pdbfixer)"
        ) from None
    return openmm, app, unit, PDBFixer


def fix_structure(pdb_text: str):
    """pdbfixer on heavy-atom PDB text: ``(topology, positions)`` with missing heavy atoms and hydrogens."""
    _, _, _, PDBFixer = require_openmm()
    fixer = PDBFixer(pdbfile=io.StringIO(pdb_text))
    fixer.findMissingResidues()
    fixer.missingResidues = {}  # never build absent residues
    fixer.findMissingAtoms()
    fixer.addMissingAtoms(seed=0)
    fixer.addMissingHydrogens(7.0)
    return fixer.topology, fixer.positions


def _platform(openmm, device: str):
    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    want = "CUDA" if device == "cuda" else "CPU"
    if want not in names:
        if device == "cuda":
            raise RelaxError(
                f"OpenMM has no CUDA platform here (platforms: {', '.join(names)}); "
                "use --relax-device cpu or install openmm with CUDA"
            )
        want = "Reference"
    return openmm.Platform.getPlatformByName(want)


def minimize(
    topology,
    positions,
    restrained: np.ndarray,
    *,
    stiffness: float = STIFFNESS,
    tolerance_kcal: float = TOLERANCE_KCAL,
    max_attempts: int = MAX_ATTEMPTS,
    device: str = "cpu",
    threads: int = 0,
) -> dict:
    """Restrained minimisation of one prepared system.
    Args:
        topology, positions: from :func:`fix_structure` (positions in nm or a Quantity).
        restrained: ``[N_atoms]`` bool: atoms held by the harmonic restraint at their start position.
        stiffness: kcal/mol/Å²; tolerance_kcal: kcal/mol (see the module docstring).
        max_attempts: tries before giving up; device: ``"cpu"`` or ``"cuda"``; threads: CPU threads (0 = OpenMM's
        choice).

    Returns:
        ``positions`` ``[N_atoms, 3]`` Å, ``initial_energy`` / ``final_energy`` kcal/mol, ``attempts``,
        ``platform``.

    Raises:
        RelaxError: every attempt failed (the last error is named).
    """
    openmm, app, unit, _ = require_openmm()
    forcefield = app.ForceField("amber99sb.xml")
    start = np.asarray(
        positions.value_in_unit(unit.nanometer) if unit.is_quantity(positions) else positions, dtype=np.float64
    )
    last = "no attempt"
    for attempt in range(1, max_attempts + 1):
        try:
            system = forcefield.createSystem(topology, constraints=app.HBonds)
            if stiffness > 0:
                force = openmm.CustomExternalForce("0.5 * k * ((x-x0)^2 + (y-y0)^2 + (z-z0)^2)")
                force.addGlobalParameter("k", stiffness * _KJ_PER_KCAL * 100.0)  # kcal/mol/Å² -> kJ/mol/nm²
                for name in ("x0", "y0", "z0"):
                    force.addPerParticleParameter(name)
                for i in np.flatnonzero(restrained):
                    force.addParticle(int(i), start[i].tolist())
                system.addForce(force)
            integrator = openmm.LangevinIntegrator(0, 0.01, 0.0)
            platform = _platform(openmm, device)
            props = {"Threads": str(threads)} if threads and platform.getName() == "CPU" else {}
            simulation = app.Simulation(topology, system, integrator, platform, props)
            simulation.context.setPositions(start * unit.nanometer)
            e0 = (
                simulation.context.getState(getEnergy=True)
                .getPotentialEnergy()
                .value_in_unit(unit.kilocalories_per_mole)
            )
            simulation.minimizeEnergy(tolerance=tolerance_kcal * _KJ_PER_KCAL, maxIterations=0)
            state = simulation.context.getState(getEnergy=True, getPositions=True)
            e1 = state.getPotentialEnergy().value_in_unit(unit.kilocalories_per_mole)
            pos = state.getPositions(asNumpy=True).value_in_unit(unit.angstrom)
            if not (math.isfinite(e1) and np.all(np.isfinite(pos))):
                raise ValueError(f"non-finite energy or coordinates after minimisation (energy {e1})")
            return {
                "positions": np.asarray(pos, dtype=np.float64),
                "initial_energy": float(e0),
                "final_energy": float(e1),
                "attempts": attempt,
                "platform": platform.getName(),
            }
        except (openmm.OpenMMException, ValueError) as exc:
            last = " ".join(str(exc).split())[:200] or type(exc).__name__
    raise RelaxError(f"minimisation failed after {max_attempts} attempts: {last}")
