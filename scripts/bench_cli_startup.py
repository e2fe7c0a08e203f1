"""CPU time of the command line's first second: ``--version``, ``--help``, a subcommand's ``--help``, a
rejected option and a missing input, each in a fresh ``python -m alphafold_mem.cli`` process (CPU =
user + sys of the child, from ``getrusage(RUSAGE_CHILDREN)``; the median of ``--repeats`` runs).

    python scripts/bench_cli_startup.py [--repeats 5] [--bound 1.0]

Prints one Markdown table; exit status 1 when a command's median is over ``--bound`` CPU seconds
(issue 45: none of these may load torch), else 0. tests/test_cli_startup.py checks the same bound.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = (
    ("--version",),
    ("--help",),
    ("predict", "--help"),
    ("train", "--help"),
    ("memory-plan", "--n-res", "-5"),
    ("memory-plan", "--n-res", "0"),
    ("predict", "missing.fasta", "--out", "out"),
)


def measure(argv: tuple[str, ...], cwd: str) -> tuple[int, float, float]:
    """``(exit status, CPU seconds, wall seconds)`` of one child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "alphafold_mem.cli", *argv], capture_output=True, cwd=cwd, env=env)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc.returncode, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per command (default: 5)")
    ap.add_argument("--bound", type=float, default=1.0, help="CPU seconds a command may cost (default: 1.0)")
    args = ap.parse_args(argv)
    head = f"CPU s (median of {args.repeats})"
    print(f"| `alphafold-mem` command | exit status | {head} | wall s (median) | within {args.bound:g} s |")
    print("|---|---|---|---|---|")
    over = 0
    with tempfile.TemporaryDirectory() as cwd:
        for command in COMMANDS:
            runs = [measure(command, cwd) for _ in range(args.repeats)]
            cpu = statistics.median(r[1] for r in runs)
            wall = statistics.median(r[2] for r in runs)
            over += cpu > args.bound
            status = ", ".join(str(s) for s in sorted({r[0] for r in runs}))
            within = "yes" if cpu <= args.bound else "no"
            print(f"| `{' '.join(command)}` | {status} | {cpu:.2f} | {wall:.2f} | {within} |")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
