"""Starting the processes of a device-sharded run, and ending all of them when one fails.

Two ways in:

* **Local spawn** (:func:`run_local`): ``alphafold-mem predict ... --dap P`` starts P processes on
  this machine (rendezvous on 127.0.0.1, a free port), each running the same function with its
  rank; gloo on CPU, NCCL on CUDA (one GPU per process).
* **torchrun** (multi-node): ``torchrun --nproc-per-node P -m alphafold_mem.cli predict ... --dap P``
  sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``; :func:`init_from_env`
  joins that group. torchrun itself ends every worker when one fails.

Failure handling (local spawn): a rank that raises reports its traceback to the parent and exits
non-zero; the parent then terminates every other rank (killing it after a grace period) and
raises :class:`RankFailed` carrying that rank's message, within seconds -- the other ranks, blocked
in a collective, never reach its timeout. A rank that dies without reporting (killed, segfault) is
detected by its exit code the same way. The rank blamed is the cause: a rank killed by a signal
is named before the ranks that then report a broken connection to it. Every collective also has a timeout
(:func:`alphafold_mem.distributed.mesh.default_timeout`), so a rank whose peer vanished raises on
its own even without a parent (torchrun).

Launcher death (local spawn): every rank asks the kernel for SIGKILL when the launcher dies
(``prctl(PR_SET_PDEATHSIG)`` on Linux, :func:`die_with_parent`), so a killed launcher (a scheduler,
the OOM killer) leaves no rank running and nothing written after it. An exception in the launcher
(such as an interrupt) ends every rank at once (SIGTERM, then SIGKILL after the grace period).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
import os
import queue
import signal
import socket
import sys
import time
import traceback
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._pytree import tree_map

from .mesh import default_timeout


class RankFailed(RuntimeError):
    """One rank of a local multi-process run failed; ``rank`` and its ``message`` (traceback)."""

    def __init__(self, rank: int, message: str):
        super().__init__(f"rank {rank} failed:\n{message.rstrip()}")
        self.rank, self.message = rank, message


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def init_process_group(
    rank: int, world_size: int, port: int, device_type: str = "cpu", timeout: Optional[datetime.timedelta] = None
) -> None:
    """Join a local group (127.0.0.1:``port``) as ``rank`` of ``world_size``; on CUDA select GPU
    ``rank``."""
    if device_type == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        backend_for(device_type),
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timeout or default_timeout(),
    )


def in_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher that sets WORLD_SIZE)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def init_from_env(device_type: str = "cpu") -> tuple[int, int]:
    """Join the group torchrun describes in the environment; returns ``(rank, world_size)``."""
    if not dist.is_initialized():
        if device_type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend_for(device_type), timeout=default_timeout())
    return dist.get_rank(), dist.get_world_size()


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``);
    exits at once if ``parent_pid`` is already gone. Returns whether the request was made (False
    elsewhere than Linux, or without libc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:  # the parent died before the request
        os._exit(1)
    return True


def _child(
    rank: int,
    world_size: int,
    port: int,
    device_type: str,
    results: Any,
    fn: Callable[..., Any],
    args: tuple,
    parent_pid: Optional[int] = None,
) -> None:
    if parent_pid is not None:
        die_with_parent(parent_pid)
    try:
        init_process_group(rank, world_size, port, device_type)
        value = tree_map(
            lambda t: t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t, fn(rank, world_size, *args)
        )
        results.put(("ok", rank, value))
    except BaseException:  # noqa: BLE001 - every failure is reported to the parent
        results.put(("error", rank, traceback.format_exc()))
        raise SystemExit(1)
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the group may be broken by a failed peer
                pass


def run_local(
    fn: Callable[..., Any],
    nprocs: int,
    *args: Any,
    device_type: str = "cpu",
    timeout: Optional[float] = None,
    start_method: str = "spawn",
    grace: float = 5.0,
) -> list[Any]:
    """Run ``fn(rank, nprocs, *args)`` in ``nprocs`` local processes joined in one process group and
    return each rank's result (picklable; tensors in it arrive as numpy arrays), in rank order.

    Args:
        fn: a module-level function (it is pickled by reference).
        device_type: ``"cpu"`` (gloo) or ``"cuda"`` (NCCL, GPU ``rank``).
        timeout: seconds for the whole run (``None``: no limit besides the collectives' own).
        start_method: ``"spawn"`` (default) or ``"fork"`` (faster start; CPU only).
        grace: seconds the other ranks get to exit after a failure before they are killed.

    Raises:
        RankFailed: a rank raised or died (its message; every other rank is ended first), or the run
            exceeded ``timeout``.
    """
    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_child, args=(r, nprocs, port, device_type, results, fn, args, os.getpid()), daemon=False)
        for r in range(nprocs)
    ]
    for p in procs:
        p.start()
    values: dict[int, Any] = {}
    failure: Optional[RankFailed] = None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while len(values) < nprocs and failure is None:
            item = _poll(results, 0.2)
            if item is not None:
                status, rank, value = item
                if status == "ok":
                    values[rank] = value
                else:
                    failure = _cause(procs, RankFailed(rank, value))
                continue
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in values]
            if dead:
                item = _poll(results, 0.5)  # its report may still be in flight
                if item is not None and item[0] == "error":
                    failure = _cause(procs, RankFailed(item[1], item[2]))
                else:
                    failure = _cause(procs, _unreported(dead[0], procs[dead[0]].exitcode))
            elif deadline is not None and time.monotonic() > deadline:
                failure = RankFailed(-1, f"the run exceeded its {timeout:.0f} s limit")
    except BaseException:  # the launcher itself fails or is interrupted: end every rank now
        _end(procs, 0.0, kill_after=grace)
        raise
    _end(procs, grace if failure is None else 0.5, kill_after=grace)
    if failure is not None:
        raise failure
    return [values[r] for r in range(nprocs)]


def _unreported(rank: int, exitcode: Optional[int]) -> RankFailed:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return RankFailed(rank, f"was killed by {name}")
    return RankFailed(rank, f"exited with code {exitcode} without a report")


def _cause(procs: list, reported: RankFailed, wait: float = 1.0) -> RankFailed:
    """The failure to name: a rank killed by a signal (it cannot report) is the cause of the errors the
    others then report (a peer's connection closed); looked for during ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        killed = [r for r, p in enumerate(procs) if p.exitcode is not None and p.exitcode < 0 and r != reported.rank]
        if killed:
            return _unreported(killed[0], procs[killed[0]].exitcode)
        if time.monotonic() >= deadline or reported.message.startswith("was killed by"):
            return reported
        time.sleep(0.05)


def _poll(results: Any, seconds: float) -> Optional[tuple]:
    try:
        return results.get(timeout=seconds)
    except queue.Empty:
        return None


def _end(procs: list, wait: float, kill_after: float) -> None:
    """Let processes exit for ``wait`` seconds, terminate the rest, kill what is left after
    ``kill_after`` more."""
    deadline = time.monotonic() + wait
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + kill_after
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


__all__ = [
    "RankFailed",
    "backend_for",
    "die_with_parent",
    "free_port",
    "in_torchrun",
    "init_from_env",
    "init_process_group",
    "run_local",
]
