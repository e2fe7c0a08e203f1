"""``alphafold-mem predict``: FASTA (or a3m) in, structures with confidence out.

Examples::

    alphafold-mem predict data/fasta/per_entry/1lcd.fasta \\
        --msa data/alignments/1lcd_A/jackhmmer_pool.a3m --out out/
    alphafold-mem predict data/fasta/per_entry/ --msa-dir data/alignments --out out/
    alphafold-mem predict query.a3m --weights params_model_1_ptm.npz --out out/
    alphafold-mem predict X.fasta --msa-dir msas/ --weights-dir params/ --models 1,2,3,4,5 --num-seeds 2 \\
        --out out/
    alphafold-mem predict X.fasta --db uniref90.fasta --template-db pdb_seqres.txt --mmcif-dir mmcif/ \
        --relax --out out/

Every run writes one layout (AF2's, :mod:`alphafold_mem.predict.layout`): ``out/<id>/ranked_0.pdb`` (the
best prediction), ``ranking_debug.json`` and the files of each prediction (``<model>_seed_<s>.*``).

Exit status: 0 when every target succeeded or was skipped, 1 when any input was rejected or any
target failed, 2 for a problem with the run as a whole (options, weights, no input, ``--out`` in use
by another run or not writable), 130 / 143 when ended by SIGINT / SIGTERM (an ``interrupted`` line;
the targets finished before it are complete, the one running has no files under its final names).

One run holds ``--out`` (:mod:`alphafold_mem.predict.lock`): a second run on it fails in one line
naming the holder's PID. Signals are handled here, around the whole run
(:mod:`alphafold_mem.predict.signals`); under ``--dap`` the launcher holds the lock and the ranks
end with it (:mod:`alphafold_mem.cli.dap_launch`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback

from ..config import PRESETS
from .complex_args import add_complex_arguments, is_complex_run, note_separate_chains, run_complex
from .ensemble_args import add_ensemble_arguments, ensemble_options
from .malloc import add_malloc_option
from .memory_args import add_predict_memory_arguments, predict_request
from .options import DEFAULT_WEIGHTS, non_negative_int, positive_int
from .pipeline_args import add_pipeline_arguments, pipeline_from_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``predict`` subcommand."""
    p = sub.add_parser(
        "predict",
        help="predict structures from FASTA/a3m inputs",
        description="Predict monomer structures with pLDDT/PAE confidence from a FASTA file (one or many "
        "records), a directory of FASTA files, or an .a3m whose first row is the query; complexes from "
        "records whose chains are joined by ':' or, with --complex, from every record of a file.",
        epilog="Outputs per target, one layout for one model or an ensemble (AF2's), in <out>/<id>/ (the "
        "sanitised record id): ranked_0.pdb (the best prediction; ranked_<k>.pdb, .cif), ranking_debug.json, "
        "<id>_scores.json (every prediction with its rank), <id>_plddt.png and per prediction "
        "<model>_seed_<s>.pdb (complexes: <model>_pred_<k>.pdb, AF2-Multimer's names; pLDDT in the B-factor "
        "column), .cif (ModelCIF), _scores.json, _plddt.png and, for models with a PAE head, _pae.json "
        "(AlphaFold DB layout) and _pae.png; <out>/timings.json per run. "
        "Exit status 1 if any target failed, 2 for bad options or weights.",
    )
    p.add_argument(
        "input",
        help="FASTA file, .a3m/.sto alignment (first row = query), mmCIF/PDB file (one target per "
        "protein chain), or a directory of FASTA/structure files",
    )
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory (created)")
    msa = p.add_mutually_exclusive_group()
    msa.add_argument("--msa", metavar="FILE", help="alignment (.a3m or .sto) for a single-record input")
    msa.add_argument(
        "--msa-dir",
        metavar="DIR",
        help="directory with <record id>.a3m / <record id>.sto, or a folder <record id>/ of alignment files (merged)",
    )
    msa.add_argument("--single-sequence", action="store_true", help="run without an MSA")
    p.add_argument(
        "--weights",
        metavar="FILE",
        help=f"weights: an alphafold-mem/Lightning checkpoint, an AF2 params .npz or an OpenFold "
        f".pt, detected by content (default: {DEFAULT_WEIGHTS})",
    )
    p.add_argument(
        "--preset",
        choices=PRESETS,
        metavar="NAME",
        help="model preset for AF2/OpenFold weights (default: from the file name, else the first named "
        "preset with the file's layers); our checkpoints carry their own config",
    )
    p.add_argument(
        "--num-recycles", type=non_negative_int, metavar="N", help="recycling iterations (default: the model's)"
    )
    p.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N (default: auto)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of MSA sampling and torch (default: 0)")
    add_predict_memory_arguments(p)
    p.add_argument(
        "--no-track-memory",
        dest="track_memory",
        action="store_false",
        help="CPU: skip measuring the forward's activation peak for timings.json (the measurement "
        "hooks every torch op and slows a CPU forward by up to ~2x; on CUDA it is free)",
    )
    p.add_argument(
        "--dap",
        type=positive_int,
        default=1,
        metavar="P",
        help="share each target among P processes (dynamic axial parallelism): spawns P local processes "
        "(CPU: gloo; CUDA: one GPU each), or joins torchrun's group when started by torchrun "
        "(default: 1)",
    )
    p.add_argument(  # --devices (target parallelism): alphafold_mem.cli.devices_launch
        "--devices",
        type=positive_int,
        default=1,
        metavar="N",
        help="spread the targets over N devices, each target on one (CPU: N processes; CUDA: one GPU "
        "each), or over the processes of torchrun/SLURM (N = their number); one summary and timings.json "
        "(default: 1)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="recompute targets whose outputs already exist (default: skip them if they were produced "
        "from the same sequence, MSA, weights and options; fail them, naming what changed, if not)",
    )
    p.add_argument(
        "--min-msa-depth",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="fail targets whose MSA has fewer than N distinct rows, query included (default: 0); "
        "the scores JSON records the depth and Neff at 80%% identity",
    )
    p.add_argument(
        "--record-paths",
        action="store_true",
        help="write local paths of inputs, MSAs and weights into the output files (default: file names "
        "only, so that results can be shared as they are)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    add_malloc_option(p)
    add_pipeline_arguments(p)
    add_ensemble_arguments(p)
    add_complex_arguments(p)
    p.set_defaults(func=run, check=check)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def check(args: argparse.Namespace) -> int:
    """What can be checked before anything heavy is loaded: the input and ``--msa`` exist. Returns 0,
    or 2 after one ``error:`` line (nothing is created)."""
    if args.input and not os.path.exists(args.input):
        _log(f"error: {args.input}: input not found")
        return 2
    if args.msa and not os.path.exists(args.msa):
        _log(f"error: {args.msa}: MSA file not found")
        return 2
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``predict`` from parsed arguments; returns the exit status (``--dap P``: in P processes,
    :mod:`alphafold_mem.cli.dap_launch`), holding the lock on ``--out`` and handling SIGINT/SIGTERM."""
    # heavy: the predict package and the launchers load torch (kept out of the parser's start-up)
    from .dap_launch import run_with_dap
    from .devices_launch import run_with_devices
    from .locked_run import locked_run

    if is_complex_run(args):  # complexes: their own run (alphafold_mem.predict.complex_run)
        return run_complex(args)
    note_separate_chains(args, _log)  # a multi-record file without --complex: separate chains, said once
    if args.devices != 1:  # target parallelism: its own launcher, lock and signals
        return run_with_devices(args)
    if args.dap > 1 and any(getattr(args, k, None) for k in ("db", "template_db", "msa_server")):
        _log(  # P ranks would search (or ask the server) at once
            "error: --dap does not run the sequence search: run `alphafold-mem search` first (or predict "
            "without --dap), then predict --dap with --msa-dir"
        )
        return 2
    lead = os.environ.get("RANK", "0") == "0"  # under torchrun the other ranks join rank 0's run
    return locked_run(args.out, lead, lambda: run_with_dap(args, run_one) if args.dap > 1 else run_one(args))


def run_one(args: argparse.Namespace) -> int:
    """``predict`` in this process (one rank of a ``--dap`` run when one is set up)."""
    # heavy: the predict package loads torch
    from ..predict import PredictError, predict
    from .predict_options import predict_options

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        pipeline = pipeline_from_args(args, log)
        memory_policy = predict_request(args)
        ensemble = ensemble_options(args)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    try:
        run_predict = predict
        if ensemble is not None:
            from ..predict.ensemble import predict_ensemble  # deferred: ensembles only

            run_predict = functools.partial(predict_ensemble, **ensemble)
        options = predict_options(args, log, memory_policy=memory_policy, pipeline=pipeline)
        result = run_predict(args.input, args.out, device=args.device, dap=args.dap, **options)
    except PredictError as exc:
        log(f"error: {exc}")
        if args.debug:
            log(traceback.format_exc().rstrip())
        return 2
    return result.exit_code
