"""``predict``'s complex flags (``--complex``, ``--num-predictions-per-model``, ``--save-features``)
and the complex run (:func:`alphafold_mem.predict.complex_run.predict_complexes`): a ``--complex``
input, or a FASTA input with a record whose chains are joined by ``:``, is predicted as complexes,
under the memory options of every prediction (``--memory-policy``, ``--max-memory``, ``--precision``,
``--chunk-size``, ``--low-memory``, ``--memory-set``: :func:`alphafold_mem.cli.memory_args.predict_request`)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from .memory_args import predict_request
from .options import positive_int

__all__ = ["add_complex_arguments", "is_complex_run", "note_separate_chains", "run_complex"]


def add_complex_arguments(p: argparse.ArgumentParser) -> None:
    """Add the flags to the ``predict`` parser."""
    g = p.add_argument_group(
        "complexes",
        "A FASTA record whose chains are joined by ':' is one complex (ColabFold's convention); with "
        "--complex every record of one file is one chain of one complex (AF2's convention; a folder of "
        "files is a batch). Complexes need AF2-Multimer weights (--weights FILE, or --weights-dir DIR "
        "--models 1,2,...); outputs of complex <id> go to <out>/<id>/: <model>_pred_<k>.pdb/.cif/"
        "_scores.json/_pae.json, ranked_<r>.pdb/.cif by 0.8*ipTM+0.2*pTM, ranking_debug.json "
        "(AF2-Multimer's keys), <id>_scores.json and <id>_pae.json. --msa-dir holds one folder per chain "
        "(<id>_<chain>, record id, chain id or entity number) with its alignments and pairing.a3m or "
        "uniprot_hits.sto.",
    )
    g.add_argument("--complex", action="store_true", help="every record of an input file is one chain of one complex")
    g.add_argument(
        "--num-predictions-per-model",
        type=positive_int,
        metavar="K",
        help="complexes: predictions per model with seeds --seed, --seed+1, ... (default: 1; AF2-Multimer uses 5)",
    )
    g.add_argument(
        "--save-features",
        action="store_true",
        help="complexes: write <id>_features.npz (processed features, AF2's names, num_paired_rows)",
    )


def is_complex_run(args: argparse.Namespace) -> bool:
    """``--complex`` given, or a FASTA input with a ``:`` chain separator."""
    if args.complex:
        return True
    from ..predict.complex_target import has_chain_separators  # heavy: the predict package loads torch

    return has_chain_separators(args.input)


def note_separate_chains(args: argparse.Namespace, log) -> None:
    """Say once that a multi-record FASTA file of a monomer run is a batch of separate chains."""
    from ..predict.complex_target import separate_chains_note  # heavy: the predict package loads torch

    if os.environ.get("RANK", "0") == "0":
        note = separate_chains_note(args.input)
        if note:
            log(note)


def run_complex(args: argparse.Namespace) -> int:
    """Run the complexes of ``args.input`` holding the lock on ``--out``; returns the exit status."""
    # imported on demand: --help and option errors stay fast (the predict stack loads torch)
    from ..predict import PredictError
    from ..predict.complex_run import predict_complexes
    from ..predict.lock import lock_output_dir
    from ..predict.signals import Interrupted, handle_signals
    from ..weights.directory import parse_model_list

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    unsupported = [
        flag for flag, on in (("--dap", args.dap > 1), ("--devices", args.devices > 1), ("--msa", args.msa)) if on
    ]
    if unsupported:
        log(f"error: {', '.join(unsupported)} with complexes is not supported yet: give per-chain folders in --msa-dir")
        return 2
    if args.num_seeds is not None:
        log("error: complexes take --num-predictions-per-model K, not --num-seeds")
        return 2
    try:
        models = parse_model_list(args.models) if args.models is not None else None
        memory_policy = predict_request(args)  # --memory-policy, --max-memory, ...: as for monomers
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    tolerance = args.recycle_early_stop_tolerance or None  # 0 (the flag's default): the model's own
    try:
        with handle_signals(), lock_output_dir(args.out):
            run = predict_complexes(
                args.input,
                args.out,
                one_complex=args.complex,
                weights=args.weights,
                weights_dir=args.weights_dir,
                models=models,
                num_predictions_per_model=args.num_predictions_per_model or 1,
                seed=args.seed,
                preset=args.preset,
                num_recycles=args.num_recycles,
                recycle_early_stop_tolerance=tolerance,
                device=args.device,
                msa_dir=args.msa_dir,
                save_features=args.save_features,
                memory_policy=memory_policy,
                log=log,
            )
    except PredictError as exc:
        log(f"error: {exc}")
        if args.debug:
            log(traceback.format_exc().rstrip())
        return 2
    except Interrupted as exc:
        log(f"interrupted ({exc.name}): finished complexes are complete in {args.out}; run again to continue")
        return exc.exit_code
    return run.exit_code
