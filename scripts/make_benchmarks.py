"""Regenerate the benchmark pages of the documentation (``docs/benchmarks/*.md``) from the benchmark
scripts: ``make benchmarks`` (quick) or ``make benchmarks MODE=full``.

Usage::

    python scripts/make_benchmarks.py [--mode quick|full] [--pages memory,dap,...] [--out docs/benchmarks]

Each page runs its scripts (:data:`PAGES`) one after the other in fresh processes from the repository
root and writes what they print below a header: the command that made the page, the start and end
(UTC), the machine (CPU model and count, memory, load average, GPU) and the versions (alphafold_mem,
its git revision, Python, torch, triton, numpy). Each script's section gives its exact command, its
wall and CPU time and exit status; the script's Markdown tables are kept as they are, its other lines
(settings, progress) go in a text block. No number on these pages is typed by hand.

``quick`` runs small sizes (minutes on a 2-core CPU machine, what CI machines and laptops have);
``full`` runs each script's documented default sizes (hours on CPU; meant for a GPU machine or a
quiet night). ``docs/benchmarks/index.md`` lists the pages with the mode and date of each.

Exit status 0 when every script exited as expected, 1 otherwise (its page is still written, with the
exit status and the last lines of its error output).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN_TMP = '"$(mktemp -d)"'  # how a page shows the fresh temporary folder a run was given
OUT = ROOT / "docs" / "benchmarks"
MODES = ("quick", "full")


@dataclass(frozen=True)
class Run:
    """One script run of a page: ``args`` may hold ``{tmp}``, a fresh temporary folder."""

    title: str
    script: str
    args: tuple[str, ...] = ()
    ok: tuple[int, ...] = (0,)  # exit statuses that are results (e.g. 1 = "over the stated limit")
    note: str = ""


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    summary: str  # one line for the index
    about: str
    runs: dict[str, tuple[Run, ...]] = field(default_factory=dict)


PARITY_RUNS = (
    Run("Monomer reference vectors", "scripts/parity_report.py"),
    Run("AF2-Multimer reference vectors", "scripts/parity_report.py", ("--vectors", "tests/data/parity_multimer")),
)

PAGES: dict[str, Page] = {
    p.name: p
    for p in (
        Page(
            "memory",
            "Memory: measured and predicted peaks",
            "Peak memory per memory policy, measured two ways and predicted, for inference and a training step",
            "Activation peak of inference and of one training step per memory policy, measured by the storage "
            "counter and independently (peak RSS of a fresh process on CPU, the CUDA allocator on GPU), beside "
            "the planner's prediction, with time and deviation from the first policy "
            "(`scripts/bench_memory.py`; its docstring defines every column). The full run adds the planner's "
            "predicted peaks at AF2 sizes and the Triton kernels' effect on them (`scripts/kernel_memory.py`).",
            {
                "quick": (
                    Run(
                        "Inference and one training step per policy (small sizes)",
                        "scripts/bench_memory.py",
                        (
                            "--n-res",
                            "48",
                            "--n-seq",
                            "8",
                            "--n-extra",
                            "16",
                            "--evo-blocks",
                            "1",
                            "--extra-blocks",
                            "1",
                            "--repeats",
                            "1",
                        ),
                    ),
                ),
                "full": (
                    Run("Inference and one training step per policy", "scripts/bench_memory.py"),
                    Run(
                        "Predicted peaks at AF2 sizes (planner, nothing allocated)",
                        "scripts/bench_memory.py",
                        ("--predict",),
                    ),
                    Run("Predicted peaks with and without the Triton kernels", "scripts/kernel_memory.py"),
                ),
            },
        ),
        Page(
            "dap",
            "Dynamic axial parallelism",
            "Per-device peak, time and communication with the protein shared over P processes",
            "Per-device activation peak (measured and predicted), time and bytes communicated per block for "
            "P local processes sharing one protein (`scripts/bench_dap.py`; gloo on CPU, NCCL on CUDA).",
            {
                "quick": (
                    Run(
                        "P = 1, 2 (small sizes)",
                        "scripts/bench_dap.py",
                        (
                            "--n-res",
                            "32",
                            "--n-seq",
                            "8",
                            "--n-extra",
                            "16",
                            "--evo-blocks",
                            "1",
                            "--extra-blocks",
                            "1",
                            "--dap",
                            "1,2",
                        ),
                    ),
                ),
                "full": (Run("P = 1, 2, 4", "scripts/bench_dap.py"),),
            },
        ),
        Page(
            "data",
            "Training data path",
            "Chain index build, start-up and dataset samples per second",
            "Chain index build time per worker count, incremental rebuild, start-up from a built index and "
            "samples per second of the training dataset, on a synthetic OpenFold-layout tree made from the "
            "shipped files (`scripts/bench_data.py`).",
            {
                "quick": (
                    Run(
                        "Small tree",
                        "scripts/bench_data.py",
                        ("--chains", "40", "--repeats", "1", "--startup-chains", "400", "--workers", "1", "2"),
                    ),
                ),
                "full": (Run("2,000 chains", "scripts/bench_data.py"),),
            },
        ),
        Page(
            "training-step",
            "One training step",
            "One training step measured four ways beside the planner's prediction",
            "One real training step (forward, the AF2 loss on ground truth, backward) measured by the storage "
            "counter, glibc's bytes in use and the peak RSS of a fresh process, beside the planner's prediction "
            "(`scripts/bench_training_step.py`; its docstring defines every column).",
            {
                "quick": (
                    Run(
                        "Demo preset, training() policy",
                        "scripts/bench_training_step.py",
                        ("--configs", "demo", "--policies", "training", "--allocators", "default"),
                    ),
                ),
                "full": (Run("Demo preset and model_1 channels", "scripts/bench_training_step.py"),),
            },
        ),
        Page(
            "precision",
            "Precision: bf16 against fp32",
            "bf16 against fp32: training loss curves and prediction deviations",
            "Training loss curves in fp32 and bf16-mixed for the same seed and data (`scripts/compare_precision.py`), "
            "and the deviation of bf16 predictions from fp32 ones on the shipped examples with the demo weights "
            "(`scripts/compare_precision_inference.py`: exit status 1 means a target exceeded the script's "
            "stated limits, which the table shows).",
            {
                "quick": (
                    Run(
                        "Training, tiny preset, 6 steps",
                        "scripts/compare_precision.py",
                        ("--steps", "6", "--out", "{tmp}"),
                    ),
                    Run(
                        "Inference, shipped examples",
                        "scripts/compare_precision_inference.py",
                        ("--out", "{tmp}", "--threads", "1"),
                        ok=(0, 1),
                    ),
                ),
                "full": (
                    Run("Training, tiny preset, 60 steps", "scripts/compare_precision.py", ("--out", "{tmp}")),
                    Run(
                        "Inference, shipped examples",
                        "scripts/compare_precision_inference.py",
                        ("--out", "{tmp}"),
                        ok=(0, 1),
                    ),
                ),
            },
        ),
        Page(
            "planner",
            "Planner speed",
            "CPU time of memory-plan and of predict's pre-flight, with an empty and a filled estimate cache",
            "CPU time (user + sys of a fresh process) of `alphafold-mem memory-plan` at 10,000 and 30,000 "
            "residues, with and without DAP, for `--device cuda` and `cpu`, first with an empty estimate cache "
            "and again with the cache the first run filled, and of predict's pre-flight of one target, first and "
            "second time (`scripts/bench_planner.py`; its docstring defines every column).",
            {
                "quick": (Run("memory-plan and the pre-flight, cold and warm", "scripts/bench_planner.py"),),
                "full": (Run("memory-plan and the pre-flight, cold and warm", "scripts/bench_planner.py"),),
            },
        ),
        Page(
            "planner-accuracy",
            "Planner accuracy: complexes and single chains",
            "The planner's predicted peak against two measures of a fresh process, AF2-Multimer beside the monomer, "
            "inference and a training step",
            "Activation peak of the AF2-Multimer model (`model_1_multimer_v3` channels) and of the monomer model "
            "(`model_1`) at the same sizes: inference on two complexes (reference and low-memory policies) and one "
            "training step (forward, the config's loss on ground truth, backward) of a 640-residue 3-chain crop; the "
            "storage counter and the peak-RSS growth of a fresh process beside the planner's prediction "
            "(`memory-plan`'s, `--training` for the step), which traces the multimer model on the complex's chain "
            "features (`scripts/planner_accuracy_multimer.py`; its docstring defines every column); and "
            "`memory-plan`'s answer for the complex of clami66/AF_unmasked #6. Block counts are cut down (the full "
            "model's training step at 640 residues needs more memory than this machine has); the channel widths "
            "are the models'.",
            {
                "quick": (
                    Run(
                        "Multimer and monomer, two complexes, inference",
                        "scripts/planner_accuracy_multimer.py",
                        ("--rows", "inference"),
                    ),
                    Run(
                        "Multimer and monomer, a training step of a 640-residue 3-chain crop",
                        "scripts/planner_accuracy_multimer.py",
                        ("--rows", "training"),
                    ),
                    Run(
                        "The plan of a 4,539-residue 12-chain complex on a 24 GB card (clami66/AF_unmasked #6)",
                        "scripts/planner_accuracy_multimer.py",
                        ("--af-unmasked-6",),
                    ),
                ),
                "full": (
                    Run(
                        "The plan of a 4,539-residue 12-chain complex on a 24 GB card (clami66/AF_unmasked #6)",
                        "scripts/planner_accuracy_multimer.py",
                        ("--af-unmasked-6",),
                    ),
                    Run(
                        "Multimer and monomer, two complexes, inference, 2 + 2 + 2 blocks",
                        "scripts/planner_accuracy_multimer.py",
                        ("--rows", "inference", "--evo-blocks", "2", "--extra-blocks", "2", "--templ-blocks", "2"),
                    ),
                    Run(
                        "Multimer and monomer, a training step of a 640-residue 3-chain crop",
                        "scripts/planner_accuracy_multimer.py",
                        ("--rows", "training"),
                    ),
                ),
            },
        ),
        Page(
            "cli",
            "Command-line start-up",
            "CPU time of --version, --help, a rejected option and a missing input",
            "CPU time (user + sys) of `alphafold-mem --version`, `--help`, a subcommand's `--help`, a rejected option "
            "and a missing input, each in a fresh process (`scripts/bench_cli_startup.py`): none loads torch, so "
            "each stays within 1 s of CPU (tests/test_cli_startup.py checks the same bound).",
            {
                "quick": (Run("Start-up, 5 runs per command", "scripts/bench_cli_startup.py", ok=(0, 1)),),
                "full": (
                    Run(
                        "Start-up, 20 runs per command", "scripts/bench_cli_startup.py", ("--repeats", "20"), ok=(0, 1)
                    ),
                ),
            },
        ),
        Page(
            "parity",
            "Parity with OpenFold",
            "Largest difference per output from OpenFold's reference outputs",
            "Largest absolute difference per output between this model and OpenFold's reference outputs for the "
            "same AF2-format parameters and inputs, in fp32 and fp64 (`scripts/parity_report.py`, on the vectors "
            "in `tests/data/parity` (monomer, model_1_ptm layout) and `tests/data/parity_multimer` (AF2-Multimer, "
            "model_1_multimer_v3 layout, a 3-chain A2B complex)).",
            {
                "quick": PARITY_RUNS,
                "full": PARITY_RUNS,
            },
        ),
    )
}


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average (1/5/15 min) {one:.1f}/{five:.1f}/{fifteen:.1f}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_total() -> str:
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        return f"{kib / 2**20:.0f} GiB RAM"
    except (OSError, AttributeError):
        return "RAM unknown"


def gpu_line() -> str:
    """The CUDA devices torch sees, or ``none``."""
    import torch  # heavy: only once the page is being written

    if not torch.cuda.is_available():
        return "none (CPU run)"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{', '.join(names)} (CUDA {torch.version.cuda})"


def machine() -> dict[str, str]:
    return {
        "platform": platform.platform(),
        "cpu": f"{cpu_model()}, {os.cpu_count()} CPUs, {memory_total()}",
        "gpu": gpu_line(),
        "versions": ", ".join(
            [
                f"alphafold_mem {_version('alphafold_mem')} (git {git_revision()})",
                f"python {platform.python_version()}",
                f"torch {_version('torch')}",
                f"triton {_version('triton')}",
                f"numpy {_version('numpy')}",
            ]
        ),
    }


def markdown_output(text: str) -> list[str]:
    """A script's output as Markdown: its tables (lines starting with ``|``) as they are, every other
    run of non-blank lines in a ``text`` block."""
    lines, block = [], []

    def flush() -> None:
        if block:
            lines.extend(["```text", *block, "```", ""])
            block.clear()

    in_table = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("|"):
            flush()
            in_table = True
            lines.append(line)
            continue
        if in_table:
            lines.append("")
            in_table = False
        if line:
            block.append(line)
        else:
            flush()
    flush()
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_script(run: Run, python: str) -> dict:
    """Run one script from the repository root; its output, times and exit status."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        args = [a.replace("{tmp}", tmp) for a in run.args]
        shown = " ".join(["python", run.script, *(SHOWN_TMP if a == "{tmp}" else shlex.quote(a) for a in run.args)])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        print(f"[make_benchmarks] {shown}", file=sys.stderr, flush=True)
        proc = subprocess.run([python, run.script, *args], cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "command": shown,
        "stdout": proc.stdout.replace(tmp, "TMP"),
        "stderr": proc.stderr.replace(tmp, "TMP"),
        "returncode": proc.returncode,
        "ok": proc.returncode in run.ok,
        "wall": wall,
        "cpu": cpu,
    }


