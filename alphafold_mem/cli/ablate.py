"""``alphafold-mem ablate``: accuracy-vs-memory ablations of every memory technique in one command
(:func:`alphafold_mem.ablation.run_ablation`).

Examples::

    alphafold-mem ablate --out out/ablation --quick
    alphafold-mem ablate --out out/ablation
    alphafold-mem ablate --out out/ab --techniques chunk_size=16 precision=bf16 --chains data/fasta/per_entry/1lcd.fasta
    alphafold-mem ablate --list-techniques

OpenFold side-by-side rows come from ``scripts/compare_openfold.py --ablation-out DIR`` (a benchmark of
another system, outside the installed package).

Exit status 0 when the grid finished (rows that cannot run here are rows with a reason, not errors),
1 when a row failed, 2 for bad options or inputs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from .options import non_negative_int, positive_float, positive_int


def run(args: argparse.Namespace) -> int:
    # deferred: the ablation package loads for `ablate` only, not for every command
    from ..ablation import AblationConfig, derive_techniques, run_ablation
    from ..ablation.results import read_rows

    if args.list_techniques:
        for t in derive_techniques({"chunk_size": tuple(args.chunk_sizes)}):
            why = t.skip_reason("inference", args.device)
            print(f"{t.name:48s} {t.description}" + (f"  [not here: {why}]" if why else ""))
        return 0
    if args.out is None:
        print("ablate: --out DIR is required", file=sys.stderr)
        return 2
    config = AblationConfig(
        out=args.out,
        quick=args.quick,
        chains=args.chains,
        max_chains=args.max_chains,
        weights=args.weights,
        techniques=args.techniques,
        chunk_sizes=tuple(args.chunk_sizes),
        n_res=args.n_res,
        predict_n_res=args.predict_n_res,
        training_steps=args.training_steps,
        train_data=args.train_data,
        device=args.device,
        repeats=args.repeats,
        threads=args.threads,
        seed=args.seed,
        sections=tuple(args.sections),
        scaling_preset=args.scaling_preset,
        scaling_n_seq=args.scaling_n_seq,
        scaling_n_extra=args.scaling_n_extra,
        planner_timeout=args.planner_timeout,
        command="alphafold-mem " + " ".join(shlex.quote(a) for a in getattr(args, "argv", [])),
    )
    start = time.perf_counter()
    try:
        report = run_ablation(config)
    except (ValueError, OSError) as exc:
        print(f"ablate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"ablate: interrupted; the finished rows are in {args.out} (report.md written from them); "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    failed = [r for r in read_rows(args.out) if r["status"] == "failed"]
    minutes, seconds = divmod(round(time.perf_counter() - start), 60)
    print(f"report: {report} (this run: {minutes} min {seconds} s wall)")
    if failed:
        print(f"{len(failed)} row(s) failed; see the reason column of {args.out}/results.csv", file=sys.stderr)
    return 1 if failed else 0


#: The ablation runner's sections (:data:`alphafold_mem.ablation.runner.SECTIONS`, checked equal by
#: tests/test_planner_cuts.py): named here so that building the parser does not import the ablation
#: package (it loads Lightning: seconds of CPU for every command, memory-plan's included).
SECTIONS = ("inference", "training", "scaling")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``ablate`` subcommand."""
    p = sub.add_parser(
        "ablate",
        help="accuracy-vs-memory ablation of every memory technique (tables, plots, report.md)",
        description="Run every memory technique (MemoryPolicy fields and presets, precision, kernels, DAP) on "
        "real chains, a few training steps, and a length sweep; write results.csv/json, PNG plots "
        "and report.md. A re-run with the same --out resumes (finished rows are skipped).",
        epilog="Rows that cannot run here (e.g. Triton on CPU, offload on a CPU device) are rows with the reason. "
        "Exit status 0: finished; 1: some row failed (reason in results.csv); 2: bad options or inputs.",
    )
    p.add_argument("--out", help="output directory (results.csv, results.json, report.md, *.png)")
    p.add_argument("--quick", action="store_true", help="the small grid (2 chains, presets only, 2 training steps)")
    p.add_argument(
        "--chains",
        nargs="+",
        metavar="DIR_OR_FASTA",
        help="FASTA/.a3m files or directories (default: data/fasta/per_entry with data/alignments, data/mmcif)",
    )
    p.add_argument("--max-chains", type=positive_int, help="keep the N shortest chains")
    p.add_argument("--weights", help="weights file (default: data/demo_weights/demo.ckpt)")
    p.add_argument(
        "--techniques",
        nargs="+",
        metavar="NAME",
        help="technique names (see --list-techniques); the reference always runs",
    )
    p.add_argument("--list-techniques", action="store_true", help="print the derived techniques and exit")
    p.add_argument("--chunk-sizes", type=positive_int, nargs="+", default=[64, 16, 4], help="chunk sizes to sweep")
    p.add_argument("--n-res", type=positive_int, nargs="+", help="scaling: N_res values measured (default 64 128 256)")
    p.add_argument(
        "--predict-n-res",
        type=positive_int,
        nargs="+",
        help="scaling: N_res values only predicted (default 1024 4096 10240)",
    )
    p.add_argument(
        "--training-steps", type=non_negative_int, help="fine-tuning steps per technique (default 6; 0: no training)"
    )
    p.add_argument("--train-data", help="training data directory (default: data/)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--repeats", type=positive_int, help="interleaved timing repeats (default 3)")
    p.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads (default 1: stable timings on shared cores)"
    )
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    p.add_argument("--scaling-preset", default="model_1", help="model config of the scaling sweep")
    p.add_argument("--scaling-n-seq", type=positive_int, default=128)
    p.add_argument("--scaling-n-extra", type=positive_int, default=1024)
    p.add_argument(
        "--planner-timeout",
        type=positive_float,
        default=60.0,
        help="CPU seconds one planner prediction may take (default 60; a slower one is a row with the reason)",
    )
    p.set_defaults(func=run)


__all__ = ["register", "run"]
