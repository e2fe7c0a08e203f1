"""What a CPU process keeps outside tensor storages after its first step at a size: the host library
caches of :data:`alphafold_mem.planner.margins.HOST_LIBRARY_BYTES` (oneDNN's primitive cache and JIT
kernels, PyTorch's caches).

One fresh process per row (glibc's mmap setting, one thread), model_1 channels, 1 Evoformer + 1
extra-MSA block, ``low_memory_inference()``, no templates, no recycling, N_seq 128, N_extra 1024: a
warm-up step at N_res 16, then two steps at N_res; per step the peak resident-set growth
(``/proc/self/clear_refs`` and VmHWM) and the resident set left after it (outputs dropped)::

    .venv/bin/python scripts/host_caches.py --n-res 128 256 512 --precisions bf16-full fp32

Columns: ``first step`` / ``second step``: peak RSS growth of each step (MiB); ``left after first``:
what the first step left resident (the caches it created); ``first - second``: the part of them that
the first step's peak held. The planner's margin must cover ``left after first`` (the caches may all
exist by the time of the peak).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
MiB = 2**20


def _bench_memory():
    spec = importlib.util.spec_from_file_location("bench_memory", HERE / "bench_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker(n_res: int, precision: str, n_seq: int, n_extra: int) -> dict:
    """Two steps at ``n_res`` after a warm-up at 16 in this process: bytes of each step's peak RSS
    growth and of the resident set each left."""
    import torch

    bm = _bench_memory()
    from alphafold_mem import bind
    from alphafold_mem.memory.host import resident_bytes, rss_growth

    torch.set_num_threads(1)
    args = argparse.Namespace(
        preset="model_1", evo_blocks=1, extra_blocks=1, templates=0, recycles=0, device="cpu",
        n_res=n_res, n_seq=n_seq, n_extra=n_extra,
    )  # fmt: skip
    cfg, _, model, batch = bm._build(args)
    policy = dict(bm._policies("inference", ["low_memory_inference"], precision))["low_memory_inference"]
    bind(model, policy)
    small = bm.random_features(cfg, 16, 4, 8, n_templ=0)
    small.update(bm.ground_truth_batch(cfg, 16, 4))
    bm._step(model, small, False)
    peaks, left = [], []
    for _ in range(2):
        gc.collect()
        with rss_growth() as grown:
            out = bm._step(model, batch, False)
        del out
        gc.collect()
        peaks.append(grown.bytes)
        left.append(resident_bytes() - grown.start)
    return {"peaks": peaks, "left": left}


def measure(n_res: int, precision: str, n_seq: int = 128, n_extra: int = 1024) -> dict:
    """:func:`_worker` in a fresh process with glibc's mmap setting and one thread."""
    root = str(HERE.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.standalone.rss import MMAP_ENV

    env = {**os.environ, **MMAP_ENV, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, __file__, "--worker", str(n_res), precision, str(n_seq), str(n_extra)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"host_caches worker N_res {n_res} {precision} failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(sizes: list[int], precisions: list[str], n_seq: int = 128, n_extra: int = 1024) -> list[str]:
    """Markdown rows, one fresh process each (module docstring)."""
    from alphafold_mem.planner.margins import HOST_LIBRARY_BYTES

    lines = [
        "| precision | N_res | first step MiB | second step MiB | first - second MiB | left after first MiB "
        "| margin MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for precision in precisions:
        for n in sizes:
            r = measure(n, precision, n_seq, n_extra)
            (p1, p2), left = r["peaks"], r["left"][0]
            lines.append(
                f"| {precision} | {n} | {p1 / MiB:.1f} | {p2 / MiB:.1f} | {(p1 - p2) / MiB:.1f} | {left / MiB:.1f} "
                f"| {HOST_LIBRARY_BYTES / MiB:.0f} |"
            )
            print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        n, precision, n_seq, n_extra = int(argv[1]), argv[2], int(argv[3]), int(argv[4])
        sys.path.insert(0, str(HERE.parent))
        print(json.dumps(_worker(n, precision, n_seq, n_extra)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-res", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--precisions", nargs="+", default=["bf16-full", "fp32"])
    ap.add_argument("--n-seq", type=int, default=128)
    ap.add_argument("--n-extra", type=int, default=1024)
    args = ap.parse_args(argv)
    table(args.n_res, args.precisions, args.n_seq, args.n_extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
