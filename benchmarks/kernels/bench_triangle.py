"""Benchmark the fused triangle multiplication against its PyTorch reference (and cuEquivariance's
``triangle_multiplicative_update`` when importable) at AF2 pair sizes.

Commands (from the repository root)::

    python -m benchmarks.kernels.bench_triangle                    # GPU, bf16
    python -m benchmarks.kernels.bench_triangle --dtype fp32
    python -m benchmarks.kernels.bench_triangle --smoke            # CPU: tiny shape, Triton interpreter

Prints the device and one table: per shape and implementation, forward time, backward time
(forward+backward minus forward; gradients for z and all 16 weights) and the peak memory of
forward+backward above the inputs. Shapes: z [1, N, N, c_z=128] with c_hidden=128 (AF2's Evoformer)
at N 128/256/512/1024/2048, outgoing edges, mask with 10 % zeros. Implementations:

* ``triton``: :func:`kernels.fused_triangle.fused_triangle_multiplication` (``impl="triton"``);
* ``reference``: :func:`kernels.reference.triangle_multiplication` (PyTorch eager, materialises the
  projections);
* ``cueq``: ``cuequivariance_torch.triangle_multiplicative_update`` with the same weights (its
  projections have no biases: ours are passed without theirs; timing comparison only).

Shapes that run out of memory print ``OOM`` and the table continues.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch

from alphafold_mem import kernels
from alphafold_mem.kernels import TriangleMultiplicationWeights
from benchmarks.kernels._common import (
    benchmark_parser,
    device_name,
    measure_call,
    run_settings,
    run_table,
)

# name, N, c_z, c_hidden
AF2_SHAPES = [(f"pair N={n}", n, 128, 128) for n in (128, 256, 512, 1024, 2048)]
SMOKE_SHAPES = [("smoke N=19", 19, 16, 16)]


def _weights(cz: int, ch: int, dtype: torch.dtype, device: torch.device, g: torch.Generator):
    shapes = [(cz,), (cz,)] + [(ch, cz), (ch,)] * 4 + [(ch,), (ch,), (cz, ch), (cz,), (cz, cz), (cz,)]
    ws = [torch.randn(*s, device=device, generator=g) * (s[-1] ** -0.5 if len(s) == 2 else 0.1) for s in shapes]
    ws[0] += 1.0
    ws[10] += 1.0
    return TriangleMultiplicationWeights(*(w.to(dtype).requires_grad_(True) for w in ws))


def _cueq() -> dict:
    try:
        import cuequivariance_torch as cuet  # optional: a third-party kernel to compare with
    except Exception:  # noqa: BLE001 - not installed, or a broken install
        return {}
    if not hasattr(cuet, "triangle_multiplicative_update"):
        return {}

    def cueq(z, mask, w):
        return cuet.triangle_multiplicative_update(
            z,
            direction="outgoing",
            mask=mask,
            norm_in_weight=w.layer_norm_input_weight,
            norm_in_bias=w.layer_norm_input_bias,
            p_in_weight=torch.cat([w.left_projection_weight, w.right_projection_weight]),
            g_in_weight=torch.cat([w.left_gate_weight, w.right_gate_weight]),
            norm_out_weight=w.center_layer_norm_weight,
            norm_out_bias=w.center_layer_norm_bias,
            p_out_weight=w.output_projection_weight,
            g_out_weight=w.gating_linear_weight,
        )

    return {"cueq": cueq}


def _impls() -> dict:
    return {
        "triton": lambda z, m, w: kernels.triangle_multiplication(z, m, w, True, impl="triton"),
        "reference": lambda z, m, w: kernels.triangle_multiplication(z, m, w, True, impl="reference"),
        **_cueq(),
    }


def bench_one(fn: Callable, shape, dtype, device, warmup: int, reps: int):
    _, n, cz, ch = shape
    g = torch.Generator(device=device).manual_seed(0)
    z = torch.randn(1, n, n, cz, device=device, generator=g).to(dtype).requires_grad_(True)
    mask = (torch.rand(1, n, n, device=device, generator=g) > 0.1).to(dtype)
    w = _weights(cz, ch, dtype, device, g)
    return measure_call(lambda: fn(z, mask, w), (z, *w), torch.randn_like(z), device, warmup, reps)


def table(shapes, names, dtype, device, warmup: int, reps: int, echo: bool = True) -> list:
    """Run the benchmark rows (every shape x implementation ``names``); :func:`run_table`'s dicts."""
    impls = _impls()
    rows = (
        (shape[0], name, partial(bench_one, impls[name], shape, dtype, device, warmup, reps))
        for shape in shapes
        for name in names
        if name in impls
    )
    return run_table(rows, device, impl_width=10, echo=echo)


def main(argv=None) -> None:
    parser = benchmark_parser(__doc__.splitlines()[0], reps=5)
    parser.add_argument("--impls", default="triton,reference,cueq")
    args = parser.parse_args(argv)

    device, dtype, warmup, reps = run_settings(args)  # before triton is imported
    names = [n for n in args.impls.split(",") if n]
    print(f"device: {device_name(device)}; dtype {args.dtype}")
    table(SMOKE_SHAPES if args.smoke else AF2_SHAPES, names, dtype, device, warmup, reps)


if __name__ == "__main__":
    main()
