"""The demo weights' lDDT-Cα and Cα-RMSD tables of the README, from the record written when they were
trained (``data/demo_weights/results.json``: untrained, stage 1, stage 2 on the training and held-out
chains), the weights file's size and parameter count, the stage-1 steps and minutes, and, with
``--measure``, the shipped weights measured again now on the same chains.

The training record holds figures measured once, at training time (``scripts/train_demo.py`` and
``scripts/finetune_demo.py`` wrote them); ``--measure`` re-runs the shipped weights (a few seconds per
chain on CPU) and prints them beside the recorded stage-2 column, so the record can be checked::

    python scripts/demo_weights_report.py
    python scripts/demo_weights_report.py --measure --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _names(per_chain: dict) -> str:
    return ", ".join(sorted(k.split("_")[0].upper() for k in per_chain))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "data" / "demo_weights" / "results.json"))
    ap.add_argument("--measure", action="store_true", help="also evaluate the shipped weights now")
    ap.add_argument("--data", default=str(ROOT / "data"), help="structures + alignments (layout of data/)")
    args = ap.parse_args(argv)
    rec = json.loads(pathlib.Path(args.results).read_text())
    before, stage1, stage2 = rec["lddt_ca_before"], rec["lddt_ca_after"], rec["finetune"]["lddt_ca_after"]
    measured = _measure(args.data, rec) if args.measure else None
    for metric, label, fmt in (("lddt_ca", "lDDT-Cα", ".3f"), ("ca_rmsd", "Cα-RMSD (Å)", ".1f")):
        print(
            f"| {label} (full chains, EMA weights) | untrained | stage 1, step {rec['weights_step']} | "
            f"shipped: stage 2 |" + ("" if measured is None else " shipped, measured now |")
        )
        print("|---" * (5 if measured else 4) + "|")
        for split, name in (("train", "training chains"), ("held_out", "held-out chains (never seen in training)")):
            chains = stage2[split]["per_chain"]
            row = (
                f"| {len(chains)} {name} ({_names(chains)}) | {before[split][metric]:{fmt}} | "
                f"{stage1[split][metric]:{fmt}} | {stage2[split][metric]:{fmt}} |"
            )
            if measured is not None:
                row += f" {measured[split][metric]:{fmt}} |"
            print(row)
        print()
    size = (ROOT / rec["weights"]).stat().st_size
    print(
        f"# weights: {rec['weights']}, {size:,} bytes ({size / 1e6:.1f} MB), "
        f"{_parameters(rec['preset']):,} parameters (preset {rec['preset']})"
    )
    print(
        f"# stage 1: {rec['steps_run']} steps in {rec['train_minutes']:.1f} min ({rec['threads']} thread(s)), "
        f"weights from step {rec['weights_step']}"
    )
    print(f"\n# record: {args.results} ({rec['note']})")
    return 0


def _parameters(preset: str) -> int:
    """Parameters of a model of ``preset`` (built on the meta device: nothing allocated)."""
    import torch

    from alphafold_mem import AlphaFold, model_config

    with torch.device("meta"):
        return sum(p.numel() for p in AlphaFold(model_config(preset)).parameters())


def _measure(data_dir: str, rec: dict) -> dict[str, dict[str, float]]:
    """lDDT-Cα and Cα-RMSD of the shipped weights on the record's training and held-out chains."""
    import tempfile

    from alphafold_mem.data import ChainIndex, ProteinChainDataset, build_chain_index
    from alphafold_mem.train import evaluate_lddt, load_model

    model = load_model(ROOT / rec["weights"])
    data = pathlib.Path(data_dir)
    structures = [p for p in (data / "mmcif", data / "pdb") if p.is_dir()]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        index = build_chain_index(structures, data / "alignments", pathlib.Path(tmp) / "index.json")
        for split in ("train", "held_out"):
            wanted = set(rec["finetune"]["lddt_ca_after"][split]["per_chain"])
            sub = ChainIndex(entries=[e for e in index.entries if e["name"] in wanted], root=index.root)
            out[split] = evaluate_lddt(model, ProteinChainDataset(sub, model.config, mode="eval"))
    return out


if __name__ == "__main__":
    sys.exit(main())
