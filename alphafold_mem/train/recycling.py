"""How many recycling iterations a training step runs (Jumper et al. 2021, Suppl. 1.10).

AF2 trains with a random number of recycling iterations per batch, uniform on ``1 ..
num_recycles + 1`` (OpenFold: ``uniform_recycling``), back-propagating through the last one only;
evaluation runs all of them. The draw is a pure function of ``(seed, step)`` (``step`` = the number
of training batches consumed before this one, the same on every data-parallel rank), so every rank
runs the same number of iterations, and a resumed run draws the same numbers as the uninterrupted
one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sample_num_iterations"]

#: Stream tag of the iteration draw in ``default_rng([seed, tag, step])`` (data draws use 7, the FAPE
#: clamp draw 11: the streams are independent).
_STREAM = 13


def sample_num_iterations(seed: int, step: int, max_iterations: int, uniform: bool = True) -> int:
    """Number of recycling iterations of training step ``step``: uniform on ``1 .. max_iterations``
    (``uniform=True``, AF2), else always ``max_iterations``.

    Raises:
        ValueError: ``max_iterations < 1`` or ``step < 0``.
    """
    if max_iterations < 1 or step < 0:
        raise ValueError(f"need max_iterations >= 1 and step >= 0, got {max_iterations} and {step}")
    if not uniform:
        return max_iterations
    return 1 + int(np.random.default_rng([seed, _STREAM, step]).integers(max_iterations))
