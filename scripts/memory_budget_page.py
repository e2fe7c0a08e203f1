"""Write ``docs/memory-budget.md``: the device margins the planner subtracts (CUDA's and CPU's, with
their sources), the host library caches a fresh CPU process creates (``scripts/host_caches.py``)
and the planner's prediction against a measurement (peak RSS growth of a fresh process, mmap
allocator setting: ``scripts/bench_memory.py``'s worker), for model_1 channels, 1 Evoformer + 1
extra-MSA block, ``low_memory_inference()``, no templates, no recycling, N_seq 128, N_extra 1024::

    .venv/bin/python scripts/memory_budget_page.py --out docs/memory-budget.md
    .venv/bin/python scripts/memory_budget_page.py --n-res 512 1024 --precisions bf16-full fp32

Every number on the page comes from this run (the margins from :mod:`alphafold_mem.planner.margins`,
the predictions from :func:`alphafold_mem.planner.estimate_breakdown`, the measurements from the
fresh processes). One fresh process per row; N_res 1024 takes minutes per row on one CPU thread.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import platform
import sys
import time

import torch

from alphafold_mem import MemoryPolicy, model_config
from alphafold_mem.planner.estimate import estimate_breakdown
from alphafold_mem.planner.margins import (
    ALLOCATOR_FRACTION,
    CUDA_CONTEXT_BYTES,
    HOST_LIBRARY_BYTES,
    NCCL_P2P_CHANNELS,
    NCCL_RING_CHANNELS,
    blas_workspace_bytes,
    device_margin,
    nccl_bytes,
)
from alphafold_mem.version import __version__

HERE = pathlib.Path(__file__).resolve().parent
GiB = 2**30

#: (term, source, status) of each margin: the page's sources column.
SOURCES = [
    (
        "CUDA context",
        "driver state and loaded kernels outside PyTorch's allocator; depends on GPU, driver and lazy "
        "module loading (`CUDA_MODULE_LOADING=LAZY`)",
        f"provisional ({CUDA_CONTEXT_BYTES / 2**20:.0f} MiB): to be measured on the first GPU run",
    ),
    (
        "cuBLAS / cuBLASLt workspaces",
        "PyTorch CUDA semantics notes (`CUBLAS_WORKSPACE_CONFIG`, default `:4096:2:16:8`; `:4096:8` on "
        "compute capability 9.0+, cuBLAS's Hopper recommendation) and `CUBLASLT_WORKSPACE_SIZE` "
        "(1 MiB; 4 MiB on 8.x with 24 GB+; 32 MiB on 9.0+)",
        "documented defaults (read from the environment when set); one stream",
    ),
    ("cuDNN workspace", "the model calls no cuDNN operation (no convolution, no cuDNN attention)", "0"),
    (
        "NCCL buffers (DAP)",
        f"NCCL environment variables: `NCCL_BUFFSIZE` (default 4 MiB) per channel and direction; "
        f"{NCCL_P2P_CHANNELS} point-to-point channels per peer, {NCCL_RING_CHANNELS} ring channels",
        "buffer size documented; channel counts provisional: to be measured on the first DAP GPU run",
    ),
    (
        "caching allocator",
        "PyTorch CUDA semantics notes, memory management: requests rounded to 512 B, up to 1 MiB from "
        "2 MiB segments, up to 10 MiB from 20 MiB segments, larger segments rounded to 2 MiB; cached "
        "free blocks fragment",
        f"provisional ({100 * ALLOCATOR_FRACTION:.0f} % of the budget): to be measured on the first GPU run",
    ),
]


def _script(name: str):
    """``scripts/<name>.py`` loaded as a module (the scripts folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def margin_table(budget: int = 80 * 10**9) -> list[str]:
    """The margins of an ``budget``-byte CUDA device, without DAP and under DAP 8 (GiB)."""
    one, eight = device_margin("cuda", budget, 1, environ={}), device_margin("cuda", budget, 8, environ={})
    values = {
        "CUDA context": (one.context, eight.context),
        "cuBLAS / cuBLASLt workspaces": (one.blas_workspaces, eight.blas_workspaces),
        "cuDNN workspace": (one.cudnn_workspace, eight.cudnn_workspace),
        "NCCL buffers (DAP)": (one.nccl_buffers, eight.nccl_buffers),
        "caching allocator": (one.allocator, eight.allocator),
    }
    lines = [
        f"| term | {budget / GiB:.1f} GiB budget, no DAP (GiB) | DAP 8 (GiB) | source | status |",
        "|---|---|---|---|---|",
    ]
    for term, source, status in SOURCES:
        a, b = values[term]
        lines.append(f"| {term} | {a / GiB:.3f} | {b / GiB:.3f} | {source} | {status} |")
    lines.append(f"| **total** | {one.total / GiB:.3f} | {eight.total / GiB:.3f} | | |")
    lines.append("")
    lines.append(
        f"(cuBLAS + cuBLASLt on compute capability 8.0: {blas_workspace_bytes(80, {}) / 2**20:.1f} MiB; "
        f"NCCL under DAP 2: {nccl_bytes(2, {}) / 2**20:.0f} MiB.)"
    )
    return lines


def measurement_rows(sizes: list[int], precisions: list[str], n_seq: int, n_extra: int) -> list[str]:
    """Prediction against the fresh-process RSS growth, one row per precision and N_res: the
    activation peak and what the planner reserves on CPU (that plus the host library caches)."""
    bench = _script("bench_memory")
    margin = device_margin("cpu", 0).total
    lines = [
        "| precision | N_res | predicted activations MiB | + host caches = planned MiB | measured RSS growth MiB "
        "| planned / measured |",
        "|---|---|---|---|---|---|",
    ]
    for precision in precisions:
        for n in sizes:
            args = bench_args(n, n_seq, n_extra, precision)
            cfg = model_config(
                "model_1",
                **{"evoformer.num_blocks": 1, "extra_msa.num_blocks": 1, "template.enabled": False, "num_recycles": 0},
            )
            policy = MemoryPolicy.low_memory_inference().replace(precision=precision)
            pred = estimate_breakdown(cfg, policy, n, n_seq, n_extra, 0).activations
            measured = bench._rss_in_fresh_process(args, "inference", "low_memory_inference", "mmap")
            planned = pred + margin
            lines.append(
                f"| {precision} | {n} | {pred / 2**20:.1f} | {planned / 2**20:.1f} | {measured / 2**20:.1f} "
                f"| {planned / measured:.3f} |"
            )
            print(lines[-1], flush=True)
    return lines


def bench_args(n_res: int, n_seq: int, n_extra: int, precision: str) -> argparse.Namespace:
    """The arguments ``bench_memory.py``'s worker reads, for this page's configuration."""
    return argparse.Namespace(
        preset="model_1",
        n_res=n_res,
        n_seq=n_seq,
        n_extra=n_extra,
        evo_blocks=1,
        extra_blocks=1,
        templates=0,
        recycles=0,
        threads=1,
        precision=precision,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/memory-budget.md")
    ap.add_argument("--n-res", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--precisions", nargs="+", default=["bf16-full", "fp32"])
    ap.add_argument("--n-seq", type=int, default=128)
    ap.add_argument("--n-extra", type=int, default=1024)
    ap.add_argument("--cache-n-res", type=int, nargs="+", default=[128, 256, 512], help="N_res of the host-cache rows")
    ap.add_argument("--no-measure", dest="measure", action="store_false", help="margins only (no fresh processes)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    command = "python scripts/memory_budget_page.py " + " ".join(argv if argv is not None else sys.argv[1:])
    header = [
        "# Memory budget: device margins and the planner against measurement",
        "",
        f"Generated by `{command.strip()}` on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC "
        f"({platform.machine()} {platform.system()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, alphafold-mem {__version__}). Do not edit by "
        "hand: rerun the command.",
        "",
        "## Device margins",
        "",
        "On CUDA the planner (`alphafold_mem.planner.margins.device_margin`) subtracts these from the budget "
        'before it calls a policy "fits"; `memory-plan` prints the margin it used (`margin ...` line, '
        "`config.margin` in `--json`). The context is not subtracted when the budget is the free memory "
        "the process measured.",
        "",
        *margin_table(),
        "",
        f"On CPU the planner subtracts one term, the host library caches ({HOST_LIBRARY_BYTES / 2**20:.0f} MiB, "
        "`HOST_LIBRARY_BYTES`): what a process's libraries keep after their first call at new shapes, outside "
        "every tensor storage (oneDNN's primitive cache and JIT kernels, which bf16 matmuls on CPU go through; "
        "PyTorch's own caches). The storage counter and the planner's trace do not see them; a fresh "
        "process's first step at a size holds part of them at its peak, a second step at the same size "
        "none. Measured below (one fresh process per row, `scripts/host_caches.py`); the margin covers the "
        "largest `left after first`.",
        "",
    ]
    body = []
    if args.measure:
        caches = _script("host_caches").table(args.cache_n_res, args.precisions, args.n_seq, args.n_extra)
        header += [
            f"model_1 channels, 1 Evoformer + 1 extra-MSA block, `low_memory_inference()`, N_seq {args.n_seq}, "
            f"N_extra {args.n_extra}, one CPU thread, glibc's mmap setting:",
            "",
            *caches,
            "",
        ]
        body = [
            "## Prediction against measurement",
            "",
            f"model_1 channels, 1 Evoformer + 1 extra-MSA block, `low_memory_inference()`, no templates, no "
            f"recycling, N_seq {args.n_seq}, N_extra {args.n_extra}, one CPU thread. Predicted: the planner's "
            "activation peak (`estimate_breakdown(...).activations`); planned: that plus the CPU margin, what the "
            "planner reserves for the step; measured: the peak resident-set growth of one forward in a fresh "
            "process with glibc's mmap setting (`scripts/bench_memory.py` worker).",
            "",
            *measurement_rows(args.n_res, args.precisions, args.n_seq, args.n_extra),
            "",
        ]
    pathlib.Path(args.out).write_text("\n".join(header + body))
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
