"""Side by side with OpenFold: time and memory of the same forward (or training step), same inputs,
same measure, each run in a fresh process; also each side's minor page faults (pages first touched
after the allocator took them from the system), which explain most time differences on CPU. A command
line over :mod:`benchmarks.openfold` (measurement code outside the installed package); each cell runs
the one worker ``benchmarks/standalone/openfold_worker.py`` (with ``standalone/rss.py``, loadable by
file path by OpenFold's Python).

OpenFold is imported from a checkout the user names (``--openfold-src``; nothing of it is copied
here). It is not pip-installable and its CUDA extension cannot be built on a CPU machine; its one
compiled import on the CPU path, ``attn_core_inplace_cuda`` (an in-place softmax), gets a
pure-PyTorch stand-in written to a temporary directory at run time. OpenFold needs ``ml_collections``
and ``dm-tree``: give a Python that has them with ``--openfold-python`` (e.g. a venv with
``pip install torch==2.13.0 numpy ml-collections dm-tree biopython scipy modelcif``).

Measure, the same for both sides: one forward (inference: ``eval()`` + ``no_grad``; training:
``train()``, forward + backward of a proxy loss) in a fresh subprocess with 1 torch thread, after
one warm-up call at a small size; ``seconds`` is its wall time, ``cpu_s`` the process's CPU time
(user + system) during it; ``rss_mb`` is the growth of the
process's resident set during it (``/proc/self/clear_refs`` reset to the current RSS, then
``VmHWM`` minus ``VmRSS`` before), in MB (10^6 bytes). For our side ``counter_mb`` is the storage
counter of :func:`alphafold_mem.memory.track_peak` in a second run (a different mechanism: tensor
storages created by torch ops, no allocator caching). ``--allocator mmap`` runs both sides with
``MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0`` (glibc returns freed large blocks at
once); ``default`` leaves the environment as it is: glibc's dynamic threshold, which keeps freed
blocks in the heap, for OpenFold, while our side applies its own default as ``alphafold-mem
train``/``predict`` do (``--malloc trim``: :func:`alphafold_mem.memory.host.start_malloc_trim`, a
thread handing free pages back once a second); ``release`` is ``default`` with our side on
``--malloc release`` (the 64 KiB threshold set by ``mallopt`` from inside the process); ``glibc`` is
``default`` with ours opting out (``ALPHAFOLD_MEM_MALLOC=default``), plain glibc on both sides. Our
side's ``malloc`` column says which applied.

``--repeats R`` runs each side R times per cell, interleaved (ours, OpenFold, ours, ...): the table
gives the medians and, in its last column, each pair's time ratio (ours run i over OpenFold run i),
so the spread of single runs stands beside the median; the ``--json`` file keeps every run.

Settings: ``unchunked`` (OpenFold ``globals.chunk_size=None``; ours ``MemoryPolicy(inplace=True)``:
OpenFold's no-grad forward updates in place, ours then too), ``chunk4`` (chunk size 4 on both sides,
in place; OpenFold's chunk-size tuning off), ``low_memory`` (OpenFold ``globals.use_lma=True``; ours
``MemoryPolicy.low_memory_inference()``); in training both sides checkpoint every block (OpenFold
``globals.blocks_per_ckpt=1``; ours ``MemoryPolicy.training()`` and ``.reference(checkpoint_*=1)``
for ``unchunked``).

``--against-itself SIDE`` runs, instead, one side against itself: ``--repeats`` pairs of fresh runs
back to back, each pair's time and RSS ratio, and how many pairs were above 1.0: how far one run of
the same program moves on this machine, the floor under any one-run verdict.

``--same-process K`` runs, instead, both models in one process per cell (OpenFold's Python, our
package on its path), timed alternately K times with the order swapped every round: both then see
the same machine at nearly the same moment, so the time ratio (the median of the per-round ratios)
is steadier than across fresh processes on a machine whose speed drifts. Time only (one process has
one resident set), plain glibc for both.

``--ablation-out DIR`` adds, instead, the OpenFold section to an ``alphafold-mem ablate`` result
directory: both sides, every ``--settings`` value and ``--n-res``, allocator ``mmap``, one fresh
process per cell (:func:`benchmarks.openfold.run_openfold`); rows ``openfold:<setting>`` and
``ours:<setting>`` in its ``results.csv``/``results.json`` (cells already there are kept), then its
``report.md`` is rewritten with the section "OpenFold side by side".

Example (model_1_ptm, 48 + 4 blocks, N_seq 16, N_extra 64, 2 templates; several minutes per row)::

    python scripts/compare_openfold.py --openfold-src ../openfold --openfold-python ../of_venv/bin/python \\
        --n-res 64 128 --settings unchunked chunk4 low_memory --allocator default mmap
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.openfold import (  # noqa: E402
    ALLOCATORS,
    SETTINGS,
    TRAINING_SETTINGS,
    OpenFoldSetup,
    median_cell,
    openfold_workspace,
    run_cell,
    run_openfold,
    run_ratios,
)


def _in_mb(result: dict) -> dict:
    """A worker's result with bytes turned into MB (10^6 bytes): ``seconds``, ``cpu_s``, ``rss_mb``
    and, for our side, ``counter_mb``."""
    names = {"rss_bytes": "rss_mb", "counter_bytes": "counter_mb"}
    return {names.get(k, k): (v / 1e6 if k in names else v) for k, v in result.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--openfold-src", help="an OpenFold checkout (the directory holding openfold/)")
    ap.add_argument("--openfold-python", default=sys.executable, help="a Python with OpenFold's dependencies")
    ap.add_argument("--preset", default="model_1_ptm")
    ap.add_argument("--n-res", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--n-extra", type=int, default=64)
    ap.add_argument("--templates", type=int, default=2)
    ap.add_argument("--evo-blocks", type=int, default=48)
    ap.add_argument("--extra-blocks", type=int, default=4)
    ap.add_argument(
        "--settings",
        nargs="+",
        default=list(SETTINGS),
        choices=TRAINING_SETTINGS,
        help="nested: training only (ours checkpoint_granularity='nested' beside OpenFold's low_memory)",
    )
    ap.add_argument("--allocator", nargs="+", default=["default", "mmap"], choices=list(ALLOCATORS))
    ap.add_argument("--mode", default="inference", choices=["inference", "training"])
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="fresh processes per side and cell, the two sides interleaved (median reported)",
    )
    ap.add_argument(
        "--same-process",
        type=int,
        default=0,
        metavar="K",
        help="instead: both models in one process per cell, timed alternately K times (time only; "
        "both see the same machine, so the ratio is steadier than across fresh processes)",
    )
    ap.add_argument(
        "--against-itself",
        choices=["openfold", "ours"],
        help="instead: one side against itself, two fresh runs per repeat back to back (A, B, A, B, ...): "
        "the ratios one run of the same program moves by on this machine (the floor under any "
        "one-run comparison)",
    )
    ap.add_argument(
        "--ablation-out",
        metavar="DIR",
        help="instead: add the OpenFold rows (allocator mmap) to this `alphafold-mem ablate` result directory "
        "and rewrite its report.md",
    )
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)

    setup = OpenFoldSetup(
        openfold_src=args.openfold_src,
        openfold_python=args.openfold_python,
        preset=args.preset,
        n_seq=args.n_seq,
        n_extra=args.n_extra,
        templates=args.templates,
        evo_blocks=args.evo_blocks,
        extra_blocks=args.extra_blocks,
        mode=args.mode,
        threads=1,
        timeout=args.timeout,
    )
    if args.ablation_out:
        if not args.openfold_src:
            ap.error("--ablation-out needs --openfold-src")
        return _into_ablation(setup, args)
    if args.same_process:
        if not args.openfold_src:
            ap.error("--same-process needs --openfold-src")
        return _same_process(setup, args)
    if args.against_itself:
        if args.against_itself == "openfold" and not args.openfold_src:
            ap.error("--against-itself openfold needs --openfold-src")
        return _against_itself(setup, args)
    sides = ["ours"] + (["openfold"] if args.openfold_src else [])
    if not args.openfold_src:
        print("# no --openfold-src: our side only", file=sys.stderr)
    rows = []
    print(
        _config_line(
            args,
            f"fresh process per run, median of {args.repeats} (the sides interleaved; the last column: "
            "each interleaved pair's time ratio)",
        )
    )
    print(
        "| N_res | allocator | setting | OpenFold s | ours s | OpenFold CPU s | ours CPU s | OpenFold RSS MB "
        "| ours RSS MB | ours counter MB | ours/OpenFold s | ours/OpenFold CPU s | ours/OpenFold RSS | OpenFold "
        "page faults M "
        "| ours page faults M | ours malloc | ours/OpenFold s per run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with openfold_workspace(setup) as tmp:
        for n_res, allocator, setting in _cells(args):
            cell = {"n_res": n_res, "allocator": allocator, "setting": setting}
            runs = {side: [] for side in sides}
            for _ in range(args.repeats):  # interleaved: ours, OpenFold, ours, ... (the machine's drift hits both)
                for side in sides:
                    runs[side].append(run_cell(setup, side, n_res, setting, allocator, tmp))
            for side in sides:
                cell[side] = _in_mb(median_cell(runs[side]))
            cell["runs"] = runs  # every run of each side, for the JSON
            if "openfold" in runs:
                cell["seconds_ratio_per_run"] = run_ratios(runs["ours"], runs["openfold"])
            rows.append(cell)
            print(_row(cell), flush=True)
    if args.json:
        _write_json(args.json, rows)
    return 0


def _write_json(path: str, rows: list) -> None:
    from alphafold_mem.io import atomic_write

    with atomic_write(path) as tmp:
        pathlib.Path(tmp).write_text(json.dumps(rows, indent=1))


def _config_line(args, what: str) -> str:
    """The table's first line: model, sizes, mode, and how it was measured (``what``)."""
    return (
        f"# {args.preset}: {args.evo_blocks} Evoformer + {args.extra_blocks} extra-MSA blocks, N_seq {args.n_seq}, "
        f"N_extra {args.n_extra}, N_templ {args.templates}, {args.mode}, 1 thread, {what}"
    )


