"""``--devices N`` for ``alphafold-mem predict``: many targets over N devices, each target on one of
them (target parallelism; ``--dap`` shares one target instead).

* Started plainly, ``alphafold-mem predict ... --devices N`` reads and checks every input once,
  divides the valid targets among N ranks (:func:`alphafold_mem.predict.devices.shares`: longest first,
  greedy LPT on ``N_res^2 * (N_seq + N_res)``) and spawns one process per rank: CUDA, one GPU each
  (``cuda:k``); CPU, N processes with the CPU threads divided among them. The ranks share no
  process group (no collective can hang); each writes its targets' files and a part, and the
  launcher, after every rank exited, writes one summary and one ``timings.json``. A rank that fails
  as a whole (killed, out of host memory, bad weights) has its targets reported as failed; the
  other ranks finish.
* Under torchrun (``RANK``/``WORLD_SIZE``) or SLURM (``SLURM_PROCID``/``SLURM_NTASKS``), with
  ``--devices`` equal to the number of processes: each rank computes the same shares, runs its own
  and writes its part; rank 0 then waits for every part (``$ALPHAFOLD_MEM_DEVICES_WAIT`` seconds,
  default 1800, at least twice its own run), merges them and exits with the run's status. The other
  ranks exit 0 once their part is written (torchrun would otherwise end rank 0 before it merges);
  their failures are in the merged status. Output directory on a file system every rank sees.

Complexes (``run_with_devices(args, complexes=True)``, from :mod:`.complex_args`) take the same
route: read once by the launcher, shared longest first (their MSA depth is unknown before their
features are built, so by residues alone: :func:`alphafold_mem.predict.devices.cost_of`), each rank
runs :func:`alphafold_mem.predict.complex_run.predict_complexes` on its share, and the parts are
merged into one summary (a row per complex) and one ``timings.json``.

Exit status as for ``predict``: 0 when every target succeeded or was skipped, 1 when any input was
rejected, any target failed or a rank failed, 2 for a problem with the run as a whole.
``--devices`` with ``--dap`` or a monomer ensemble (``--models``/``--num-seeds``) is refused in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from typing import Callable

import torch

from ..distributed.launch import die_with_parent
from ..predict import PredictError, predict
from ..predict.complex_run import predict_complexes
from ..predict.complex_target import collect_complexes
from ..predict.devices import (
    PARTS_DIR,
    launcher_rank,
    length_of,
    merge,
    rank_part,
    read_part,
    shares,
    wait_for_parts,
    write_part,
)
from ..predict.runner import TargetResult
from ..predict.signals import Interrupted, handle_signals
from ..predict.targets import collect_targets
from .complex_options import complex_options
from .locked_run import locked_run
from .memory_args import predict_request
from .pipeline_args import pipeline_from_args
from .predict_options import predict_options

DEFAULT_WAIT_S = 1800.0


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _refusal(args: argparse.Namespace, complexes: bool) -> str:
    if args.devices < 1:
        return f"--devices must be >= 1, got {args.devices}"
    if args.dap > 1:
        return "--devices with --dap is not supported yet: run --devices N (one target per device) or --dap P"
    ensemble = getattr(args, "models", None) is not None or getattr(args, "num_seeds", None) is not None
    if ensemble and not complexes:  # a complex run's --models are its AF2-Multimer weights
        return "--devices with an ensemble (--models/--num-seeds) is not supported yet: run the ensemble without it"
    if str(args.device).startswith("cuda:"):
        return f"--devices picks one GPU per rank: give --device cuda or auto, not {args.device}"
    return ""


def _device_of(args: argparse.Namespace, local_rank: int) -> str:

    wanted = args.device
    if wanted == "cpu" or (wanted == "auto" and not torch.cuda.is_available()):
        return "cpu"
    count = torch.cuda.device_count()
    return f"cuda:{local_rank % count}" if count else "cuda"  # no GPU: predict reports it in one line


def _collect(args: argparse.Namespace, log: Callable[[str], None], complexes: bool):
    """The valid targets (complexes: :class:`~alphafold_mem.predict.complex_target.ComplexTarget`) and
    the rejected inputs (as results), read and checked once."""
    if complexes:
        found, rejected = collect_complexes(args.input, one_complex=args.complex, log=log)
        if not found and not rejected:
            raise PredictError(f"{args.input}: no FASTA input with a complex")
        invalid = [TargetResult(name=n, status="invalid", message=m, order=-1) for n, m in rejected]
        return found, invalid
    searching = bool(getattr(args, "db", None) or getattr(args, "msa_server", None))
    targets, rejected = collect_targets(
        args.input,
        args.msa,
        args.msa_dir,
        log,
        single_sequence=args.single_sequence,
        min_msa_depth=0 if searching else args.min_msa_depth,
    )
    results = [
        TargetResult(name=x.name, length=x.length, status="invalid", message=x.message, order=x.order) for x in rejected
    ]
    return targets, results


def _predict_share(args: argparse.Namespace, names: list[str], device: str, log: Callable[[str], None], complexes):
    """:func:`alphafold_mem.predict.predict` (complexes: :func:`~alphafold_mem.predict.complex_run.predict_complexes`)
    with the options of ``args``, on the targets ``names`` only."""
    if complexes:
        return predict_complexes(args.input, args.out, device=device, targets=names, log=log, **complex_options(args))
    options = predict_options(args, log, memory_policy=predict_request(args), pipeline=pipeline_from_args(args, log))
    return predict(args.input, args.out, device=device, targets=names, **options)


def _run_rank(args: argparse.Namespace, rank: int, names: list[str], device: str, key: str, complexes: bool) -> int:
    """One rank: its share, then its part; returns its exit status."""

    def log(line: str) -> None:
        print("\n".join(f"[device rank {rank}] {part}" for part in line.split("\n")), file=sys.stderr, flush=True)

    start = time.perf_counter()
    run, error = None, ""
    if names:
        try:
            run = _predict_share(args, names, device, log, complexes)
        except (PredictError, ValueError) as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported in the part: this rank's targets fail, the others go on
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    else:
        log("no targets for this rank")
    part = rank_part(rank, run, time.perf_counter() - start, device, error)
    if run is None and not error:
        part["exit_code"] = 0
    write_part(args.out, rank, key, part)
    return part["exit_code"]


def _rank_main(args, rank: int, names: list[str], device: str, threads: int, key: str, parent, complexes: bool):

    die_with_parent(parent)
    if threads:
        torch.set_num_threads(threads)
    try:
        with handle_signals():
            code = _run_rank(args, rank, names, device, key, complexes)
    except Interrupted as exc:
        code = exc.exit_code
    sys.exit(code)


def _exit_reason(code) -> str:
    if code is not None and code < 0:
        try:
            return f"ended by {signal.Signals(-code).name} before writing its results"
        except ValueError:
            return f"ended by signal {-code} before writing its results"
    return f"exited with code {code} before writing its results"


def _previous_timings(out_dir: str):
    """The ``timings.json`` in ``out_dir`` before the ranks write theirs (``None``: none readable)."""
    try:
        with open(os.path.join(out_dir, "timings.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _finish(args, assigned, parts, rejected, targets, seconds, missing_reason, previous=None) -> int:

    errors = {p.get("error") for p in parts.values() if p is not None}
    if not rejected and len(errors) == 1 and all(p is not None and p.get("error") for p in parts.values()):
        _log(f"error: {errors.pop()}")  # the same run-level error on every rank (weights, options)
        return 2
    lengths = {t.name: length_of(t) for t in targets}
    orders = {t.name: t.order for t in targets}
    run = merge(args.out, assigned, parts, rejected, lengths, orders, seconds, missing_reason, _log, previous)
    return run.exit_code


def _local(args, assigned, targets, rejected, complexes: bool) -> int:
    import torch.multiprocessing as mp  # spawned ranks only

    world = len(assigned)
    key = uuid.uuid4().hex
    previous = _previous_timings(args.out)
    parts_dir = os.path.join(args.out, PARTS_DIR)
    if os.path.isdir(parts_dir):
        for name in os.listdir(parts_dir):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(parts_dir, name))
    devices = [_device_of(args, k) for k in range(world)]
    threads = 0 if devices[0].startswith("cuda") else max(1, (os.cpu_count() or 1) // world)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_rank_main, args=(args, k, assigned[k], devices[k], threads, key, os.getpid(), complexes))
        for k in range(world)
    ]
    _log(
        f"--devices {world}: {len(targets)} target(s) over {world} rank(s) ({', '.join(sorted(set(devices)))}), "
        + "; ".join(f"rank {k}: {len(n)}" for k, n in enumerate(assigned))
    )
    start = time.perf_counter()
    try:
        for p in procs:
            p.start()
        for p in procs:
            while p.is_alive():
                p.join(0.2)
    except BaseException:  # interrupted: end every rank now
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
        raise
    parts = {k: read_part(args.out, k, key) for k in range(world)}
    return _finish(
        args,
        assigned,
        parts,
        rejected,
        targets,
        time.perf_counter() - start,
        lambda k: _exit_reason(procs[k].exitcode),
        previous,
    )


def _under_launcher(args, rank, world, key, assigned, targets, rejected, complexes: bool) -> int:

    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", rank)))
    previous = _previous_timings(args.out) if rank == 0 else None  # before this rank writes its own
    start = time.perf_counter()
    code = _run_rank(args, rank, assigned[rank], _device_of(args, local), key, complexes)
    if rank != 0:
        return 0  # rank 0 reports this rank's failures (torchrun would end rank 0 on a non-zero exit)
    own = time.perf_counter() - start
    wait = max(float(os.environ.get("ALPHAFOLD_MEM_DEVICES_WAIT", DEFAULT_WAIT_S)), 2 * own)
    parts = wait_for_parts(args.out, world, key, wait)
    del code
    return _finish(
        args,
        assigned,
        parts,
        rejected,
        targets,
        time.perf_counter() - start,
        lambda k: f"wrote no results within {wait:.0f} s (ended, or still running)",
        previous,
    )


def run_with_devices(args: argparse.Namespace, complexes: bool = False) -> int:
    """``predict --devices N`` (module docstring; ``complexes``: the inputs are complexes); returns the
    exit status."""
    problem = _refusal(args, complexes)
    if problem:
        _log(f"error: {problem}")
        return 2
    env = launcher_rank()
    if env is not None and env[1] != args.devices:
        _log(f"error: --devices {args.devices}, but the launcher started {env[1]} processes: give --devices {env[1]}")
        return 2
    rank, world, key = env if env is not None else (0, args.devices, "")
    lead = rank == 0

    def body() -> int:
        targets, rejected = _collect(args, _log if lead else (lambda line: None), complexes)
        assigned = shares(targets, world)
        if env is None:
            return _local(args, assigned, targets, rejected, complexes)
        return _under_launcher(args, rank, world, key, assigned, targets, rejected, complexes)

    return locked_run(args.out, lead, body)


__all__ = ["run_with_devices"]
