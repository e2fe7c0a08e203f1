"""alphafold-mem index: the training chain index, built once over worker processes and reused.

Reads our layout or OpenFold's / OpenProteinSet's as they are (alphafold_mem.data.chain_index):

    alphafold-mem index --structures data/mmcif --alignment-dir data/alignments --out idx/index.json
    alphafold-mem index --mmcif-dir pdb_mmcif/ --alignment-index alignment_db/alignment_db.index \\
        --chain-data-cache chain_data_cache.json --duplicate-chains duplicate_pdb_chains.txt --workers 16
    alphafold-mem train --index idx/index.json ...

Running it again after adding structures parses only the new or changed files (path + size + mtime).
Without --out the index goes to <first structure dir>/.alphafold_mem_index/index.json (or a
folder under ~/.cache/alphafold_mem/ when that directory is read-only): the place train looks.
Exit status 0, or 1 with one 'error:' line naming the file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .options import positive_int

if TYPE_CHECKING:  # annotations only: the data package loads torch
    from ..data.chain_index import ChainIndex

__all__ = ["add_source_options", "build_from_args", "register", "run"]


def add_source_options(p, *, structures_flag: bool = True) -> None:
    """The data-source flags shared by ``index`` and ``train``."""
    g = p.add_argument_group("data sources (our layout or OpenFold's)")
    names = ("--structures", "--mmcif-dir") if structures_flag else ("--mmcif-dir",)
    g.add_argument(
        *names,
        dest="mmcif_dir",
        nargs="+" if structures_flag else None,
        metavar="DIR",
        help="structure directories (mmCIF/PDB, searched recursively) or files",
    )
    g.add_argument("--alignment-dir", metavar="DIR", help="per-chain alignment folders <pdbid>_<chain>/")
    g.add_argument("--alignment-index", metavar="FILE", help="OpenFold alignment database index (.db shards beside it)")
    g.add_argument("--chain-data-cache", metavar="FILE", help="OpenFold chain_data_cache.json")
    g.add_argument("--mmcif-cache", metavar="FILE", help="OpenFold mmcif_cache.json")
    g.add_argument(
        "--duplicate-chains", metavar="FILE", help="OpenFold duplicate_pdb_chains.txt (chains sharing one MSA)"
    )
    g.add_argument(
        "--index-dir",
        metavar="DIR",
        help="where the index and coordinate caches go (default: <structures>/.alphafold_mem_index)",
    )
    g.add_argument(
        "--index-workers" if not structures_flag else "--workers",
        dest="index_workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes parsing structures (default: the CPUs this process may use)",
    )


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def build_from_args(args: argparse.Namespace, out: str | None = None, log=None) -> Path:
    """Build (or bring up to date) the index the source flags describe; returns its path."""
    return _build(args, out, log)[0]


def _build(args: argparse.Namespace, out: str | None, log) -> tuple[Path, ChainIndex]:
    """:func:`build_from_args`'s path and the index it wrote."""
    from ..data.chain_index import build_chain_index, default_index_dir  # heavy: the data package loads torch

    dirs = args.mmcif_dir if isinstance(args.mmcif_dir, list) else [args.mmcif_dir]
    if out is None:
        index_dir = Path(args.index_dir) if args.index_dir else default_index_dir(dirs[0])
        out_path = index_dir / "index.json"
    else:
        out_path = Path(out)
    cache_dir = Path(args.index_dir) / "cache" if args.index_dir else out_path.parent / "cache"
    workers = args.index_workers or _cpus()
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # every drop is in the index's skipped list
        index = build_chain_index(
            dirs,
            args.alignment_dir,
            out_path,
            cache_dir=cache_dir,
            workers=workers,
            alignment_index=args.alignment_index,
            duplicate_chains=args.duplicate_chains,
            chain_data_cache=args.chain_data_cache,
            mmcif_cache=args.mmcif_cache,
        )
    with_msa = sum(1 for e in index.entries if e.get("alignment_dir") or e.get("alignment_db"))
    if log is not None:
        log(
            f"index {out_path}: {len(index.entries)} chains ({with_msa} with alignments), "
            f"{len(index.skipped)} skipped; {len(index.timings)} structures parsed in this build "
            f"with {workers} worker(s), {time.perf_counter() - t0:.1f} s wall, "
            f"{time.process_time() - c0:.1f} s CPU in the main process"
        )
    return out_path, index


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``index`` subcommand."""
    p = sub.add_parser(
        "index",
        help="build the training chain index (parallel, incremental)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_options(p)
    p.add_argument("--out", metavar="FILE", help="the index JSON (default: <index dir>/index.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``index``; returns the exit status."""
    # heavy: the data package loads torch
    from ..data.drops import counted_lines
    from ..data.errors import InputError

    if not args.mmcif_dir:
        print("error: --structures/--mmcif-dir DIR is required", file=sys.stderr)
        return 1
    try:
        path, index = _build(args, args.out, log=lambda line: print(line, flush=True))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not index.entries:  # written (an empty index is valid), but nothing to train on: say why
        reasons = counted_lines(list(index.skipped))
        print(
            f"error: {path}: no chain indexed from {', '.join(map(str, args.mmcif_dir))}"
            + (f" ({'; '.join(reasons)})" if reasons else " (no structure files found)")
            + "; give the folders of mmCIF/PDB files with --structures",
            file=sys.stderr,
        )
        return 1
    for line in counted_lines(list(index.skipped)):
        print(f"skipped: {line}")
    return 0
