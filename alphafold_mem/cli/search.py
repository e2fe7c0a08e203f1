"""``alphafold-mem search``: MSA search (jackhmmer, per database) and optionally template search
(hmmsearch against a pdb_seqres file) for every record of a FASTA file, with pyhmmer.

Example::

    alphafold-mem search data/fasta/per_entry/1lcd.fasta --db data/search/homologs.fasta \\
        --template-db data/search/pdb_seqres.txt --out out/search

Writes ``<out>/<id>/<db name>_hits.a3m`` and ``.sto`` per database, ``pdb_hits.sto`` for templates and
``search.json``; a later run (or ``predict --db ... --out <out>``) with the same query, databases and
settings reuses them. Exit status 1 if any record failed, 2 for bad options.
"""

from __future__ import annotations

import argparse
import sys

from .pipeline_args import add_search_arguments


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``search`` subcommand."""
    p = sub.add_parser(
        "search",
        help="MSA and template search with pyhmmer (jackhmmer, hmmsearch)",
        description="Search every FASTA record against protein databases with jackhmmer "
        "(AF2's settings) and, with --template-db, a pdb_seqres file with hmmsearch.",
    )
    p.add_argument("input", help="FASTA file (one or many records)")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory (created)")
    add_search_arguments(p, required=True)
    p.add_argument("--template-db", metavar="FILE", help="pdb_seqres.txt-style FASTA for the template search")
    p.add_argument("--overwrite", action="store_true", help="search again even when results exist")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``search``; returns the exit status."""
    # heavy: the data and search packages load numpy, Biopython and pyhmmer
    from ..data import InputError, parse_fasta
    from ..data.names import unique_name
    from ..search import JackhmmerSettings, SearchError, SearchOptions, search_target

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        records = list(parse_fasta(args.input))
    except InputError as exc:
        log(f"error: {exc}")
        return 2
    settings = JackhmmerSettings(iterations=args.iterations, max_sequences=args.max_seqs, z=args.z)
    options = SearchOptions(tuple(args.db), args.template_db, settings, args.cpus, args.progress)
    failed, seen = 0, {}
    for rec in records:
        name = unique_name(rec.name, seen)
        try:
            outcome = search_target(name, rec.sequence, args.out, options, log=log, overwrite=args.overwrite)
        except SearchError as exc:
            log(f"error: {args.input}:{rec.line}: record '{name}': {exc}")
            failed += 1
            continue
        depths = ", ".join(f"{db} {info['depth']}" for db, info in outcome.record["msa"].items())
        log(
            f"{name}: {len(rec.sequence)} residues; MSA rows: {depths}"
            + (f"; template hits: {outcome.record['templates']['hits']}" if outcome.record.get("templates") else "")
        )
    return 1 if failed else 0