def _print_head(args, what: str, columns: list) -> None:
    """The configuration line, then a Markdown table's header."""
    print(_config_line(args, what))
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def _cells(args):
    """(N_res, allocator, setting) of every cell, in the table's order."""
    return itertools.product(args.n_res, args.allocator, args.settings)


def _into_ablation(setup: OpenFoldSetup, args) -> int:
    """The OpenFold section of the ablation result directory ``args.ablation_out``, then its report."""
    from alphafold_mem.ablation.report import load_run_info, write_report
    from alphafold_mem.ablation.results import ResultStore

    out = pathlib.Path(args.ablation_out)
    store = ResultStore(out)
    run_openfold(setup, store, args.n_res, args.settings, tick=lambda label: print(label, file=sys.stderr, flush=True))
    print(f"report: {write_report(out, store.rows, load_run_info(out))}")
    return 1 if any(r["section"] == "openfold" and r["status"] == "failed" for r in store.rows) else 0


def _same_process(setup: OpenFoldSetup, args) -> int:
    """Both models in one process per cell, timed alternately: medians and the median of the
    per-round ratios."""
    import statistics

    _print_head(
        args,
        f"both models in one process per cell, {args.same_process} alternations (order swapped each "
        "round), wall seconds",
        [
            "N_res",
            "allocator",
            "setting",
            "OpenFold s (median)",
            "ours s (median)",
            "ours/OpenFold (median of rounds)",
            "ours/OpenFold per round",
        ],
    )
    rows, failed = [], 0
    with openfold_workspace(setup) as tmp:
        for n_res, allocator, setting in _cells(args):
            res = run_cell(setup, "both", n_res, setting, allocator, tmp, alternations=args.same_process)
            cell = {"n_res": n_res, "allocator": allocator, "setting": setting, **res}
            rows.append(cell)
            if "error" in res:
                failed += 1
                print(f"| {n_res} | {allocator} | {setting} | error: {res['error'][:80]} | | | |", flush=True)
                continue
            of, ours = res["openfold_seconds"], res["ours_seconds"]
            ratios = [o / f for o, f in zip(ours, of)]
            print(
                f"| {n_res} | {allocator} | {setting} | {statistics.median(of):.1f} | {statistics.median(ours):.1f} "
                f"| {statistics.median(ratios):.3f} | {', '.join(f'{r:.3f}' for r in ratios)} |",
                flush=True,
            )
    if args.json:
        _write_json(args.json, rows)
    return 1 if failed else 0


