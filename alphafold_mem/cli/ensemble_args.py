"""``predict``'s ensemble and recycling flags: ``--models``, ``--weights-dir``, ``--num-seeds``,
``--rank-by`` (:mod:`alphafold_mem.predict.ensemble`) and ``--recycle-early-stop-tolerance``."""

from __future__ import annotations

import argparse
from typing import Optional

from .options import non_negative_float, positive_int

__all__ = ["add_ensemble_arguments", "ensemble_options"]


def add_ensemble_arguments(p: argparse.ArgumentParser) -> None:
    """Add the flags to the ``predict`` parser."""
    g = p.add_argument_group(
        "ensembles and recycling",
        "With --models or --num-seeds every (model, seed) is predicted and ranked, in the layout of a single "
        "model: <out>/<id>/ with model_<k>[_ptm]_seed_<s>.pdb/.cif/_scores.json/_plddt.png per prediction, "
        "ranked_<r>.pdb/.cif best first, ranking_debug.json (AF2's layout), <id>_scores.json (every "
        "prediction) and <id>_plddt.png (every prediction on one plot). A rerun with more models or seeds "
        "computes only the missing ones.",
    )
    g.add_argument(
        "--models",
        metavar="LIST",
        help="AF2 model numbers to run, e.g. 1,2,3,4,5 (or 1-5, all); needs --weights-dir",
    )
    g.add_argument(
        "--weights-dir",
        metavar="DIR",
        help="folder of AF2 params_model_<k>[_ptm].npz or OpenFold finetuning_[ptm_]<k>.pt files "
        "(alphafold-mem weights fetch); one family is used, the pTM one first",
    )
    g.add_argument(
        "--num-seeds",
        type=positive_int,
        metavar="S",
        help="predictions per model with seeds --seed, --seed+1, ... (default: 1)",
    )
    g.add_argument(
        "--rank-by",
        choices=("plddt", "ptm"),
        default="plddt",
        help="rank an ensemble by mean pLDDT (AF2 monomer, default) or pTM (needs pTM weights)",
    )
    g.add_argument(
        "--recycle-early-stop-tolerance",
        type=non_negative_float,
        default=0.0,
        metavar="ANGSTROM",
        help="stop recycling once the Cα distance matrix changes by at most this many Å between "
        "iterations (AF2 v2.3; ColabFold uses 0.5); 0 runs every recycle (default: 0)",
    )


def ensemble_options(args: argparse.Namespace) -> Optional[dict]:
    """The :func:`~alphafold_mem.predict.ensemble.predict_ensemble` options of the flags, or ``None``
    when neither ``--models`` nor ``--num-seeds`` is given (the single-model layout).

    Raises:
        ValueError: an ensemble flag without --models/--num-seeds, or a bad model list (one line).
    """
    from ..weights.directory import parse_model_list  # heavy: the weights package loads torch

    if args.models is None and args.num_seeds is None:
        if args.weights_dir is not None:
            raise ValueError("--weights-dir needs --models (e.g. --models 1,2,3,4,5)")
        if args.rank_by != "plddt":
            raise ValueError("--rank-by ranks an ensemble: give --models or --num-seeds")
        return None
    return {
        "models": parse_model_list(args.models) if args.models is not None else None,
        "weights_dir": args.weights_dir,
        "num_seeds": 1 if args.num_seeds is None else args.num_seeds,
        "rank_by": args.rank_by,
    }
