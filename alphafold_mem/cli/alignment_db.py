"""alphafold-mem alignment-db: per-chain alignment folders packed into OpenFold's alignment database.

Example:

    alphafold-mem alignment-db alignments/ alignment_db/ --shards 4 --duplicate-chains duplicate_pdb_chains.txt
    alphafold-mem train --mmcif-dir mmcif/ --alignment-index alignment_db/alignment_db.index ...

Writes <OUT>/<name>_<k>.db and <OUT>/<name>.index (alphafold_mem.data.alignment_db), the
format OpenFold's create_alignment_db_sharded.py writes and its data module reads. Exit status 0, or 1
with one 'error:' line.
"""

from __future__ import annotations

import argparse
import sys

from .options import positive_int

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``alignment-db`` subcommand."""
    p = sub.add_parser(
        "alignment-db",
        help="pack alignment folders into OpenFold's alignment database",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("alignment_dir", help="folder of <pdbid>_<chain>/ alignment folders")
    p.add_argument("out_dir", help="where the .db shards and the index go (created)")
    p.add_argument("--name", default="alignment_db", help="database name (default: alignment_db)")
    p.add_argument("--shards", type=positive_int, default=1, help=".db files to spread the folders over (default: 1)")
    p.add_argument("--duplicate-chains", metavar="FILE", help="duplicate_pdb_chains.txt: add duplicates to the index")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``alignment-db``; returns the exit status."""
    # heavy: the data package loads torch
    from ..data.alignment_db import write_alignment_db
    from ..data.errors import InputError

    try:
        path = write_alignment_db(
            args.alignment_dir, args.out_dir, name=args.name, shards=args.shards, duplicate_chains=args.duplicate_chains
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"alignment database index: {path}")
    return 0
