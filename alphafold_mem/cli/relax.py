"""``alphafold-mem relax``: Amber relaxation (AF2's protocol, OpenMM + pdbfixer) of existing models or
structures, as ``colabfold_relax`` does.

Example::

    alphafold-mem relax out/demo/1lcd_A/ranked_0.pdb --out out/relaxed

Writes ``<out>/<input stem>_relaxed.pdb`` (hydrogens added, input B-factors kept per residue) and
``<out>/<input stem>_relax.json`` (energies, Cα-RMSD, violation counts before/after, time). Exit status
1 if any input failed, 2 when OpenMM/pdbfixer are missing.
"""

from __future__ import annotations

import argparse
import os
import sys

from .options import non_negative_int


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``relax`` subcommand."""
    p = sub.add_parser(
        "relax",
        help="Amber relaxation of PDB/mmCIF models (OpenMM)",
        description="Restrained Amber99sb minimisation of every protein chain, AF2's protocol "
        "(needs: pip install 'alphafold_mem[relax]').",
    )
    p.add_argument("inputs", nargs="+", help="PDB or mmCIF files (optionally .gz)")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="OpenMM platform (default: cpu)")
    p.add_argument("--cpus", type=non_negative_int, default=0, help="CPU threads (default: OpenMM's choice)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``relax``; returns the exit status."""
    # heavy: the data and predict packages load torch; OpenMM
    from ..data import InputError
    from ..data.formats import STRUCTURE, stem
    from ..predict.outputs import write_json
    from ..predict.relax import RelaxError, relax_structure, require_openmm

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        require_openmm()
    except RelaxError as exc:
        log(f"error: {exc}")
        return 2
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for path in args.inputs:
        name = stem(path, STRUCTURE)
        out = os.path.join(args.out, f"{name}_relaxed.pdb")
        try:
            result = relax_structure(
                path, out, device=args.device, threads=args.cpus, remarks=[f"relaxed from {os.path.basename(path)}"]
            )
        except (RelaxError, InputError, OSError) as exc:
            log(f"error: {path}: {exc}")
            failed += 1
            continue
        write_json(os.path.join(args.out, f"{name}_relax.json"), {"input": path, **result.as_dict()})
        b, a = result.violations_before, result.violations_after
        log(
            f"{path} -> {out}: {result.seconds:.1f} s, {result.iterations} iteration(s), energy "
            f"{result.initial_energy:.0f} -> {result.final_energy:.0f} "
            f"kcal/mol, Cα-RMSD {result.ca_rmsd:.2f} Å, clashing atoms {b['clashing_atoms']} -> {a['clashing_atoms']}, "
            f"bond violations {b['bond_violations']} -> {a['bond_violations']}"
        )
    return 1 if failed else 0
