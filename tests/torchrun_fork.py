"""Ranks forked from the test process with the environment torchrun gives a rank (``MASTER_ADDR``,
``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``; Lightning reads it and
creates no processes itself): what a launch by torchrun runs, without a fresh interpreter per rank
importing torch and Lightning again (~4.5 s CPU each)."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
from typing import Any, Callable


def _rank(target: Callable[..., Any], rank: int, world: int, port: int, args: tuple) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
        OMP_NUM_THREADS="1",  # else Lightning sets cpu_count / world threads, over any set_num_threads
    )
    result = target(*args)
    os._exit(result if isinstance(result, int) else 0)


def run_forked(target: Callable[..., Any], world: int, *args: Any, timeout: float = 300) -> list:
    """Run ``target(*args)`` in ``world`` forked ranks (gloo on 127.0.0.1, a free port); the exit
    status of each (``target``'s return value when an int, else 0; None: still running after
    ``timeout`` seconds, then killed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_rank, args=(target, r, world, port, args)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout)
        return [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
