"""bf16 vs fp32 inference on the shipped examples: Cα-RMSD and |ΔpLDDT| of the same prediction.

Runs ``alphafold_mem.predict`` twice on the same inputs, weights and seed (``--precision fp32`` and
``--precision bf16``: the model's one autocast with its fp32 islands) and compares the written PDB
files target by target (read with the project's PDB reader): Cα-RMSD after optimal superposition
(``alphafold_mem.metrics.ca_rmsd``, Å), the
same without superposition, and the mean / max |ΔpLDDT| (pLDDT is the B-factor column, 0-100).

Command used for the README (demo weights, every record of the shipped
per-entry FASTA files, with its MSA where ``data/alignments`` has one and single-sequence otherwise)::

    python scripts/compare_precision_inference.py --out /tmp/bf16_check

Exit status 1 when any target exceeds ``--max-rmsd`` (default 0.5 Å) or ``--max-dplddt`` (mean,
default 1.0), or when a target failed in either precision.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from Bio import SeqIO  # noqa: E402

from alphafold_mem import AutoPolicy, predict  # noqa: E402
from alphafold_mem.ablation.scores import Prediction, deviation  # noqa: E402
from alphafold_mem.geometry import residue_constants as rc  # noqa: E402
from alphafold_mem.metrics import rmsd  # noqa: E402

CA = rc.atom_order["CA"]


def compare(fp32_pdb: Path, bf16_pdb: Path) -> dict[str, float]:
    """Cα-RMSD (superposed and raw, Å) and mean/max |ΔpLDDT| between two predictions of one target
    (pLDDT is the B-factor column of the predicted PDB; the deviation is
    :func:`alphafold_mem.ablation.scores.deviation`, as in ``alphafold-mem ablate``)."""
    a, b = Prediction.from_pdb(fp32_pdb), Prediction.from_pdb(bf16_pdb)
    if len(a.plddt) != len(b.plddt):
        raise ValueError(f"{fp32_pdb} and {bf16_pdb} have different residue counts ({len(a.plddt)} vs {len(b.plddt)})")
    dev = deviation(b, a)
    x, y, mask = (torch.tensor(t, dtype=torch.float64)[:, CA] for t in (a.positions, b.positions, a.mask))
    return dict(
        n_res=len(a.plddt),
        rmsd=dev["ca_rmsd_to_reference"],
        rmsd_raw=rmsd(y, x, mask, superpose_first=False).item(),
        dplddt_mean=dev["plddt_mean_abs_diff"],
        dplddt_max=dev["plddt_max_abs_diff"],
    )


def run_all(inputs: str, msa_dir: str, out: Path, **kwargs) -> list:
    """Predict every record: with its MSA where ``msa_dir`` has one, single-sequence otherwise.
    Returns the :class:`~alphafold_mem.predict.TargetResult` list."""
    first = predict(inputs, out, msa_dir=msa_dir, **kwargs)
    no_msa = {r.name for r in first.results if r.status == "invalid" and "no alignment" in r.message}
    results = [r for r in first.results if r.name not in no_msa]
    if no_msa:
        files = [inputs] if Path(inputs).is_file() else sorted(Path(inputs).glob("*.fasta"))
        records = [rec for f in files for rec in SeqIO.parse(str(f), "fasta") if rec.id in no_msa]
        out.mkdir(parents=True, exist_ok=True)
        single = out / "single_sequence_inputs.fasta"
        SeqIO.write(records, str(single), "fasta")
        results += predict(str(single), out, single_sequence=True, **kwargs).results
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", default="data/fasta/per_entry", help="FASTA file or directory of FASTA files")
    ap.add_argument("--msa-dir", default="data/alignments")
    ap.add_argument("--weights", default=None, help="default: the shipped demo weights")
    ap.add_argument("--out", default="/tmp/bf16_check")
    ap.add_argument("--overwrite", action="store_true", help="re-run targets already predicted under --out")
    ap.add_argument("--max-rmsd", type=float, default=0.5)
    ap.add_argument("--max-dplddt", type=float, default=1.0)
    ap.add_argument("--precision", default="bf16", choices=("bf16", "bf16-full"), help="compared with fp32")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    runs = {}
    for precision in ("fp32", args.precision):
        runs[precision] = run_all(
            args.inputs,
            args.msa_dir,
            out / precision,
            weights=args.weights,
            memory_policy=AutoPolicy(precision=precision),
            device="cpu",
            overwrite=args.overwrite,
            track_memory=False,
            log=lambda line: None,
        )
    print("| target | N_res | Cα-RMSD Å (superposed) | Cα-RMSD Å (raw) | mean abs ΔpLDDT | max abs ΔpLDDT |")
    print("|---|---|---|---|---|---|")
    bad, rows = [], []
    for r32 in runs["fp32"]:
        rb = next((r for r in runs[args.precision] if r.name == r32.name), None)
        if r32.status in ("failed", "invalid") or rb is None or rb.status in ("failed", "invalid"):
            bad.append(f"{r32.name}: prediction failed")
            continue
        c = compare(out / "fp32" / r32.name / "ranked_0.pdb", out / args.precision / r32.name / "ranked_0.pdb")
        rows.append(c)
        print(
            f"| {r32.name} | {c['n_res']} | {c['rmsd']:.3f} | {c['rmsd_raw']:.3f} | {c['dplddt_mean']:.3f} | "
            f"{c['dplddt_max']:.3f} |",
            flush=True,
        )
        if c["rmsd"] > args.max_rmsd or c["dplddt_mean"] > args.max_dplddt:
            bad.append(f"{r32.name}: Cα-RMSD {c['rmsd']:.3f} Å, mean |ΔpLDDT| {c['dplddt_mean']:.3f}")
    if rows:
        print(
            f"\nworst Cα-RMSD {max(c['rmsd'] for c in rows):.3f} Å (limit {args.max_rmsd}), worst mean |ΔpLDDT| "
            f"{max(c['dplddt_mean'] for c in rows):.3f} (limit {args.max_dplddt}) over {len(rows)} targets; "
            f"median Cα-RMSD {statistics.median(c['rmsd'] for c in rows):.3f} Å, worst max |ΔpLDDT| "
            f"{max(c['dplddt_max'] for c in rows):.3f}"
        )
    for line in bad:
        print(f"over the limit or failed: {line}")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
