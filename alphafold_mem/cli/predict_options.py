"""The keyword arguments of :func:`alphafold_mem.predict.predict` from the parsed ``predict`` options,
shared by a plain run (:mod:`alphafold_mem.cli.predict`) and one ``--devices`` rank
(:mod:`alphafold_mem.cli.devices_launch`)."""

from __future__ import annotations

import argparse
from typing import Callable

from ..memory.policy import PolicyRequest

__all__ = ["predict_options"]


def predict_options(
    args: argparse.Namespace, log: Callable[[str], None], *, memory_policy: PolicyRequest, pipeline
) -> dict:
    """Every keyword argument of :func:`~alphafold_mem.predict.predict` that the options of ``args``
    give, but ``device``, ``dap`` and ``targets`` (which the caller chooses); ``memory_policy``:
    :func:`alphafold_mem.cli.memory_args.predict_request` of ``args``; ``pipeline``:
    :func:`alphafold_mem.cli.pipeline_args.pipeline_from_args` of ``args`` (``None``: no stage)."""
    return {
        "msa": args.msa,
        "msa_dir": args.msa_dir,
        "single_sequence": args.single_sequence,
        "weights": args.weights,
        "preset": args.preset,
        "num_recycles": args.num_recycles,
        "seed": args.seed,
        "overwrite": args.overwrite,
        "memory_policy": memory_policy,
        "track_memory": args.track_memory,
        "log": log,
        "debug": args.debug,
        "pipeline": pipeline,
        "min_msa_depth": args.min_msa_depth,
        "record_paths": args.record_paths,
        "recycle_early_stop_tolerance": getattr(args, "recycle_early_stop_tolerance", 0.0),
    }
