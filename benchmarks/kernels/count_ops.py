"""Count what the Triton kernels do, in Triton's CPU interpreter: launches, programs, matmul FLOPs
(of the padded tiles), elements loaded and atomic adds, per kernel, for one forward + backward.

Commands (from the repository root; CPU, about a minute)::

    python -m benchmarks.kernels.count_ops                 # both tables
    python -m benchmarks.kernels.count_ops --only attention

Attention: AF2's two shapes with a pair bias shared across the leading rows (triangle attention,
MSA row attention; the key-mask bias needs no gradient) and one bias with a row per leading row,
under each setting of :data:`kernels.fused_attention.BIAS_GRAD_FOLD` (``none``: every bias
gradient in its own pass, the previous kernels; ``per_row``: the default; ``all``). Triangle
multiplication: outgoing, one size; the reference's FLOPs (``torch.utils.flop_counter``) beside the
kernel's. Counts are exact for these shapes; times in the interpreter mean nothing and are not shown.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections import defaultdict
from typing import Callable, Iterator

import torch

from alphafold_mem import kernels
from alphafold_mem.kernels import TriangleMultiplicationWeights
from alphafold_mem.kernels._interpreter import skip_repatching
from alphafold_mem.kernels._triton_support import triton_unavailable_reason

# name, lead dims, H, Q = K, C, bias pattern ("shared": pair bias [*, 1, H, Q, K]; "per_row": [*, H, Q, K])
ATTENTION_CASES = [
    ("triangle attention, N=40", (1, 40), 2, 40, 16, "shared"),
    ("MSA row attention, S=8, N=40", (1, 8), 2, 40, 16, "shared"),
    ("per-row bias, S=8, N=40", (1, 8), 2, 40, 16, "per_row"),
]
TRIANGLE_CASE = ("triangle multiplication, N=40, c_z=c=32", (1,), 40, 32, 32)


@contextlib.contextmanager
def count_ops() -> Iterator[dict]:
    """Within the context, ``counts[kernel name][what]`` adds up launches, programs, dot FLOPs,
    loaded elements and atomically added elements of every interpreted launch."""
    import numpy as np  # with triton's interpreter (below): only where counting runs
    import triton.runtime.interpreter as interp  # optional: triton, after TRITON_INTERPRET is set

    counts: dict = defaultdict(lambda: defaultdict(int))
    current = ["?"]
    builder = interp.interpreter_builder
    originals = {n: getattr(builder, n) for n in ("create_dot", "create_masked_load", "create_atomic_rmw")}
    run = interp.GridExecutor.__call__

    def launch(self, *args, **kwargs):
        current[0] = self.fn.__name__
        counts[current[0]]["launches"] += 1
        before = builder.grid_dim if hasattr(builder, "grid_dim") else None
        out = run(self, *args, **kwargs)
        dims = builder.grid_dim if hasattr(builder, "grid_dim") else before
        counts[current[0]]["programs"] += int(np.prod(dims)) if dims is not None else 0
        return out

    def dot(a, b, d, *rest):
        m, k = a.data.shape[-2:]
        counts[current[0]]["dot_flops"] += 2 * int(np.prod(a.data.shape[:-2])) * m * k * b.data.shape[-1]
        return originals["create_dot"](a, b, d, *rest)

    def load(ptrs, mask, *rest):
        counts[current[0]]["loaded"] += int(np.count_nonzero(mask.data))
        return originals["create_masked_load"](ptrs, mask, *rest)

    def atomic(op, ptr, val, mask, *rest):
        counts[current[0]]["atomic_adds"] += int(np.count_nonzero(mask.data))
        return originals["create_atomic_rmw"](op, ptr, val, mask, *rest)

    builder.create_dot, builder.create_masked_load, builder.create_atomic_rmw = dot, load, atomic
    interp.GridExecutor.__call__ = launch
    try:
        yield counts
    finally:
        for n, f in originals.items():
            setattr(builder, n, f)
        interp.GridExecutor.__call__ = run


def _reference_flops(fn: Callable[[], torch.Tensor], d_out: torch.Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode  # torch utility, only for the reference column

    with FlopCounterMode(display=False) as mode:
        fn().backward(d_out)
    return mode.get_total_flops()


def _attention_run(lead, H, N, C, pattern, impl):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*lead, H, N, C, generator=g).requires_grad_(True) for _ in range(3))
    mask_bias = ((torch.rand(*lead, 1, 1, N, generator=g) > 0.1).float() - 1) * 1e9
    shape = (lead[0], 1, H, N, N) if pattern == "shared" else lead + (H, N, N)
    bias = torch.randn(shape, generator=g).requires_grad_(True)
    d_out = torch.randn(*lead, H, N, C, generator=g)
    return (lambda: kernels.attention(q, k, v, [mask_bias, bias], impl=impl)), d_out


def attention_rows() -> list[dict]:
    """One row per (case, fold setting, kernel) of one attention forward + backward."""
    from alphafold_mem.kernels import fused_attention  # imports triton: after main set TRITON_INTERPRET

    rows = []
    saved = fused_attention.BIAS_GRAD_FOLD
    try:
        for label, lead, H, N, C, pattern in ATTENTION_CASES:
            ref_fn, d_out = _attention_run(lead, H, N, C, pattern, "reference")
            ref_flops = _reference_flops(ref_fn, d_out)
            for fold in ("none", "per_row", "all"):
                fused_attention.BIAS_GRAD_FOLD = fold
                fn, d_out = _attention_run(lead, H, N, C, pattern, "triton")
                with count_ops() as counts:
                    fn().backward(d_out)
                rows += _rows(counts, case=label, variant=f"fold={fold}", reference_flops=ref_flops)
    finally:
        fused_attention.BIAS_GRAD_FOLD = saved
    return rows


def triangle_rows() -> list[dict]:
    """One row per kernel of one fused triangle multiplication forward + backward."""

    label, lead, n, cz, ch = TRIANGLE_CASE
    g = torch.Generator().manual_seed(0)
    shapes = [(cz,), (cz,)] + [(ch, cz), (ch,)] * 4 + [(ch,), (ch,), (cz, ch), (cz,), (cz, cz), (cz,)]
    weights = TriangleMultiplicationWeights(*(torch.randn(*s, generator=g).requires_grad_(True) for s in shapes))
    z = torch.randn(*lead, n, n, cz, generator=g).requires_grad_(True)
    mask = torch.ones(*lead, n, n)
    d_out = torch.randn(*lead, n, n, cz, generator=g)
    ref_flops = _reference_flops(lambda: kernels.triangle_multiplication(z, mask, weights, True), d_out)
    with count_ops() as counts:
        kernels.triangle_multiplication(z, mask, weights, True, impl="triton").backward(d_out)
    return _rows(counts, case=label, variant="", reference_flops=ref_flops)


COUNTS = ("launches", "programs", "dot_flops", "loaded", "atomic_adds")


def _rows(counts: dict, **fields) -> list[dict]:
    return [dict(kernel=k, **fields, **{name: c.get(name, 0) for name in COUNTS}) for k, c in counts.items()]


def format_rows(rows: list[dict]) -> str:
    """A Markdown table of :func:`attention_rows` / :func:`triangle_rows`, with a total per (case, variant)."""
    lines = [
        "| case | variant | kernel | launches | programs | dot MFLOP | loaded k-elements | atomic adds | "
        "reference MFLOP |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict = defaultdict(list)
    for r in rows:
        groups[(r["case"], r["variant"])].append(r)
    for (case, variant), rs in groups.items():
        for r in rs + [dict(kernel="**total**", **{k: sum(x[k] for x in rs) for k in COUNTS})]:
            ref = f"{rs[0]['reference_flops'] / 1e6:.1f}" if r["kernel"] == "**total**" else ""
            lines.append(
                f"| {case} | {variant} | {r['kernel']} | {r['launches']} | {r['programs']} | "
                f"{r['dot_flops'] / 1e6:.1f} | {r['loaded'] / 1e3:.1f} | {r['atomic_adds']} | {ref} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["attention", "triangle"])
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton: counts need the interpreter

    reason = triton_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"count_ops needs Triton's interpreter: {reason}")
    skip_repatching()
    if args.only != "triangle":
        print(format_rows(attention_rows()), flush=True)
        print()
    if args.only != "attention":
        print(format_rows(triangle_rows()))


if __name__ == "__main__":
    main()
