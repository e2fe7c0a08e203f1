"""Print the max |difference| per output between alphafold_mem and OpenFold's reference vectors.

Usage (from the repository root):
    python scripts/parity_report.py [--vectors tests/data/parity]
    python scripts/parity_report.py --vectors tests/data/parity_multimer

Runs the parity model (AF2-format params.npz; an AF2-Multimer file runs as ``model_1_multimer_v3``
and adds ipTM and the ranking confidence) on OpenFold's inputs with recycle_dim=-1 in fp32 (3
iterations and 1 iteration) and in fp64, and prints one table.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import torch

from alphafold_mem.model.alphafold import OPENFOLD_OUTPUT_NAMES
from alphafold_mem.weights import load_af2_params
from alphafold_mem.weights.af2_npz import PREFIX, is_multimer_keys

OUTPUTS = [
    "final_atom_positions",
    "sm_positions",
    "sm_angles",
    "plddt",
    "lddt_logits",
    "distogram_logits",
    "masked_msa_logits",
    "experimentally_resolved_logits",
    "single",
    "pair",
    "msa",
    "pae_logits",
    "predicted_aligned_error",
    "ptm",
]
MULTIMER_OUTPUTS = ["iptm", "ranking_confidence"]
#: OpenFold's names of the multimer's confidence outputs where they differ from ours
MULTIMER_NAMES = {"iptm": "iptm_score"}


def preset_of(vectors: pathlib.Path) -> str:
    """``model_1_multimer_v3`` for AF2-Multimer parameters, else ``model_1_ptm``."""
    with np.load(vectors / "params.npz") as npz:
        keys = [k.removeprefix(PREFIX) for k in npz.files]
    return "model_1_multimer_v3" if is_multimer_keys(keys) else "model_1_ptm"


def run(vectors: pathlib.Path, dtype: torch.dtype, iters: int | None):
    model = load_af2_params(vectors / "params.npz", preset=preset_of(vectors)).to(dtype)
    inp = {k: torch.from_numpy(v) for k, v in np.load(vectors / "inputs.npz").items()}
    if iters:
        inp = {k: v[..., :iters] for k, v in inp.items()}
    inp = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inp.items()}
    with torch.no_grad():
        return model(inp, recycle_dim=-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=pathlib.Path, default=pathlib.Path("tests/data/parity"))
    args = ap.parse_args()
    runs = {
        "fp32, 3 iterations": (run(args.vectors, torch.float32, None), "outputs.npz"),
        "fp32, 1 iteration": (run(args.vectors, torch.float32, 1), "outputs_iter1.npz"),
        "fp64, 3 iterations": (run(args.vectors, torch.float64, None), "outputs_fp64.npz"),
    }
    print("| output | max abs value | " + " | ".join(runs) + " |")
    print("|---|---|" + "---|" * len(runs))
    multimer = preset_of(args.vectors).endswith("multimer_v3")
    for name in OUTPUTS + (MULTIMER_OUTPUTS if multimer else []):
        ref_name = {**OPENFOLD_OUTPUT_NAMES, **MULTIMER_NAMES}.get(name, name)
        cells, maxval = [], 0.0
        for label, (out, ref_file) in runs.items():
            with np.load(args.vectors / ref_file) as npz:
                if ref_name not in npz.files:  # a set may leave the large logit tensors out
                    cells.append("—")
                    continue
                ref = npz[ref_name]
            maxval = max(maxval, float(np.abs(ref).max()))
            cells.append(f"{np.abs(out[name].double().numpy() - ref).max():.2e}")
        shown = name if ref_name == name else f"{name} ({ref_name})"
        print(f"| {shown} | {maxval:.2e} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
