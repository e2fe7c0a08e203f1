"""Options shared by ``predict`` (search before, relaxation after the model) and ``search``:
:func:`add_search_arguments`, :func:`add_template_arguments`, :func:`add_relax_arguments`,
:func:`add_msa_server_arguments` (``predict`` only), and
:func:`pipeline_from_args`, which turns them into :class:`alphafold_mem.predict.stages.PipelineOptions`
(:func:`search_kwargs`, :func:`template_kwargs`, :func:`msa_server_kwargs`: the keywords of each
group, which complexes' :mod:`.complex_options` takes as well)."""

from __future__ import annotations

import argparse

from ..search.settings import MODES, PUBLIC_SERVER, TERMS
from .options import add_no_progress, positive_float, positive_int

__all__ = [
    "add_search_arguments",
    "add_template_arguments",
    "add_relax_arguments",
    "add_msa_server_arguments",
    "add_pipeline_arguments",
    "pipeline_from_args",
    "search_kwargs",
    "template_kwargs",
    "msa_server_kwargs",
]


def add_search_arguments(g, *, required: bool = False) -> None:
    """``--db`` (repeatable), ``--cpus``, ``--iterations``, ``--max-seqs``, ``--z``, ``--no-progress``."""
    g.add_argument(
        "--db",
        action="append",
        default=[],
        metavar="FASTA",
        required=required,
        help="protein FASTA database for jackhmmer (repeatable: e.g. uniref90.fasta, mgnify.fasta); "
        "hits go to <out>/<id>/<db name>_hits.a3m/.sto and are reused by later runs",
    )
    g.add_argument("--cpus", type=positive_int, default=1, help="threads for search and relaxation (default: 1)")
    g.add_argument("--iterations", type=positive_int, default=1, help="jackhmmer iterations, -N (default: 1, as AF2)")
    g.add_argument(
        "--max-seqs",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="rows kept per database, query included (default: 10000, AF2's UniRef90 cap)",
    )
    g.add_argument(
        "--z",
        type=positive_float,
        metavar="N",
        help="database size for E-values, jackhmmer -Z (default: the number of sequences in the file)",
    )
    add_no_progress(g, "no progress bars")


def add_template_arguments(g) -> None:
    """``--template-db``, ``--mmcif-dir``, ``--max-template-date``, ``--obsolete``, ``--max-templates``."""
    g.add_argument(
        "--template-db", metavar="FILE", help="pdb_seqres.txt-style FASTA for the hmmsearch template search (AF2 v2.3)"
    )
    g.add_argument(
        "--mmcif-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of template mmCIFs (<id>.cif[.gz] or the PDB mirror's <ab>/<1abc>.cif.gz); repeatable",
    )
    g.add_argument("--max-template-date", metavar="YYYY-MM-DD", help="drop templates released after this date")
    g.add_argument("--obsolete", metavar="FILE", help="wwPDB obsolete.dat: obsolete template ids -> successors")
    g.add_argument(
        "--max-templates", type=positive_int, default=4, metavar="N", help="templates per target (default: 4)"
    )


def add_relax_arguments(g) -> None:
    """``--relax``, ``--relax-device``."""
    g.add_argument(
        "--relax",
        action="store_true",
        help="Amber relaxation (AF2 protocol; needs alphafold_mem[relax]): writes <prediction>_relaxed.pdb "
        "beside the unrelaxed model and ranked_<k>_relaxed.pdb (complexes too: every chain its own, ids kept)",
    )
    g.add_argument("--relax-device", choices=("cpu", "cuda"), default="cpu", help="OpenMM platform (default: cpu)")


def add_msa_server_arguments(g) -> None:
    """``--msa-server URL``, ``--msa-server-mode``, ``--msa-server-pairing``."""
    g.add_argument(
        "--msa-server",
        metavar="URL",
        help=f"get the MSAs of targets without one from an MMseqs2 MSA server (ColabFold's protocol), e.g. "
        f"{PUBLIC_SERVER}; cached by sequence under <out>/msa_server/. {TERMS}. Not with --db",
    )
    g.add_argument(
        "--msa-server-mode",
        choices=tuple(MODES),
        default="env",
        help="env: UniRef30 and ColabFoldDB (ColabFold's default); all: UniRef30 only (default: env)",
    )
    g.add_argument(
        "--msa-server-pairing",
        choices=("greedy", "complete"),
        default="greedy",
        help="complexes: the server's paired mode pairs rows where two or more chains (greedy, ColabFold's "
        "default) or all chains (complete) have a hit of one species (default: greedy)",
    )


def add_pipeline_arguments(p: argparse.ArgumentParser) -> None:
    """All four groups, for ``predict``."""
    add_search_arguments(p.add_argument_group("sequence search (pyhmmer)"))
    add_msa_server_arguments(p.add_argument_group("MSA server (MMseqs2, ColabFold's protocol)"))
    add_template_arguments(p.add_argument_group("templates"))
    add_relax_arguments(p.add_argument_group("relaxation (OpenMM)"))


def pipeline_from_args(args: argparse.Namespace, log):
    """:class:`PipelineOptions` from parsed arguments, or None when no search/template/relax option is set."""
    from ..predict.stages import PipelineOptions  # heavy: the predict package loads torch

    server = getattr(args, "msa_server", None)
    if getattr(args, "uniprot_db", None):
        raise ValueError("--uniprot-db is the pairing search of complexes; a monomer is not paired")
    wanted = args.db or args.template_db or args.mmcif_dir or args.relax or server
    if not wanted:
        return None
    if getattr(args, "single_sequence", False) and args.db:
        raise ValueError("--single-sequence cannot be combined with --db")
    if server is not None and (args.db or getattr(args, "single_sequence", False)):
        raise ValueError(f"--msa-server cannot be combined with {'--db' if args.db else '--single-sequence'}")
    return PipelineOptions(
        **search_kwargs(args),
        **template_kwargs(args),
        relax=args.relax,
        relax_device=args.relax_device,
        **msa_server_kwargs(args),
        log=log,
    )


def search_kwargs(args: argparse.Namespace) -> dict:
    """The search settings of :func:`add_search_arguments` as keywords of ``PipelineOptions`` and
    ``ComplexSearch``: ``databases``, ``cpus``, ``iterations``, ``max_sequences``, ``z``, ``progress``."""
    return {
        "databases": tuple(args.db),
        "cpus": args.cpus,
        "iterations": args.iterations,
        "max_sequences": args.max_seqs,
        "z": args.z,
        "progress": args.progress,
    }


def template_kwargs(args: argparse.Namespace) -> dict:
    """The template settings of :func:`add_template_arguments` as keywords of ``PipelineOptions``:
    ``template_db``, ``mmcif_dirs``, ``max_template_date``, ``obsolete``, ``max_templates``."""
    return {
        "template_db": args.template_db,
        "mmcif_dirs": tuple(args.mmcif_dir),
        "max_template_date": args.max_template_date,
        "obsolete": args.obsolete,
        "max_templates": args.max_templates,
    }


def msa_server_kwargs(args: argparse.Namespace) -> dict:
    """``msa_server`` and ``msa_server_mode`` of :func:`add_msa_server_arguments` (None and ``env``
    where the command has no such flags, as ``search``) as keywords of ``PipelineOptions`` and
    ``ComplexSearch``."""
    return {"msa_server": getattr(args, "msa_server", None), "msa_server_mode": getattr(args, "msa_server_mode", "env")}
