"""Consecutive Cα-Cα distances of predicted (or experimental) structures: the local backbone geometry
figure the README quotes for the demo weights.

For every chain of every PDB/mmCIF file given, prints the number of consecutive residue pairs (both
with a Cα atom, residue numbers differing by one), and the mean, minimum and maximum Cα-Cα distance
in Å. A trans peptide bond puts consecutive Cα atoms 3.80 Å apart (cis: ~2.9 Å)::

    python scripts/backbone_geometry.py out/demo/1lcd_A.pdb

Exit status 0; 2 when a file cannot be read (the message names it).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from Bio.PDB import MMCIFParser, PDBParser


def consecutive_ca_distances(path: pathlib.Path) -> dict[str, np.ndarray]:
    """Per chain id, the distances (Å) between Cα atoms of residues numbered i and i + 1.

    Raises ValueError naming the file when Biopython cannot parse it or it holds no Cα atom."""
    parser = MMCIFParser(QUIET=True) if path.suffix.lower() in (".cif", ".mmcif") else PDBParser(QUIET=True)
    try:
        structure = parser.get_structure(path.stem, str(path))
    except Exception as exc:  # Biopython raises several types for malformed files
        raise ValueError(f"{path}: cannot parse: {exc}") from exc
    out: dict[str, np.ndarray] = {}
    model = next(iter(structure), None)
    for chain in [] if model is None else model:
        ca = {res.id[1]: res["CA"].coord for res in chain if res.id[0] == " " and "CA" in res}
        pairs = [(ca[i], ca[i + 1]) for i in sorted(ca) if i + 1 in ca]
        if pairs:
            a, b = (np.asarray(x, dtype=np.float64) for x in zip(*pairs))
            out[chain.id] = np.linalg.norm(a - b, axis=-1)
    if not out:
        raise ValueError(f"{path}: no consecutive residues with Cα atoms")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("structures", nargs="+", type=pathlib.Path, help="PDB or mmCIF files")
    args = ap.parse_args(argv)
    print("| file | chain | pairs | mean Cα-Cα Å | min Å | max Å |")
    print("|---|---|---|---|---|---|")
    for path in args.structures:
        try:
            per_chain = consecutive_ca_distances(path)
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for chain, d in per_chain.items():
            print(f"| {path.name} | {chain} | {d.size} | {d.mean():.2f} | {d.min():.2f} | {d.max():.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
