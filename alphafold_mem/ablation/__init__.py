"""Accuracy-vs-memory ablations as a product feature: ``alphafold-mem ablate``.

One command runs every memory technique -- each a named :class:`~alphafold_mem.MemoryPolicy` (precision
and kernels included) or DAP setting, derived from the declared policy fields and presets
(:mod:`.techniques`) -- through

* an inference ablation on real chains (:mod:`.inference`, :mod:`.chains`, :mod:`.scores`,
  :mod:`.dap`): activation peak by two measures, the planner's prediction, time, deviation from the
  fp32 reference run, accuracy against the experimental structure;
* a training ablation (:mod:`.training`): K fine-tuning steps per technique, loss curves, held-out
  lDDT-Cα, step time and peak;
* a scaling ablation (:mod:`.scaling`): activation peak against N_res, measured and predicted, with
  published anchors;

and writes ``results.csv``/``results.json`` (:mod:`.results`), PNG plots (:mod:`.plots`) and
``report.md`` (:mod:`.report`). :func:`run_ablation` (:mod:`.runner`) is the entry point. This
package sits above ``train`` and ``predict``; only ``cli`` imports it. The OpenFold side-by-side
section of a report is a benchmark of another system, outside the installed package
(``benchmarks/openfold.py``; ``scripts/compare_openfold.py --ablation-out DIR`` adds its rows).
"""

from .results import COLUMNS, MEASURES, ResultStore
from .runner import SECTIONS, AblationConfig, run_ablation
from .techniques import Technique, derive_techniques

__all__ = [
    "AblationConfig",
    "COLUMNS",
    "MEASURES",
    "ResultStore",
    "SECTIONS",
    "Technique",
    "derive_techniques",
    "run_ablation",
]
