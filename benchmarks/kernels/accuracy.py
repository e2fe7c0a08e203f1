"""Accuracy of the Triton kernels against an fp64 oracle, beside PyTorch's own error in the same dtype.

Commands (from the repository root)::

    python -m benchmarks.kernels.accuracy  # CPU: Triton's interpreter (a few minutes); GPU: compiled

Per kernel, case and dtype: the largest error of the kernel to the fp64 oracle over the output and
every gradient, the torch reference's error at that same tensor, and the worst ratio
kernel error / (torch error + 1 ulp of the dtype at the tensor's scale) over all tensors (the tests
require <= 3). Inputs as in the benchmarks
(``bench_attention``, ``bench_triangle``) at sizes that are not multiples of the 16-wide
interpreter blocks.
"""

from __future__ import annotations

import argparse

import torch

from alphafold_mem import kernels
from benchmarks.kernels._common import device_name, setup_device
from benchmarks.kernels.bench_attention import _inputs
from benchmarks.kernels.bench_triangle import _weights

# kernel, case label, builder arguments
CASES = [
    ("attention", "triangle rows=21 H=2 N=21 C=16", (21, 2, 21, 16)),
    ("attention", "MSA rows=5 H=4 N=37 C=32", (5, 4, 37, 32)),
    ("triangle multiplication", "outgoing N=21 c_z=24 c=20", (True, 21, 24, 20)),
    ("triangle multiplication", "incoming N=21 c_z=24 c=20", (False, 21, 24, 20)),
]


def _attention(impl: str, dtype: torch.dtype, device, rows: int, H: int, N: int, C: int) -> list:
    q, k, v, mask_bias, pair_bias, d_out = (t.detach().double() for t in _inputs(rows, H, N, C, torch.float32, device))
    leaves = [t.to(dtype).requires_grad_(True) for t in (q, k, v, pair_bias)]
    out = kernels.attention(*leaves[:3], [mask_bias.to(dtype), leaves[3]], impl=impl)
    out.backward(d_out.to(dtype))
    return [out.detach()] + [t.grad for t in leaves]


def _triangle(impl: str, dtype: torch.dtype, device, outgoing: bool, n: int, cz: int, ch: int) -> list:
    g = torch.Generator(device=device).manual_seed(0)
    w = [t.detach().to(dtype).requires_grad_(True) for t in _weights(cz, ch, torch.float32, device, g)]
    z = torch.randn(1, n, n, cz, device=device, generator=g).to(dtype).requires_grad_(True)
    mask = (torch.rand(1, n, n, device=device, generator=g) > 0.2).to(dtype)
    d_out = torch.randn(1, n, n, cz, device=device, generator=g).to(dtype)
    out = kernels.triangle_multiplication(z, mask, kernels.TriangleMultiplicationWeights(*w), outgoing, impl=impl)
    out.backward(d_out)
    return [out.detach(), z.grad] + [t.grad for t in w]


def rows(device) -> list[dict]:
    """One dict per (kernel, case, dtype): kernel_err, torch_err (at the tensor with the largest
    kernel error) and worst_ratio over all tensors."""
    out = []
    for kernel, label, args in CASES:
        fn = _attention if kernel == "attention" else _triangle
        oracle = fn("reference", torch.float64, device, *args)
        for dtype in (torch.float32, torch.bfloat16):
            got, ref = fn("triton", dtype, device, *args), fn("reference", dtype, device, *args)
            errs = [
                (
                    (a.double() - o).abs().max().item(),
                    (r.double() - o).abs().max().item(),
                    torch.finfo(dtype).eps * max(1.0, o.abs().max().item()),
                )
                for a, r, o in zip(got, ref, oracle)
            ]
            k_err, t_err, _ = max(errs)
            out.append(
                dict(
                    kernel=kernel,
                    case=label,
                    dtype=str(dtype).replace("torch.", ""),
                    kernel_err=k_err,
                    torch_err=t_err,
                    worst_ratio=max(e / (t + ulp) for e, t, ulp in errs),
                )
            )
    return out


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)

    device = setup_device(smoke=True)  # CUDA when visible, else the interpreter (before triton is imported)
    print(f"device: {device_name(device)}")
    print("| kernel | case | dtype | max kernel err vs fp64 | torch err (same tensor) | worst kernel / (torch + ulp) |")
    print("|---|---|---|---|---|---|")
    for r in rows(device):
        print(
            f"| {r['kernel']} | {r['case']} | {r['dtype']} | {r['kernel_err']:.2e} | {r['torch_err']:.2e} | "
            f"{r['worst_ratio']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
