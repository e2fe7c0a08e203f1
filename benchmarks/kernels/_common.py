"""Timing, peak-memory measurement and the result table shared by the kernel benchmarks."""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import torch

from alphafold_mem.kernels._interpreter import skip_repatching


def setup_device(smoke: bool) -> torch.device:
    """CUDA when visible; otherwise CPU, with Triton's interpreter switched on for ``--smoke``.

    Must run before anything imports triton (the interpreter is chosen at import time).
    """
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return torch.device("cuda")
    if not smoke:
        raise SystemExit("no CUDA device: run with --smoke (tiny shapes, Triton interpreter on CPU)")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    skip_repatching()
    return torch.device("cpu")


def benchmark_parser(description: str, reps: int) -> argparse.ArgumentParser:
    """The options every kernel benchmark takes: --dtype, --smoke, --warmup, --reps (default ``reps``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--smoke", action="store_true", help="tiny shape, runs on CPU via the interpreter")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=reps)
    return parser


def run_settings(args: argparse.Namespace) -> Tuple[torch.device, torch.dtype, int, int]:
    """(device, dtype, warmup, reps) for parsed :func:`benchmark_parser` options; --smoke runs once.

    Calls :func:`setup_device`, so it must run before anything imports triton.
    """
    device = setup_device(args.smoke)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    warmup, reps = (0, 1) if args.smoke else (args.warmup, args.reps)
    return device, dtype, warmup, reps


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return f"CPU, Triton interpreter (torch {torch.__version__}); times are meaningless"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, warmup: int, reps: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def peak_mib(fn: Callable[[], object], device: torch.device) -> Optional[float]:
    """Peak memory allocated by ``fn`` above what was allocated before it (MiB); None on CPU, where
    ``fn`` is not run (nothing to measure: in the interpreter a third run was 40 % of a smoke table)."""
    if device.type != "cuda":
        return None
    _sync(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def fmt(x: Optional[float], width: int = 10) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.2f}"


def measure(fwd: Callable[[], object], fwd_bwd: Callable[[], object], device: torch.device, warmup: int, reps: int):
    """(forward ms, backward ms = forward+backward minus forward, peak MiB of forward+backward)."""
    t_fwd = time_ms(fwd, device, warmup, reps)
    t_all = time_ms(fwd_bwd, device, warmup, reps)
    return t_fwd, t_all - t_fwd, peak_mib(fwd_bwd, device)


def measure_call(
    call: Callable[[], torch.Tensor],
    params: Sequence[torch.Tensor],
    d_out: torch.Tensor,
    device: torch.device,
    warmup: int,
    reps: int,
):
    """:func:`measure` of ``call()`` (forward without autograd) and ``call().backward(d_out)`` with
    the gradients of ``params`` cleared first."""

    def fwd():
        with torch.no_grad():
            return call()

    def fwd_bwd():
        for t in params:
            t.grad = None
        call().backward(d_out)

    return measure(fwd, fwd_bwd, device, warmup, reps)


def run_table(
    rows: Iterable[Tuple[str, str, Callable[[], tuple]]], device: torch.device, impl_width: int, echo: bool = True
) -> List[dict]:
    """Run each (shape label, impl name, run) -- ``run()`` returns :func:`measure`'s triple -- and,
    with ``echo``, print the header and one line per row as it finishes. A run that raises gives
    ``OOM`` or its error in that row and the table continues.

    Returns:
        one dict per row: shape, impl, fwd_ms, bwd_ms, peak_mib (None on CPU or on error), error.
    """
    header = f"{'shape':24s} {'impl':{impl_width}s} {'fwd ms':>10s} {'bwd ms':>10s} {'peak MiB':>10s}"
    if echo:
        print(header)
        print("-" * len(header))
    results = []
    for label, name, run in rows:
        res = dict(shape=label, impl=name, fwd_ms=None, bwd_ms=None, peak_mib=None, error=None)
        try:
            res["fwd_ms"], res["bwd_ms"], res["peak_mib"] = run()
            row = f"{fmt(res['fwd_ms'])} {fmt(res['bwd_ms'])} {fmt(res['peak_mib'])}"
        except Exception as exc:  # noqa: BLE001 - report and continue with the next row
            first_line = (str(exc).splitlines() or [""])[0][:60]
            res["error"] = "OOM" if is_oom(exc) else f"{type(exc).__name__}: {first_line}"
            row = f"{'OOM':>10s}" if is_oom(exc) else f"error: {res['error']}"
            if device.type == "cuda":
                torch.cuda.empty_cache()
        results.append(res)
        if echo:
            print(f"{label:24s} {name:{impl_width}s} {row}", flush=True)
    return results
