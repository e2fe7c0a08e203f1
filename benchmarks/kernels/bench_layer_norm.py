"""Benchmark the fused LayerNorm against the reference and ``torch.nn.functional.layer_norm``.

Commands (from the repository root)::

    python -m benchmarks.kernels.bench_layer_norm                  # GPU, bf16 input, fp32 params
    python -m benchmarks.kernels.bench_layer_norm --smoke          # CPU: tiny shape, Triton interpreter

Prints the device and one table: forward time, backward time (forward+backward minus forward) and
peak memory above the inputs for the AF2 LayerNorm shapes: pair [N_res, N_res, c_z=128] at N_res
256/512/1024, MSA [N_seq=512, N_res=256, c_m=256], extra MSA [5120, 256, c_e=64], and the
single representation widened to 384 channels [N_res=1024, 384].
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F

from alphafold_mem import kernels
from benchmarks.kernels._common import (
    benchmark_parser,
    device_name,
    measure_call,
    run_settings,
    run_table,
)

AF2_SHAPES = [
    ("pair 256x256x128", (256, 256, 128)),
    ("pair 512x512x128", (512, 512, 128)),
    ("pair 1024x1024x128", (1024, 1024, 128)),
    ("msa 512x256x256", (512, 256, 256)),
    ("extra_msa 5120x256x64", (5120, 256, 64)),
    ("single 1024x384", (1024, 384)),
]
SMOKE_SHAPES = [("smoke 7x37x100", (7, 37, 100))]


def _impls() -> dict:
    def torch_ln(x, w, b):  # what autocast would run: fp32 compute when x is bf16
        return F.layer_norm(x.float(), x.shape[-1:], w, b, 1e-5).to(x.dtype)

    return {
        "triton": lambda x, w, b: kernels.layer_norm(x, w, b, 1e-5, impl="triton"),
        "reference": lambda x, w, b: kernels.layer_norm(x, w, b, 1e-5, impl="reference"),
        "F.layer_norm": torch_ln,
    }


def bench_one(fn: Callable, shape, dtype, device, warmup: int, reps: int):
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, device=device, dtype=dtype, generator=g).requires_grad_(True)
    w = torch.randn(shape[-1], device=device, generator=g).requires_grad_(True)
    b = torch.randn(shape[-1], device=device, generator=g).requires_grad_(True)
    return measure_call(lambda: fn(x, w, b), (x, w, b), torch.randn_like(x), device, warmup, reps)


def table(shapes, dtype, device, warmup: int, reps: int, echo: bool = True) -> list:
    """Run the benchmark rows (every shape x implementation); :func:`run_table`'s dicts."""
    rows = (
        (label, name, partial(bench_one, fn, shape, dtype, device, warmup, reps))
        for label, shape in shapes
        for name, fn in _impls().items()
    )
    return run_table(rows, device, impl_width=12, echo=echo)


def main(argv=None) -> None:
    parser = benchmark_parser(__doc__.splitlines()[0], reps=20)
    args = parser.parse_args(argv)

    device, dtype, warmup, reps = run_settings(args)  # before triton is imported
    print(f"device: {device_name(device)}; dtype {args.dtype} (parameters fp32)")
    table(SMOKE_SHAPES if args.smoke else AF2_SHAPES, dtype, device, warmup, reps)


if __name__ == "__main__":
    main()
