"""``alphafold-mem weights fetch {af2,af2-ptm,af2-multimer,openfold} --dir DIR``: the published weights
downloaded (resumable), checked against a SHA-256 and unpacked into ``DIR/<name>/``
(:func:`alphafold_mem.weights.fetch.fetch_weights`).

Example::

    alphafold-mem weights fetch af2-ptm --dir ~/weights
    alphafold-mem predict target.fasta --weights ~/weights/af2-ptm/params_model_1_ptm.npz --out out

Exit status 0 on success, 1 when the fetch fails (one ``error:`` line: offline, checksum mismatch, disk full).
"""

from __future__ import annotations

import argparse
import sys

from ..weights.fetch import RELEASES, FetchError, fetch_weights
from .options import add_no_progress, positive_float


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``weights`` subcommand (``weights fetch``)."""
    p = sub.add_parser("weights", help="obtain published weights (AF2, OpenFold)")
    actions = p.add_subparsers(dest="weights_command", metavar="ACTION", required=True)
    f = actions.add_parser(
        "fetch",
        help="download, verify and unpack published weights",
        description="Download published weights (resuming an interrupted download), check their SHA-256 and "
        "unpack them into DIR/<name>/. "
        + " ".join(f"{r.name}: {r.description}." for r in RELEASES.values())
        + " The parameters are licensed by their publishers (CC BY 4.0); see LICENSE in the unpacked folder.",
    )
    f.add_argument("name", choices=tuple(RELEASES), help="which weights")
    f.add_argument("--dir", required=True, metavar="DIR", help="where DIR/<name>/ goes (created)")
    f.add_argument(
        "--url",
        metavar="URL",
        help="a mirror: a base URL ending in '/' (file names appended) or, for the af2* sets, the archive's URL",
    )
    f.add_argument(
        "--sha256",
        metavar="HEX",
        help="expected SHA-256 of the archive (af2*): the publishers give none, so a fetch prints the "
        "value it computed; pass it here to pin it on other machines or mirrors",
    )
    f.add_argument("--force", action="store_true", help="fetch again even when DIR/<name>/ is complete")
    f.add_argument(
        "--keep-archive",
        action="store_true",
        help="keep the verified archive in DIR/.downloads/ (af2, af2-ptm and af2-multimer share one archive)",
    )
    f.add_argument(
        "--timeout", type=positive_float, default=60.0, metavar="S", help="seconds a connection may stay silent"
    )
    add_no_progress(f, "no progress bar")
    f.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``weights fetch``; returns the exit status."""

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        result = fetch_weights(
            args.name,
            args.dir,
            url=args.url,
            sha256=args.sha256,
            force=args.force,
            keep_archive=args.keep_archive,
            progress=args.progress,
            log=log,
            timeout=args.timeout,
        )
    except FetchError as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted (a rerun resumes the download)")
        return 130
    print(result.path)
    return 0