def _against_itself(setup: OpenFoldSetup, args) -> int:
    """One side against itself: per cell, ``--repeats`` pairs of fresh runs back to back (A, B, A, B,
    ...); the table gives each pair's time and RSS ratio (A over B) and how many pairs were above 1.0,
    i.e. how often one run of a program fails "<= 1.0x" against the same program."""
    side = args.against_itself
    _print_head(
        args,
        f"{side} against itself: {args.repeats} pairs of fresh runs back to back (A, B, A, B, ...)",
        [
            "N_res",
            "allocator",
            "setting",
            "side",
            "A s (median)",
            "B s (median)",
            "A/B s per pair",
            "pairs with A/B s > 1.0",
            "A/B RSS per pair",
        ],
    )
    rows, failed = [], 0
    with openfold_workspace(setup) as tmp:
        for n_res, allocator, setting in _cells(args):
            runs = {"a": [], "b": []}
            for _ in range(args.repeats):
                for run in ("a", "b"):
                    runs[run].append(run_cell(setup, side, n_res, setting, allocator, tmp))
            seconds = run_ratios(runs["a"], runs["b"])
            rss = run_ratios(runs["a"], runs["b"], key="rss_bytes")
            cell = {
                "n_res": n_res,
                "allocator": allocator,
                "setting": setting,
                "side": side,
                "runs": runs,
                "seconds_ratio_per_run": seconds,
                "rss_ratio_per_run": rss,
            }
            rows.append(cell)
            a, b = median_cell(runs["a"]), median_cell(runs["b"])
            if "error" in a or "error" in b:
                failed += 1
                print(
                    f"| {n_res} | {allocator} | {setting} | {side} | error: {(a.get('error') or b['error'])[:80]} "
                    "| | | | |",
                    flush=True,
                )
                continue
            print(
                f"| {n_res} | {allocator} | {setting} | {side} | {a['seconds']:.1f} | {b['seconds']:.1f} "
                f"| {', '.join(f'{r:.2f}' for r in seconds)} | {sum(r > 1.0 for r in seconds)} of {len(seconds)} "
                f"| {', '.join(f'{r:.2f}' for r in rss)} |",
                flush=True,
            )
    if args.json:
        _write_json(args.json, rows)
    return 1 if failed else 0


