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

from .complex_options import complex_options
from .options import positive_int

__all__ = ["add_complex_arguments", "is_complex_run", "note_separate_chains", "run_complex", "run_complex_rank"]


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
        "(<id>_<chain>, record id, chain id or entity number) with its alignments and pairing.a3m, "
        "uniprot_hits.sto or prepaired.a3m (rows paired already), and its template hits (pdb70_hits.hhr, "
        "hmm_output.sto, pdb_hits.sto; used with --mmcif-dir, or searched per chain with --template-db); "
        "without it, --msa-server (unpaired MSAs and the server's paired rows) or --db (jackhmmer; with "
        "--uniprot-db, AF2's pairing search) searches once per distinct chain sequence, into <out>/<id>/msas/.",
    )
    g.add_argument("--complex", action="store_true", help="every record of an input file is one chain of one complex")
    g.add_argument(
        "--uniprot-db",
        metavar="FASTA",
        help="complexes with --db: UniProt FASTA for AF2's pairing search (jackhmmer, up to 50000 rows, kept as "
        "<out>/<id>/msas/<id>_<chain>/uniprot_hits.sto; rows paired by species)",
    )
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
    """Run the complexes of ``args.input`` holding the lock on ``--out``; returns the exit status.
    ``--dap P``: in P processes sharing every complex (:mod:`.dap_launch`, the monomer route's
    launcher), the searches (``--db``, ``--msa-server``, ``--template-db``) run first, once, in the
    launcher (:func:`_search_first`); ``--devices N``: the complexes spread over N processes
    (:mod:`.devices_launch`)."""
    # imported on demand: --help and option errors stay fast (the predict stack loads torch)
    from ..distributed.launch import in_torchrun
    from .dap_launch import run_with_dap
    from .devices_launch import run_with_devices
    from .locked_run import locked_run

    if args.msa:
        _log("error: --msa with complexes is not supported yet: give per-chain folders in --msa-dir")
        return 2
    if args.num_seeds is not None:
        _log("error: complexes take --num-predictions-per-model K, not --num-seeds")
        return 2
    searching = args.db or args.msa_server or args.template_db
    if args.dap > 1 and searching and in_torchrun():  # no launcher to search before the ranks
        _log(
            "error: under torchrun --dap does not search: run once without --dap (or with `alphafold-mem "
            "predict --dap`), then torchrun predict --dap with --msa-dir <out>/<id>/msas"
        )
        return 2
    if args.devices != 1:  # complex parallelism: the monomer route's launcher, lock and signals
        return run_with_devices(args, complexes=True)
    lead = os.environ.get("RANK", "0") == "0"  # under torchrun the other ranks join rank 0's run

    def body() -> int:
        if args.dap > 1:
            status = _search_first(args) if searching and not in_torchrun() else 0
            if status == 2 or getattr(args, "complex_targets", None) == []:
                return max(status, 1)
            return max(run_with_dap(args, run_complex_rank), status)
        return run_complex_rank(args)

    return locked_run(args.out, lead, body, "complexes")


def _search_first(args: argparse.Namespace) -> int:
    """``--dap`` with searches: search every complex once here, before the ranks start
    (:func:`alphafold_mem.predict.complex_presearch.search_before_ranks`), and set ``args`` so that the
    ranks read what was searched (``searched``) for the complexes whose searches succeeded
    (``complex_targets``). Returns 0, 1 when a complex failed here (one line each), 2 for bad options."""
    from ..predict.complex_presearch import search_before_ranks  # heavy: the predict package loads torch

    try:
        options = complex_options(args)
    except ValueError as exc:
        _log(f"error: {exc}")
        return 2
    if options["msa_search"] is not None and args.msa_dir:  # what predict_complexes refuses, before searching
        _log("error: complexes take --msa-server/--db without --msa-dir")
        return 2
    names, errors = search_before_ranks(
        args.input,
        args.out,
        one_complex=args.complex,
        msa_dir=args.msa_dir,
        msa_search=options["msa_search"],
        pipeline=options["pipeline"],
        log=_log,
    )
    args.searched, args.complex_targets = True, names
    return 1 if errors else 0


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_complex_rank(args: argparse.Namespace) -> int:
    """The complex run in this process (one rank of a ``--dap`` run when one is set up); returns its
    exit status (2 after one ``error:`` line for a problem with the run as a whole)."""
    # imported on demand: --help and option errors stay fast (the predict stack loads torch)
    from ..predict import PredictError
    from ..predict.complex_run import predict_complexes

    try:
        options = complex_options(args)
    except ValueError as exc:
        _log(f"error: {exc}")
        return 2
    try:
        run = predict_complexes(
            args.input,
            args.out,
            device=args.device,
            dap=args.dap,
            log=_log,
            targets=getattr(args, "complex_targets", None),  # --dap after its searches: what they found
            searched=getattr(args, "searched", False),
            **options,
        )
    except PredictError as exc:
        _log(f"error: {exc}")
        if args.debug:
            _log(traceback.format_exc().rstrip())
        return 2
    return run.exit_code
