"""The in-place triangle multiplication's block of rows: time and peak against the rows per block.

:meth:`alphafold_mem.model.triangle.TriangleMultiplication.add_to_` (inference) computes its right
projection b whole (``[C, N_res, N_res]``, channel-first) and then, block by block of output rows
(incoming: columns), the product ``a_block @ b``. Every block reads all of b, so with few rows per
block the product is bound by memory traffic, not arithmetic. Blocks are ``chunk_size`` rows but at
least ``MATMUL_ROWS``; this script times ``add_to_`` (outgoing and incoming, model_1 pair channels
c_z = c = 128, one thread, no autograd) at a given ``chunk_size`` with ``MATMUL_ROWS`` set to each
value asked, interleaved, and prints per row the median seconds, the time relative to the first
row, and the peak bytes of tensor storages created during the call (the storage counter,
:func:`alphafold_mem.memory.track_peak`; z and the mask excluded), all in one run::

    .venv/bin/python scripts/bench_triangle_blocks.py --n-res 64 128 256 --chunk-size 4 --rows 4 8 16 32

``--rows 0`` means: blocks of exactly ``chunk_size`` rows (the behaviour before blocks existed). The
printed ``max |Δ|`` is the largest difference of the updated z from the first row's (the block size
changes only how the product is split, not what it computes: rounding at most).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from alphafold_mem import MemoryPolicy, bind
from alphafold_mem.memory import track_peak
from alphafold_mem.model import triangle
from alphafold_mem.model.triangle import TriangleMultiplication


def _modules(c: int, seed: int = 0) -> dict[str, TriangleMultiplication]:
    torch.manual_seed(seed)
    mods = {}
    for name, outgoing in (("outgoing", True), ("incoming", False)):
        tm = TriangleMultiplication(c, c, outgoing=outgoing).eval()
        with torch.no_grad():  # AF2 zero-initialises the output layers; perturb so the update is not trivial
            for p in tm.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        mods[name] = tm
    return mods


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-res", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--chunk-size", type=int, default=4)
    ap.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[0, 8, 16, 32],
        help="MATMUL_ROWS values to compare (0: blocks of chunk_size rows)",
    )
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    mods = _modules(args.channels)
    for tm in mods.values():
        bind(tm, MemoryPolicy(chunk_size=args.chunk_size, inplace=True))
    original = triangle.MATMUL_ROWS
    print(
        f"# in-place triangle multiplication, c_z = c = {args.channels}, chunk_size {args.chunk_size}, "
        f"{args.threads} thread(s), median of {args.repeats} (rows interleaved)"
    )
    print("| N_res | edges | MATMUL_ROWS | rows per block | s | / first row | peak MB (counter) | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for n in args.n_res:
            g = torch.Generator().manual_seed(n)
            z = torch.randn(n, n, args.channels, generator=g)
            mask = (torch.rand(n, n, generator=g) > 0.1).float()
            for name, tm in mods.items():
                times = {r: [] for r in args.rows}
                results, peaks = {}, {}
                with torch.no_grad():
                    for r in args.rows:  # once each for the result and the peak (also the warm-up)
                        triangle.MATMUL_ROWS = max(r, 1)
                        target = z.clone()
                        with track_peak() as mem:
                            results[r] = tm.add_to_(target, z, mask)
                        peaks[r] = mem.peak
                    for _ in range(args.repeats):
                        for r in args.rows:
                            triangle.MATMUL_ROWS = max(r, 1)
                            target = z.clone()
                            start = time.perf_counter()
                            tm.add_to_(target, z, mask)
                            times[r].append(time.perf_counter() - start)
                first = args.rows[0]
                base = statistics.median(times[first])
                for r in args.rows:
                    rows = -(-max(r, 1) // args.chunk_size) * args.chunk_size
                    med = statistics.median(times[r])
                    diff = (results[r] - results[first]).abs().max().item()
                    print(
                        f"| {n} | {name} | {r} | {min(rows, n)} | {med:.4f} | {med / base:.2f} | "
                        f"{peaks[r] / 1e6:.2f} | {diff:.1e} |",
                        flush=True,
                    )
    finally:
        triangle.MATMUL_ROWS = original
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
