"""The values one :func:`alphafold_mem.predict.predict` run carries through its stages: the run-wide
settings (:class:`RunContext`), one target on its way through the run (:class:`TargetRun`) and the
model it runs with (:class:`LoadedModel`). Every stage of :mod:`.runner` reads and fills these."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import torch

from ..memory.policy import MemoryPolicy, PolicyRequest
from .parallel import Parallel
from .preflight import Preflight
from .results import TargetResult
from .target import Target
from .timings import StageClock, Stages

__all__ = ["LoadedModel", "RunContext", "TargetRun"]


@dataclass
class RunContext:
    """The run-wide settings and meters of one run (every stage reads them; none changes them but
    ``log``, set once).

    Attributes:
        out_dir: the output directory.
        device: where the model runs.
        par: the DAP side of the run (:class:`~.parallel.Parallel`; one process: no-op).
        request: the memory policy request (``"auto"``, an AutoPolicy or a MemoryPolicy).
        policy: the concrete policy given, or a plain policy in the requested precision when the
            pre-flight chooses per target (``chosen``).
        chosen: the pre-flight chooses the policy per target.
        seed: seed of MSA sampling and of torch.
        weights_path: the weights file.
        options: the result-changing options, recorded with every output (:mod:`.provenance`).
        output_name: outputs' base name relative to ``out_dir`` with ``{id}`` for the target name.
        clock: the run's seconds per named stage; ``stages``: per-target seconds and memory.
        rank_by: how each finished target's prediction is ranked (an ensemble of one, :mod:`.ranking`);
            ``None``: the run is one member of an ensemble, which ranks.
    """

    out_dir: str
    device: torch.device
    par: Parallel
    request: PolicyRequest
    policy: MemoryPolicy
    chosen: bool
    seed: int
    weights_path: str
    options: dict
    output_name: str
    log: Callable[[str], None]
    clock: StageClock
    stages: Stages
    overwrite: bool = False
    record_paths: bool = False
    debug: bool = False
    pipeline: object = None
    rank_by: Optional[str] = "plddt"

    def base_name(self, name: str) -> str:
        """The outputs' path of target ``name`` without suffix (``<out>/<id>/...``)."""
        return os.path.join(self.out_dir, self.output_name.format(id=name))


@dataclass
class LoadedModel:
    """The model of the run on its device, with what the weights loader said of it (``weights``: an
    :class:`alphafold_mem.weights.LoadedWeights`: ``format``, ``details``, ``architecture``)."""

    model: torch.nn.Module
    weights: object

    @property
    def config(self):
        return self.model.config


@dataclass
class TargetRun:
    """One target on its way through the run: the validated input (``target``), its outcome
    (``result``), its pre-flight (a :class:`~.preflight.Preflight`, or the exception the estimate
    raised), the policy it runs with and the templates its features used."""

    target: Target
    result: TargetResult
    fit: Union[Preflight, Exception, None] = None
    policy: Optional[MemoryPolicy] = None
    templates: object = field(default=None, repr=False)

    @classmethod
    def of(cls, t: Target) -> "TargetRun":
        return cls(t, TargetResult(name=t.name, length=len(t.sequence), msa_depth=t.msa_depth, order=t.order))

    @property
    def name(self) -> str:
        return self.target.name
