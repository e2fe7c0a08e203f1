"""Amber relaxation of predicted or experimental structures, as AF2 does it (Jumper et al. 2021,
Suppl. 1.8.6): :func:`relax_structure` (:mod:`.protocol`) with pdbfixer and OpenMM (:mod:`.amber`)
and the project's violation check (:mod:`.checks`). OpenMM and pdbfixer are the optional extra
``alphafold_mem[relax]``; without them :class:`RelaxError` says how to install them.
"""

from .amber import RelaxError, require_openmm
from .checks import violation_metrics
from .protocol import MAX_OUTER_ITERATIONS, RelaxResult, relax_structure

__all__ = [
    "RelaxError",
    "RelaxResult",
    "relax_structure",
    "require_openmm",
    "violation_metrics",
    "MAX_OUTER_ITERATIONS",
]
