"""Benchmark the fused attention kernel against the reference and PyTorch SDPA on AF2 shapes.

Commands (from the repository root)::

    python -m kernels.benchmarks.bench_attention                    # GPU, bf16, full AF2 table
    python -m kernels.benchmarks.bench_attention --dtype fp32
    python -m kernels.benchmarks.bench_attention --smoke            # CPU: tiny shape, Triton interpreter

Prints the device and one table: per shape and implementation, forward time, backward time
(forward+backward minus forward; grads for q, k, v and the pair bias), and the peak memory of
forward+backward above the inputs. Implementations:

* ``triton``: :func:`kernels.fused_attention.fused_attention` (``kernels.attention(impl="triton")``);
* ``reference``: :func:`kernels.reference.attention` (materialises [*, H, Q, K] logits and probs);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with ``scale=1`` and the summed
  biases (mask + pair, materialised at [*, H, Q, K]) as ``attn_mask``.

Shapes (batch 1; the caller's q is pre-scaled; mask bias [*, 1, 1, K], pair bias shared by rows):

* triangle attention, N_res in 128/256/512/1024, H=4, C=32: q [1, N, 4, N, 32], pair [1, 1, 4, N, N]
* MSA row attention, N_seq in 128/512, N_res=256, H=8, C=32: q [1, S, 8, 256, 32]
* extra-MSA row attention, N_extra in 1024/5120, N_res=256, H=8, C=8: q [1, S, 8, 256, 8]

Shapes that run out of memory print ``OOM`` and the table continues.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, List, Tuple

import torch

from kernels.benchmarks._common import benchmark_parser, device_name, measure, print_table, run_settings

# name, rows (leading dim after batch), H, N_res (Q = K), C
AF2_SHAPES: List[Tuple[str, int, int, int, int]] = [
    ("triangle N=128", 128, 4, 128, 32),
    ("triangle N=256", 256, 4, 256, 32),
    ("triangle N=512", 512, 4, 512, 32),
    ("triangle N=1024", 1024, 4, 1024, 32),
    ("msa_row S=128 N=256", 128, 8, 256, 32),
    ("msa_row S=512 N=256", 512, 8, 256, 32),
    ("extra_msa S=1024 N=256", 1024, 8, 256, 8),
    ("extra_msa S=5120 N=256", 5120, 8, 256, 8),
]
SMOKE_SHAPES = [("smoke S=3 N=19", 3, 2, 19, 8)]


def _inputs(rows: int, H: int, N: int, C: int, dtype: torch.dtype, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, rows, H, N, C, device=device, dtype=dtype, generator=g) * C ** -0.5
    k = torch.randn(1, rows, H, N, C, device=device, dtype=dtype, generator=g)
    v = torch.randn(1, rows, H, N, C, device=device, dtype=dtype, generator=g)
    mask = torch.rand(1, rows, 1, 1, N, device=device, generator=g) > 0.1
    mask_bias = ((mask.to(dtype) - 1) * 1e9).to(dtype)  # [1, rows, 1, 1, N]
    pair_bias = torch.randn(1, 1, H, N, N, device=device, dtype=dtype, generator=g)  # shared by rows
    d_out = torch.randn_like(q)
    for t in (q, k, v, pair_bias):
        t.requires_grad_(True)
    return q, k, v, mask_bias, pair_bias, d_out


def _impls() -> dict:
    import kernels

    def sdpa(q, k, v, biases):
        mask = biases[0] + biases[1]  # [*, H, Q, K], materialised
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)

    return {
        "triton": lambda q, k, v, b: kernels.attention(q, k, v, b, impl="triton"),
        "reference": lambda q, k, v, b: kernels.attention(q, k, v, b, impl="reference"),
        "sdpa": sdpa,
    }


def bench_one(fn: Callable, shape, dtype, device, warmup: int, reps: int):
    _, rows, H, N, C = shape
    q, k, v, mask_bias, pair_bias, d_out = _inputs(rows, H, N, C, dtype, device)

    def fwd():
        with torch.no_grad():
            return fn(q, k, v, [mask_bias, pair_bias])

    def fwd_bwd():
        for t in (q, k, v, pair_bias):
            t.grad = None
        out = fn(q, k, v, [mask_bias, pair_bias])
        out.backward(d_out)

    return measure(fwd, fwd_bwd, device, warmup, reps)


def main(argv=None) -> None:
    parser = benchmark_parser(__doc__.splitlines()[0], reps=10)
    parser.add_argument("--impls", default="triton,reference,sdpa")
    args = parser.parse_args(argv)

    device, dtype, warmup, reps = run_settings(args)  # before triton is imported
    shapes = SMOKE_SHAPES if args.smoke else AF2_SHAPES
    impls = _impls()
    names = [n for n in args.impls.split(",") if n]
    if set(names) - set(impls):
        parser.error(f"--impls: unknown {sorted(set(names) - set(impls))}; choose from {','.join(impls)}")

    print(f"device: {device_name(device)}; dtype {args.dtype}")
    rows = ((shape[0], name, partial(bench_one, impls[name], shape, dtype, device, warmup, reps))
            for shape in shapes for name in names)
    print_table(rows, device, impl_width=10)


if __name__ == "__main__":
    main()
