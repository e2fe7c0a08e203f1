"""Build the training chain index and coordinate cache once (alphafold_mem.data.chain_index).

Parses every structure under the given directories (mmCIF / PDB, optionally gzipped), writes one
``.npz`` coordinate cache per protein chain and a JSON index that ``ProteinChainDataset`` reads;
pairs each chain with its alignment folder (``<alignments>/<pdbid>_<chain>/``, or a folder whose
query equals the chain's sequence). Unreadable structures are listed and skipped, not fatal.
``--workers N`` parses over N processes; running it again parses only new or changed structures.
The same as ``alphafold-mem index`` (which also reads OpenFold's caches and alignment database).

Command line (from the repository root, on the shipped example set)::

    python scripts/build_chain_index.py --structures data/mmcif data/pdb \
        --alignments data/alignments --out out/chain_index/index.json \
        --cache-dir out/chain_index/cache

Prints the number of chains, those with alignments, skipped files and seconds per structure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alphafold_mem.data.chain_index import build_chain_index  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", nargs="+", required=True, help="structure directories or files")
    parser.add_argument("--alignments", default=None, help="root of <pdbid>_<chain>/ alignment folders")
    parser.add_argument("--out", required=True, help="index JSON to write")
    parser.add_argument("--cache-dir", default=None, help="directory for per-chain .npz caches")
    parser.add_argument("--verbose", action="store_true", help="one line per structure")
    parser.add_argument("--workers", type=int, default=1, help="processes parsing structures (default 1)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    index = build_chain_index(
        args.structures, args.alignments, args.out, cache_dir=args.cache_dir, verbose=args.verbose, workers=args.workers
    )
    timings = getattr(index, "timings", [])
    with_msa = sum(1 for e in index.entries if e["alignment_dir"] or e.get("alignment_db"))
    print(
        f"{len(index.entries)} protein chains ({with_msa} with alignments) from {len(timings)} structures; "
        f"{len(index.skipped)} skipped; parse {sum(timings) / max(len(timings), 1):.3f} s/structure; "
        f"total {time.perf_counter() - t0:.1f} s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