def write_page(page: Page, mode: str, command: str, python: str, out: Path) -> bool:
    """Run the page's scripts and write ``out/<name>.md``; whether every script exited as expected."""
    start, load_start = utc_now(), load_line()
    results = [(run, run_script(run, python)) for run in page.runs[mode]]
    end, load_end = utc_now(), load_line()
    info = machine()
    lines = [
        f"# {page.title}",
        "",
        f"Generated by `{command}` (mode `{mode}`); do not edit: rerun the command.",
        "",
        f"- Run: {start} – {end} (UTC); at start {load_start}, at end {load_end}",
        f"- Machine: {info['platform']}; {info['cpu']}",
        f"- GPU: {info['gpu']}",
        f"- Versions: {info['versions']}",
        "",
        page.about,
        "",
    ]
    for run, res in results:
        status = f"exit status {res['returncode']}" + ("" if res["ok"] else " (FAILED)")
        lines += [
            f"## {run.title}",
            "",
            f"`{res['command']}`: {res['wall']:.0f} s wall, {res['cpu']:.0f} s CPU (user + sys), {status}.",
            "",
        ]
        if run.note:
            lines += [run.note, ""]
        lines += markdown_output(res["stdout"]) or ["(no output)"]
        lines.append("")
        if not res["ok"]:
            tail = res["stderr"].strip().splitlines()[-20:]
            lines += ["Last lines of its error output:", "", "```text", *tail, "```", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{page.name}.md").write_text("\n".join(lines).rstrip() + "\n")
    return all(res["ok"] for _, res in results)


RUN_LINE = re.compile(r"^Generated by `(?P<command>[^`]*)` \(mode `(?P<mode>\w+)`\).*\n\n- Run: (?P<run>[^;]*);", re.M)


def write_index(out: Path) -> None:
    """``out/index.md``: every page, with the mode and time of the run that wrote it (read from its header)."""
    lines = [
        "# Benchmarks",
        "",
        "Every page here is written by `make benchmarks` (quick sizes, minutes on a CPU) or "
        "`make benchmarks MODE=full` (each script's documented sizes; hours on a CPU), which run the "
        "benchmark scripts and copy their tables (`scripts/make_benchmarks.py`). Each page opens with the "
        "command, date, machine and versions of its run. `make benchmarks PAGES=memory,dap` rewrites some.",
        "",
        "| page | what it measures | last run |",
        "|---|---|---|",
    ]
    for page in PAGES.values():
        path = out / f"{page.name}.md"
        found = RUN_LINE.search(path.read_text()) if path.exists() else None
        when = f"{found['run']}, mode `{found['mode']}`" if found else "not generated yet"
        link = f"[{page.title}]({page.name}.md)" if path.exists() else page.title
        lines.append(f"| {link} | {page.summary} | {when} |")
    lines += [
        "",
        "The [ablation report](../ablation/report.md) is generated the same way by `alphafold-mem ablate`, and "
        "the [memory budget](../memory-budget.md) page by `scripts/memory_budget_page.py`. The "
        "[multimer training curve](multimer-training.md) is written by `scripts/train_multimer_curve.py`.",
    ]
    (out / "index.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=MODES, default="quick")
    ap.add_argument("--pages", default="", help=f"comma-separated, default all: {','.join(PAGES)}")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the pages (default: docs/benchmarks)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the scripts")
    args = ap.parse_args(argv)
    names = [n for n in args.pages.split(",") if n] or list(PAGES)
    unknown = [n for n in names if n not in PAGES]
    if unknown:
        ap.error(f"unknown page(s) {', '.join(unknown)}; known: {', '.join(PAGES)}")
    command = "make benchmarks" + (f" MODE={args.mode}" if args.mode != "quick" else "")
    if args.pages:
        command += f" PAGES={args.pages}"
    failed = []
    for name in names:
        if not write_page(PAGES[name], args.mode, command, args.python, args.out):
            failed.append(name)
        print(f"[make_benchmarks] wrote {args.out / (name + '.md')}", file=sys.stderr, flush=True)
    write_index(args.out)
    if failed:
        print(f"[make_benchmarks] failed: {', '.join(failed)} (see the pages)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
