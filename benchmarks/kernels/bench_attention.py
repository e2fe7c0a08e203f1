"""Benchmark the fused attention kernel against the reference and PyTorch SDPA on AF2 shapes.

Commands (from the repository root)::

    python -m benchmarks.kernels.bench_attention                    # GPU, bf16, full AF2 table
    python -m benchmarks.kernels.bench_attention --dtype fp32
    python -m benchmarks.kernels.bench_attention --smoke            # CPU: tiny shape, Triton interpreter

Prints the device and one table: per shape and implementation, forward time, backward time
(forward+backward minus forward; grads for q, k, v and the pair bias), and the peak memory of
forward+backward above the inputs. Implementations:

* ``triton``: :func:`kernels.fused_attention.fused_attention` (``kernels.attention(impl="triton")``);
* ``triton-fold-all``: the same with ``BIAS_GRAD_FOLD="all"`` (the shared pair bias's gradient
  computed in the dk/dv pass with one atomic add per row, instead of its own pass);
* ``reference``: :func:`kernels.reference.attention` (materialises [*, H, Q, K] logits and probs);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with ``scale=1`` and the summed
  biases (mask + pair, materialised at [*, H, Q, K]) as ``attn_mask``;
* when importable (``--impls triton,trifast,cueq,deepspeed``; the GPU check adds them by itself):
  ``trifast`` (triangle shapes only), ``cueq`` (cuEquivariance ``triangle_attention``),
  ``deepspeed`` (DeepSpeed4Science ``DS4Sci_EvoformerAttention``).

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

from alphafold_mem import kernels
from benchmarks.kernels._common import (
    benchmark_parser,
    device_name,
    measure_call,
    run_settings,
    run_table,
)

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
SMOKE_SHAPES = [("smoke S=2 N=19", 2, 2, 19, 8)]  # two rows share the pair bias; Q = K = 19: a tail tile


def _inputs(rows: int, H: int, N: int, C: int, dtype: torch.dtype, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, rows, H, N, C, device=device, dtype=dtype, generator=g) * C**-0.5
    k = torch.randn(1, rows, H, N, C, device=device, dtype=dtype, generator=g)
    v = torch.randn(1, rows, H, N, C, device=device, dtype=dtype, generator=g)
    mask = torch.rand(1, rows, 1, 1, N, device=device, generator=g) > 0.1
    mask_bias = ((mask.to(dtype) - 1) * 1e9).to(dtype)  # [1, rows, 1, 1, N]
    pair_bias = torch.randn(1, 1, H, N, N, device=device, dtype=dtype, generator=g)  # shared by rows
    d_out = torch.randn(q.shape, device=device, dtype=dtype, generator=g)
    for t in (q, k, v, pair_bias):
        t.requires_grad_(True)
    return q, k, v, mask_bias, pair_bias, d_out


def _third_party() -> dict:
    """Other projects' fused attention, each only when importable (timing comparison: their scaling
    and mask conventions are mapped as documented, not checked against ours). Layouts: ours q
    [1, rows, H, N, C], mask bias [1, rows, 1, 1, N], pair bias [1, 1, H, N, N]."""
    out = {}
    try:  # trifast (triangle attention only: rows == N): q [B, H, N, N, C], bias [B, H, N, N], mask [B, N, N]
        from trifast import triangle_attention as trifast_attention  # optional: a competitor, if installed
    except Exception:  # noqa: BLE001 - not installed, or a broken install
        pass
    else:

        def trifast(q, k, v, biases):
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            return trifast_attention(qt, kt, vt, biases[1][:, 0], biases[0][:, :, 0, 0, :] < 0).transpose(1, 2)

        out["trifast"] = trifast
    try:  # cuEquivariance: our layout, boolean key mask [B, rows, 1, 1, N], explicit scale
        import cuequivariance_torch as cuet  # optional: a competitor, if installed
    except Exception:  # noqa: BLE001
        pass
    else:
        if hasattr(cuet, "triangle_attention"):
            out["cueq"] = lambda q, k, v, b: cuet.triangle_attention(q, k, v, b[1], b[0] == 0, scale=1.0)
    try:  # DeepSpeed4Science Evoformer attention: q [B, rows, N, H, C], biases as ours
        from deepspeed.ops.deepspeed4science import DS4Sci_EvoformerAttention  # optional: a competitor
    except Exception:  # noqa: BLE001
        pass
    else:

        def deepspeed(q, k, v, biases):
            qt, kt, vt = (t.transpose(-2, -3) for t in (q, k, v))
            return DS4Sci_EvoformerAttention(qt, kt, vt, list(biases)).transpose(-2, -3)

        out["deepspeed"] = deepspeed
    return out


def _impls() -> dict:
    def sdpa(q, k, v, biases):
        mask = biases[0] + biases[1]  # [*, H, Q, K], materialised
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)

    def triton_fold_all(q, k, v, biases):  # the shared pair bias's gradient in the dk/dv pass too
        from alphafold_mem.kernels import fused_attention  # needs Triton; the other rows run without it

        saved, fused_attention.BIAS_GRAD_FOLD = fused_attention.BIAS_GRAD_FOLD, "all"
        try:
            return kernels.attention(q, k, v, biases, impl="triton")
        finally:
            fused_attention.BIAS_GRAD_FOLD = saved

    return {
        "triton": lambda q, k, v, b: kernels.attention(q, k, v, b, impl="triton"),
        "triton-fold-all": triton_fold_all,
        "reference": lambda q, k, v, b: kernels.attention(q, k, v, b, impl="reference"),
        "sdpa": sdpa,
        **_third_party(),
    }


DEFAULT_IMPLS = ("triton", "reference", "sdpa")


def bench_one(fn: Callable, shape, dtype, device, warmup: int, reps: int):
    _, rows, H, N, C = shape
    q, k, v, mask_bias, pair_bias, d_out = _inputs(rows, H, N, C, dtype, device)
    return measure_call(lambda: fn(q, k, v, [mask_bias, pair_bias]), (q, k, v, pair_bias), d_out, device, warmup, reps)


def table(shapes, names, dtype, device, warmup: int, reps: int, echo: bool = True) -> list:
    """Run the benchmark rows (every shape x implementation ``names``); :func:`run_table`'s dicts."""
    impls = _impls()
    rows = (
        (shape[0], name, partial(bench_one, impls[name], shape, dtype, device, warmup, reps))
        for shape in shapes
        for name in names
    )
    return run_table(rows, device, impl_width=10, echo=echo)


def main(argv=None) -> None:
    parser = benchmark_parser(__doc__.splitlines()[0], reps=10)
    parser.add_argument("--impls", default=",".join(DEFAULT_IMPLS))
    args = parser.parse_args(argv)

    device, dtype, warmup, reps = run_settings(args)  # before triton is imported
    names = [n for n in args.impls.split(",") if n]
    unknown = set(names) - set(_impls())
    if unknown:
        parser.error(f"--impls: unknown {sorted(unknown)}; choose from {','.join(_impls())}")
    print(f"device: {device_name(device)}; dtype {args.dtype}")
    table(SMOKE_SHAPES if args.smoke else AF2_SHAPES, names, dtype, device, warmup, reps)


if __name__ == "__main__":
    main()
