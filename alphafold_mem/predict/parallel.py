"""What a prediction does differently when P processes share each target (dynamic axial
parallelism, ``predict(..., dap=P)``; the processes are started by ``alphafold-mem predict --dap P``
or torchrun, see :mod:`alphafold_mem.cli.dap_launch`).

Every process reads the inputs, builds the same features (same seed) and runs the model on its
share of the representations (:func:`alphafold_mem.bind` with :attr:`Parallel.mesh`); rank 0
alone logs and writes the outputs and ``timings.json``, which records ``dap`` and every rank's
seconds and memory per stage. Which targets to run is rank 0's decision (its output directory),
sent to all, and so is the pre-flight of every target (:meth:`Parallel.check_residues`: device
sharding needs more residues than processes). A failure of a target outside the model's collectives
(pre-flight, features, output writing) fails that target on every rank (:meth:`Parallel.agree_failure`)
and the batch goes on; a failure inside them (the other ranks would wait in a collective) ends the
run on every rank.

:func:`check_writable` is the run's first check of the output directory (every process).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from ..distributed import gather_outputs, init_mesh
from .preflight import Preflight
from .targets import PredictError


def check_writable(out_dir: str) -> None:
    """Create ``out_dir`` if needed and write (and remove) a probe file in it.
    Raises:
        PredictError: one line naming the directory and the reason (read-only, no permission, no space).
    """
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", suffix=".tmp", dir=out_dir)
        try:
            os.write(fd, b"probe")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as exc:
        reason = exc.strerror or " ".join(str(exc).split())
        raise PredictError(
            f"--out {out_dir}: the output directory is not writable ({reason}); choose another --out"
        ) from None


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

    def check_residues(self, n_res: int) -> Optional[Preflight]:
        """``None`` when a target of ``n_res`` residues can be shared by this run's processes, else the
        failed :class:`~.preflight.Preflight` saying why (device sharding needs ``N_res > P``)."""
        if self.dap <= 1 or n_res > self.dap:
            return None
        return Preflight(
            None,
            0,
            0,
            f"{n_res} residue(s) cannot be shared by --dap {self.dap} processes (device sharding needs more "
            f"residues than processes); predict it without --dap or with --dap {max(1, n_res - 1)}",
        )

    def agree_failure(self, message: Optional[str]) -> tuple[int, Optional[str]]:
        """``(rank, message)`` of the first rank whose target failed (``message`` on this rank, ``None``
        if it succeeded), ``(0, None)`` when none did; every rank gets the same answer."""
        if not self.active:
            return 0, message
        messages: list = [None] * dist.get_world_size()
        dist.all_gather_object(messages, message)
        return next(((k, m) for k, m in enumerate(messages) if m is not None), (0, None))

    def gather(self, model: nn.Module, out: dict, keys: tuple[str, ...]) -> dict:
        """The outputs named ``keys``, whole (representation-shaped ones are gathered)."""
        kept = {k: out[k] for k in keys if k in out}
        if not self.active:
            return kept

        return gather_outputs(model, kept)

    def timings(self, records: dict) -> dict:
        """``{"dap": P, "ranks": [every rank's stage records]}`` (``{}`` without DAP)."""
        if not self.active:
            return {}
        gathered: Optional[list] = [None] * dist.get_world_size() if self.writer else None
        dist.gather_object(records, gathered, dst=0)
        return {"dap": self.dap, "ranks": gathered}


__all__ = ["Parallel"]
