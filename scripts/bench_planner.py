"""CPU time of the memory planner: ``alphafold-mem memory-plan`` with an empty estimate cache (cold)
and again with the cache the first run filled (warm), and predict's pre-flight of one target in a
fresh process, first and second time.

Usage::

    python scripts/bench_planner.py [--cases 10000-all,30000-dap8,...] [--max-memory 80GiB]

Each command runs in a fresh interpreter; its CPU time is user + sys of that child process
(``resource.getrusage(RUSAGE_CHILDREN)`` before and after), its wall time the elapsed seconds. The
estimate cache (``ALPHAFOLD_MEM_PLAN_CACHE``, :mod:`alphafold_mem.planner.cache`) is a fresh
temporary folder for each case: the first run finds it empty, the second finds what the first
wrote. ``--device cuda`` is planned on any machine (nothing runs on a GPU; ``--max-memory`` stands
for the device's memory). The pre-flight rows time :func:`alphafold_mem.predict.preflight.check` alone
inside the child (``time.process_time`` around the call, after the imports) for model_1, the
``auto`` policy and this machine's free memory, as ``alphafold-mem predict`` calls it per target.

Columns: ``case``; ``command`` (the memory-plan options, ``--max-memory`` as in the heading
unless shown, or the pre-flight's sizes); ``cache`` (``cold``: empty; ``warm``: filled by the row above);
``CPU s`` (user + sys of the process, or of the pre-flight call); ``wall s`` (of the whole process);
``exit`` (memory-plan's exit status: 0 a policy fits, 1 none does).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: memory-plan cases: name -> options (``--max-memory`` added from the command line unless given here)
CASES = {
    "10000-all": ("--n-res", "10000", "--device", "cuda", "--all"),
    "10000": ("--n-res", "10000", "--device", "cuda"),
    "30000-dap8": ("--n-res", "30000", "--dap", "8", "--device", "cuda"),
    # a budget some candidates fit: the search walks the ladder (bisects the chunk sizes)
    "30000-dap8-131GiB": ("--n-res", "30000", "--dap", "8", "--device", "cuda", "--max-memory", "131GiB"),
    "30000": ("--n-res", "30000", "--device", "cuda"),
    "30000-cpu": ("--n-res", "30000", "--device", "cpu"),
    "30000-dap8-cpu": ("--n-res", "30000", "--dap", "8", "--device", "cpu"),
}

PREFLIGHT = """
import sys, time, torch
from alphafold_mem.config import model_config
from alphafold_mem.predict.preflight import check, feature_sizes
config = model_config("model_1")
sizes = feature_sizes(config, int(sys.argv[1]), int(sys.argv[2]))
start = time.process_time()
result = check(config, sizes, "auto", torch.device("cpu"))
print(f"{time.process_time() - start:.3f}", result.fits)
"""


def _child(argv: list[str], cache: str) -> tuple[float, float, int, str]:
    """(CPU s, wall s, exit status, stdout) of one child process."""
    env = {**os.environ, "ALPHAFOLD_MEM_PLAN_CACHE": cache, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return cpu, wall, proc.returncode, proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {','.join(CASES)}")
    ap.add_argument(
        "--max-memory", "--budget", dest="budget", default="80GiB", help="memory-plan's --max-memory (default 80GiB)"
    )
    ap.add_argument("--preflight-n-res", type=int, default=1000, help="the pre-flight target's length (default 1000)")
    ap.add_argument("--msa-depth", type=int, default=5000, help="the pre-flight target's MSA depth (default 5000)")
    args = ap.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    python = sys.executable
    print(f"# memory-plan --max-memory {args.budget}; preset model_1; each row a fresh process")
    print()
    print("| case | command | cache | CPU s | wall s | exit |")
    print("|---|---|---|---:|---:|---:|")
    for name in names:
        opts = [*CASES[name], *(() if "--max-memory" in CASES[name] else ("--max-memory", args.budget)), "--quiet"]
        with tempfile.TemporaryDirectory(prefix="plans-") as cache:
            for state in ("cold", "warm"):
                cpu, wall, code, _ = _child([python, "-m", "alphafold_mem.cli", "memory-plan", *opts], cache)
                shown = "memory-plan " + " ".join(CASES[name])
                print(f"| {name} | `{shown}` | {state} | {cpu:.1f} | {wall:.1f} | {code} |", flush=True)
    n, depth = args.preflight_n_res, args.msa_depth
    with tempfile.TemporaryDirectory(prefix="plans-") as cache:
        for state in ("cold", "warm"):
            _, wall, _, out = _child([python, "-c", PREFLIGHT, str(n), str(depth)], cache)
            cpu = float(out.split()[0])
            print(f"| pre-flight | `N_res {n}, MSA depth {depth}, auto, cpu` | {state} | {cpu:.2f} | {wall:.1f} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
