"""Target-parallel prediction (``predict --devices N``): which targets each of N ranks runs, and the
one summary and ``timings.json`` made from the ranks' parts.

* **Shares** (:func:`shares`): every target goes to exactly one rank, longest first, balanced by
  predicted cost with greedy LPT (longest processing time first: each target, in decreasing cost,
  goes to the rank with the least cost so far; ties to the lower rank). The cost is the leading term
  of the Evoformer's work, ``N_res^2 * (N_seq + N_res)`` (:func:`target_cost`), with ``N_seq`` the
  MSA's distinct rows capped at the rows a model reads (:data:`MSA_ROWS_READ`); a complex, whose MSA
  depth is unknown before its features are built, costs ``N_res^2 * (1 + N_res)`` over all its chains
  (:func:`cost_of`). The shares depend
  only on the inputs, so every rank of a torchrun/SLURM job computes the same ones on its own.
* **One rank's run**: :func:`alphafold_mem.predict.predict` on the whole input with ``targets=`` the
  rank's share; inputs are rejected (and reported) once, by the launcher or rank 0, never by every
  rank.
* **Parts** (:func:`write_part`, :func:`wait_for_parts`): each rank writes
  ``<out>/.devices/rank<k>.json`` (its targets' results, seconds, exit status) when it ends; the
  merge (:func:`merge`) makes one :class:`~alphafold_mem.predict.runner.PredictionRun` (summary
  table) and one ``timings.json`` with every target and every rank. A rank that ended without a part
  (killed, crashed) or did not report within the wait has its targets reported as failed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from typing import Callable, Optional

from .complex_target import ComplexTarget
from .outputs import write_json
from .runner import PredictionRun, TargetResult
from .targets import Target
from .timings import keep_skipped

__all__ = [
    "MSA_ROWS_READ",
    "PARTS_DIR",
    "cost_of",
    "launcher_rank",
    "length_of",
    "merge",
    "part_path",
    "shares",
    "target_cost",
    "wait_for_parts",
    "write_part",
]

#: MSA rows a model reads at most (AF2 monomer: 512 cluster centres + 5120 extra sequences); deeper
#: alignments cost no more.
MSA_ROWS_READ = 512 + 5120
#: The ranks' parts, under the output directory (hidden: not an input, not an output).
PARTS_DIR = ".devices"


def target_cost(n_res: int, msa_depth: int) -> int:
    """Predicted relative cost of one target: ``N_res^2 * (min(N_seq, MSA_ROWS_READ) + N_res)``."""
    return n_res * n_res * (min(max(msa_depth, 1), MSA_ROWS_READ) + n_res)


def length_of(t: Target | ComplexTarget) -> int:
    """Residues of a target (of a complex: every chain's)."""
    return t.cx.num_res if isinstance(t, ComplexTarget) else len(t.sequence)


def cost_of(t: Target | ComplexTarget) -> int:
    """:func:`target_cost` of a target; of a complex, by its residues alone (MSA depth 1: its depth is
    known only once its per-chain alignments are paired, by the rank that runs it)."""
    if isinstance(t, ComplexTarget):
        return target_cost(t.cx.num_res, 1)
    return target_cost(len(t.sequence), t.msa_depth)


def shares(targets: list[Target | ComplexTarget], world: int) -> list[list[str]]:
    """Target names per rank (``world`` lists, each longest first) by greedy LPT on :func:`cost_of`.

    Raises:
        ValueError: ``world < 1``.
    """
    if world < 1:
        raise ValueError(f"--devices must be >= 1, got {world}")
    order = sorted(targets, key=lambda t: (-cost_of(t), t.order, t.name))
    load = [0] * world
    out: list[list[str]] = [[] for _ in range(world)]
    for t in order:
        k = min(range(world), key=lambda r: (load[r], r))
        out[k].append(t.name)
        load[k] += cost_of(t)
    return out


def launcher_rank(environ: Optional[dict] = None) -> Optional[tuple[int, int, str]]:
    """``(rank, world, run key)`` when a launcher started this process as one of several: torchrun
    (``RANK``/``WORLD_SIZE``) or SLURM (``SLURM_PROCID``/``SLURM_NTASKS``); ``None`` otherwise. The run
    key tells this job's parts from an earlier job's in the same output directory."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        key = ":".join(env.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID"))
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        key = f"slurm:{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"
    else:
        return None
    return (rank, world, key) if world > 1 else None


def part_path(out_dir: str, rank: int) -> str:
    return os.path.join(out_dir, PARTS_DIR, f"rank{rank}.json")


def write_part(out_dir: str, rank: int, key: str, part: dict) -> None:
    """Write rank ``rank``'s part (atomically): ``part`` has ``results`` (:class:`TargetResult` fields),
    ``exit_code``, ``seconds``, ``device`` and, for a rank that failed as a whole, ``error``."""
    os.makedirs(os.path.join(out_dir, PARTS_DIR), exist_ok=True)
    write_json(part_path(out_dir, rank), dict(part, rank=rank, key=key))


def rank_part(rank: int, run: Optional[PredictionRun], seconds: float, device: str, error: str = "") -> dict:
    """The part of one rank from its :class:`PredictionRun` (``None`` with ``error`` when it failed as a whole)."""
    results = [asdict(r) for r in run.results] if run is not None else []
    exit_code = run.exit_code if run is not None else 2
    return {"results": results, "exit_code": exit_code, "seconds": round(seconds, 3), "device": device, "error": error}


def read_part(out_dir: str, rank: int, key: str) -> Optional[dict]:
    """Rank ``rank``'s part of the run ``key``, or ``None`` (absent, unreadable, another run's)."""
    try:
        with open(part_path(out_dir, rank)) as fh:
            part = json.load(fh)
    except (OSError, ValueError):
        return None
    return part if isinstance(part, dict) and part.get("key") == key else None


def wait_for_parts(out_dir: str, world: int, key: str, timeout: float, poll: float = 0.5) -> dict[int, Optional[dict]]:
    """Every rank's part of run ``key``, waiting up to ``timeout`` seconds for the missing ones (a rank
    still missing then gets ``None``)."""
    deadline = time.monotonic() + timeout
    parts: dict[int, Optional[dict]] = {}
    while True:
        for k in range(world):
            if parts.get(k) is None:
                parts[k] = read_part(out_dir, k, key)
        if all(p is not None for p in parts.values()) or time.monotonic() >= deadline:
            return parts
        time.sleep(poll)


def merge(
    out_dir: str,
    assigned: list[list[str]],
    parts: dict[int, Optional[dict]],
    rejected: list[TargetResult],
    lengths: dict[str, int],
    orders: dict[str, int],
    total_seconds: float,
    missing_reason: Callable[[int], str],
    log: Callable[[str], None],
    previous: Optional[dict] = None,
) -> PredictionRun:
    """One :class:`PredictionRun` from the ranks' parts and the inputs rejected before the shares,
    and one ``<out_dir>/timings.json``; logs the summary table. A rank without a part has each of its
    targets failed with ``missing_reason(rank)``. ``previous``: the ``timings.json`` found before the
    ranks started, whose ``seconds`` and ``recycles_run`` a skipped target keeps
    (:func:`~.timings.keep_skipped`)."""
    results = list(rejected)
    ranks = []
    for k, names in enumerate(assigned):
        part = parts.get(k)
        if part is None or part.get("error"):
            why = missing_reason(k) if part is None else part["error"]
            for name in names:
                results.append(
                    TargetResult(
                        name=name,
                        length=lengths.get(name),
                        status="failed",
                        message=f"device rank {k}: {why}",
                        order=orders.get(name, 0),
                    )
                )
            log(f"error: device rank {k} ({len(names)} target(s): {', '.join(names) or 'none'}): {why}")
        else:
            results.extend(TargetResult(**r) for r in part["results"])
        ranks.append(
            {
                "rank": k,
                "targets": names,
                "device": part.get("device") if part else None,
                "seconds": part.get("seconds") if part else None,
                "exit_code": part.get("exit_code") if part else None,
                "error": (part.get("error") if part else missing_reason(k)) or None,
            }
        )
    run = PredictionRun(sorted(results, key=lambda r: r.order), out_dir)
    timings = {
        "devices": len(assigned),
        "share": "greedy LPT on N_res^2 * (min(N_seq, 5632) + N_res), longest first",
        "total_seconds": round(total_seconds, 3),
        "targets": {
            r.name: {"status": r.status, "seconds": r.seconds, "length": r.length, "recycles_run": r.recycles_run}
            for r in run.results
        },
        "ranks": ranks,
    }
    run.timings_path = os.path.join(out_dir, "timings.json")
    write_json(run.timings_path, keep_skipped(timings, previous))
    log("")
    log(run.summary_table())
    if run.failed:
        log(f"{len(run.failed)} of {len(run.results)} target(s) rejected or failed; see the error lines above")
    return run
