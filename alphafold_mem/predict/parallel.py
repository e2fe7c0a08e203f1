"""What a prediction does differently when P processes share each target (dynamic axial
parallelism, ``predict(..., dap=P)``; the processes are started by ``alphafold-mem predict --dap P``
or torchrun, see :mod:`alphafold_mem.cli.dap_launch`).

Every process reads the inputs, builds the same features (same seed) and runs the model on its
share of the representations (:func:`alphafold_mem.bind` with :attr:`Parallel.mesh`); rank 0
alone logs and writes the outputs and ``timings.json``, which records ``dap`` and every rank's
seconds and memory per stage. Which targets to run is rank 0's decision (its output directory),
sent to all. A failure during a target ends the whole run on every rank (the other ranks would
otherwise wait in a collective), unlike the single-process batch, which continues past it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from .targets import PredictError


class Parallel:
    """The DAP side of one :func:`alphafold_mem.predict` run (``dap == 1``: nothing changes).

    Raises:
        PredictError: ``dap > 1`` without an initialised process group, or a DAP size that does not
            divide the number of processes.
    """

    def __init__(self, dap: int):
        if dap < 1:
            raise PredictError(f"--dap must be >= 1, got {dap}")
        self.dap = dap
        self.mesh = None
        self.rank = 0
        if dap > 1:
            from ..distributed import init_mesh

            if not dist.is_initialized():
                raise PredictError(
                    f"--dap {dap}: no process group; start the run with `alphafold-mem predict ... "
                    f"--dap {dap}` or `torchrun --nproc-per-node {dap} -m alphafold_mem.cli predict ...`"
                )
            try:
                self.mesh = init_mesh(dap)
            except ValueError as exc:
                raise PredictError(str(exc)) from None
            self.rank = dist.get_rank()

    @classmethod
    def start(
        cls, dap: int, dev: torch.device, log: Callable[[str], None]
    ) -> tuple["Parallel", torch.device, Callable[[str], None]]:
        """The run's :class:`Parallel`, its device (:meth:`device`) and its log (:meth:`quiet`)."""
        par = cls(dap)
        return par, par.device(dev), par.quiet(log)

    @property
    def active(self) -> bool:
        return self.mesh is not None

    @property
    def writer(self) -> bool:
        """Whether this process writes outputs and logs (rank 0)."""
        return self.rank == 0

    def device(self, dev: torch.device) -> torch.device:
        """Under DAP on CUDA: this process's GPU (selected when the process group was joined)."""
        if self.active and dev.type == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return dev

    def quiet(self, log: Callable[[str], None]) -> Callable[[str], None]:
        """``log`` on rank 0, silence elsewhere."""
        return log if self.writer else (lambda line: None)

    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        if not self.active:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def agree_targets(self, targets: list, todo: list, skipped: list) -> tuple[list, list]:
        """``(todo, skipped)`` as rank 0 decided them (its output directory decides what is finished)."""
        if not self.active:
            return todo, skipped
        names = self.agree([t.name for t in todo])
        return [t for t in targets if t.name in names], [t for t in targets if t.name not in names]

    def gather(self, model: nn.Module, out: dict, keys: tuple[str, ...]) -> dict:
        """The outputs named ``keys``, whole (representation-shaped ones are gathered)."""
        kept = {k: out[k] for k in keys if k in out}
        if not self.active:
            return kept
        from ..distributed import gather_outputs

        return gather_outputs(model, kept)

    def timings(self, records: dict) -> dict:
        """``{"dap": P, "ranks": [every rank's stage records]}`` (``{}`` without DAP)."""
        if not self.active:
            return {}
        gathered: Optional[list] = [None] * dist.get_world_size() if self.writer else None
        dist.gather_object(records, gathered, dst=0)
        return {"dap": self.dap, "ranks": gathered}


__all__ = ["Parallel"]