def _row(cell: dict) -> str:
    of, ours = cell.get("openfold", {}), cell.get("ours", {})

    def f(d, k, spec=".1f"):
        if "error" in d:
            return f"error: {d['error'][:60]}"
        return format(d[k], spec) if k in d else "—"

    def faults(d):
        return f"{d['minor_faults'] / 1e6:.2f}" if "minor_faults" in d else "—"

    def ratio(k):
        return f"{ours[k] / of[k]:.2f}" if k in of and k in ours and of[k] > 0 else "—"

    return (
        f"| {cell['n_res']} | {cell['allocator']} | {cell['setting']} | {f(of, 'seconds')} | {f(ours, 'seconds')} "
        f"| {f(of, 'cpu_s')} | {f(ours, 'cpu_s')} | {f(of, 'rss_mb', '.0f')} | {f(ours, 'rss_mb', '.0f')} "
        f"| {f(ours, 'counter_mb', '.0f')} | {ratio('seconds')} | {ratio('cpu_s')} | {ratio('rss_mb')} "
        f"| {faults(of)} | {faults(ours)} | {ours.get('malloc', '—').split(':')[0]} "
        f"| {', '.join(f'{r:.2f}' for r in cell.get('seconds_ratio_per_run', [])) or '—'} |"
    )


if __name__ == "__main__":
    sys.exit(main())
