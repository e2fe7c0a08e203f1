"""``--dap P`` for ``alphafold-mem predict``: run the subcommand in P processes that share each
target (dynamic axial parallelism).

* Started plainly, ``alphafold-mem predict ... --dap P`` spawns P local processes (rendezvous on
  127.0.0.1, a free port; gloo on CPU with the CPU threads divided among them, NCCL with one GPU
  each on CUDA) and waits for them. If one rank fails, every other rank is ended at once and the
  exit status is 1, with that rank's error printed.
* Under torchrun (``torchrun --nproc-per-node P [--nnodes ...] -m alphafold_mem.cli predict ... --dap P``)
  each process joins the group torchrun describes and runs its rank; torchrun ends the others
  when one fails.

The ranks of a local spawn die with the launcher (:func:`alphafold_mem.distributed.launch.die_with_parent`),
handle SIGINT/SIGTERM like a single-process run (:mod:`alphafold_mem.predict.signals`), and are ended
at once when the launcher is interrupted; the error names the rank that failed first (a rank killed
by a signal, not the peer that lost its connection to it).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

import torch
import torch.distributed as dist

from ..distributed.launch import RankFailed, in_torchrun, init_from_env, run_local
from ..predict.signals import handle_signals


def _device_type(device: str) -> str:

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if str(device).startswith("cuda") else "cpu"


def _rank_main(
    rank: int, world: int, run: Callable[[argparse.Namespace], int], args: argparse.Namespace, threads: int
) -> int:

    if threads:
        torch.set_num_threads(threads)
    with handle_signals():
        return run(args)


def run_with_dap(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """Run ``run(args)`` (a module-level function returning an exit status) in ``args.dap``
    processes; returns rank 0's exit status, or 1 when a rank failed."""
    device_type = _device_type(getattr(args, "device", "auto"))
    if in_torchrun():
        init_from_env(device_type)
        try:
            return run(args)
        finally:
            dist.destroy_process_group()
    threads = 0 if device_type == "cuda" else max(1, (os.cpu_count() or 1) // args.dap)
    try:
        codes = run_local(_rank_main, args.dap, run, args, threads, device_type=device_type)
    except RankFailed as exc:
        print(f"error: --dap {args.dap}: {exc}", file=sys.stderr, flush=True)
        return 1
    return codes[0]


__all__ = ["run_with_dap"]
