"""The keyword arguments of :func:`alphafold_mem.predict.complex_run.predict_complexes` that
``predict``'s parsed flags give, shared by the one-process run, every rank of ``--dap P``
(:mod:`.complex_args`) and every rank of ``--devices N`` (:mod:`.devices_launch`)."""

from __future__ import annotations

import argparse

from .memory_args import predict_request
from .pipeline_args import msa_server_kwargs, search_kwargs, template_kwargs

__all__ = ["complex_options"]


def complex_options(args: argparse.Namespace) -> dict:
    """``predict_complexes`` keywords from ``args`` (not ``inputs``, ``out_dir``, ``device``, ``dap``,
    ``targets`` nor ``log``, which the caller chooses).

    Raises:
        ValueError: a bad ``--models`` list, memory or search option (one line).
    """
    from ..weights.directory import parse_model_list  # heavy: the weights package loads torch

    search = None
    if args.db or getattr(args, "msa_server", None) or getattr(args, "uniprot_db", None):
        from ..predict.complex_msas import ComplexSearch  # heavy: the predict package loads torch

        search = ComplexSearch(
            **msa_server_kwargs(args),
            msa_server_pairing=args.msa_server_pairing,
            uniprot_db=args.uniprot_db,
            **search_kwargs(args),
        )
    models = parse_model_list(args.models) if args.models is not None else None
    return {
        "one_complex": args.complex,
        "weights": args.weights,
        "weights_dir": args.weights_dir,
        "models": models,
        "num_predictions_per_model": args.num_predictions_per_model or 1,
        "seed": args.seed,
        "preset": args.preset,
        "num_recycles": args.num_recycles,
        "recycle_early_stop_tolerance": args.recycle_early_stop_tolerance or None,  # 0 (the default): the model's
        "msa_dir": args.msa_dir,
        "msa_search": search,  # --msa-server or --db (with --uniprot-db): each complex's alignments searched
        "save_features": args.save_features,
        "memory_policy": predict_request(args),  # --memory-policy, --max-memory, ...: as for monomers
        "pipeline": _template_pipeline(args),
    }


def _template_pipeline(args: argparse.Namespace):
    """:class:`~alphafold_mem.predict.stages.PipelineOptions` of the template flags (``--template-db``,
    ``--mmcif-dir``, ``--max-template-date``, ``--obsolete``, ``--max-templates``) and the relaxation
    flags (``--relax``, ``--relax-device``), or None without ``--template-db``, ``--mmcif-dir`` and
    ``--relax``."""
    relax = bool(getattr(args, "relax", False))
    if not (getattr(args, "template_db", None) or getattr(args, "mmcif_dir", None) or relax):
        return None
    from ..predict.stages import PipelineOptions  # heavy: the predict package loads torch

    return PipelineOptions(
        **template_kwargs(args),
        cpus=args.cpus,
        relax=relax,
        relax_device=getattr(args, "relax_device", "cpu"),
        progress=args.progress,
    )
