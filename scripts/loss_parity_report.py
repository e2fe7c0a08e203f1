"""Every AF2 training-loss term, OpenFold's value beside ours, from the same batch and model outputs.

Usage (from the repository root):
    python scripts/loss_parity_report.py --vectors tests/data/parity_loss [--json] [--end-to-end]
        [--structure data/mmcif/2q2k.cif]

``--vectors`` is any directory laid out like ``../shared/parity_loss/`` (``batch.npz``,
``outputs.npz``, ``losses.json``, ``config.json``; README there). Prints ``term | OpenFold | ours |
|Δ| | |Δ| / |OpenFold|``; with ``--json`` one object ``{term: {"openfold": x, "ours": y,
"abs_diff": d}}`` instead. Ours are computed by :class:`alphafold_mem.losses.AlphaFoldLoss` (fp32)
from ``batch.npz[..., -1]`` and OpenFold's ``outputs.npz``.

A multimer set (``../shared/parity_loss_multimer/``: it also holds ``gt.npz`` with the whole
complex and ``permutation.json``) is recognised by its ``permutation.json``: our permutation
alignment (:mod:`alphafold_mem.losses.permutation`) chooses the assignment from ``gt.npz``
``full.*``, then the terms are compared as above, with a column for the difference that the
departures from OpenFold stated in :mod:`alphafold_mem.losses.parity_multimer` imply (``--json``:
``documented_diff`` per term, and ``align``: OpenFold's and our assignment); ``--end-to-end`` runs our
multimer model from ``params.npz`` first.

Also printed for a monomer set (not with ``--json``): where the directory has ``gt.npz`` (OpenFold's ground truth for
the whole chain), the same features made by our own featurisation of the chain's mmCIF
(``config.json`` names it; ``--structure`` overrides), max |Δ| per feature; with ``--end-to-end``
and ``params.npz``, the terms when OUR model makes the outputs from OpenFold's batch (all recycling
slices, eval mode: the vectors were made without dropout).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
import torch

from alphafold_mem.losses import AlphaFoldLoss
from alphafold_mem.losses.parity import load_loss_vectors, loss_parity, loss_setup
from alphafold_mem.losses.parity_multimer import is_multimer_vectors, multimer_end_to_end, multimer_loss_parity

ROOT = pathlib.Path(__file__).resolve().parents[1]


def structure_path(vectors: pathlib.Path, config: dict) -> pathlib.Path | None:
    """The mmCIF that ``config.json`` names (``mmcif``, e.g. ``shared/data/mmcif/2q2k.cif``): looked up
    beside the vectors' parent directories, then under this repository's ``data/mmcif``."""
    name = config.get("mmcif")
    if not name:
        return None
    rel = pathlib.Path(name)
    for base in (vectors.resolve().parent.parent, vectors.resolve().parent, ROOT / "data" / "mmcif"):
        for cand in (base / rel, base / rel.name):
            if cand.is_file():
                return cand
    return None


def featurisation_diff(vectors: pathlib.Path, structure: pathlib.Path, chain_id: str) -> dict[str, dict]:
    """Our features of the whole chain (``make_features(mode="eval")`` plus torsions) vs ``gt.npz``:
    ``{key: {"max_abs_diff": d, "max_abs_value": m}}`` for every key both have."""
    from alphafold_mem.config import model_config
    from alphafold_mem.data.features import make_features
    from alphafold_mem.data.structure_io import read_structure
    from alphafold_mem.geometry import all_atom

    chain = read_structure(structure).chain(chain_id)
    ours = make_features(
        chain, None, model_config("model_1", **{"template.enabled": False}), structure=chain, mode="eval"
    )
    ours.update(all_atom.atom37_to_torsion_angles(ours["aatype"], ours["all_atom_positions"], ours["all_atom_mask"]))
    out = {}
    with np.load(vectors / "gt.npz") as gt:
        for key in gt.files:
            if key not in ours or gt[key].dtype.kind not in "fiu":
                continue
            a, b = ours[key].double().numpy(), gt[key].astype(np.float64)
            if a.shape != b.shape:
                out[key] = {"shape": [list(a.shape), list(b.shape)]}
                continue
            out[key] = {
                "max_abs_diff": float(np.abs(a - b).max()) if a.size else 0.0,
                "max_abs_value": float(np.abs(b).max()) if b.size else 0.0,
            }
    return out


def end_to_end(vectors: pathlib.Path) -> dict[str, dict[str, float]]:
    """Our model (``params.npz``) on OpenFold's batch, then our loss: ``{term: {"openfold_outputs":
    x, "our_outputs": y}}`` (unweighted terms under our names)."""
    from alphafold_mem.weights import load_af2_params

    v = load_loss_vectors(vectors)
    cfg, const = loss_setup(v.reference, v.config.get("preset", "model_1_ptm"))
    loss_fn = AlphaFoldLoss(cfg.loss, cfg.heads, const)
    model = load_af2_params(vectors / "params.npz").eval()
    with torch.no_grad():
        out = model(v.batch_all, recycle_dim=-1)
        _, ours = loss_fn(out, v.batch)
        _, ref = loss_fn(v.outputs, v.batch)
    return {k: {"openfold_outputs": float(ref[k]), "our_outputs": float(ours[k])} for k in ref}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=pathlib.Path, default=ROOT / "tests" / "data" / "parity_loss")
    ap.add_argument("--json", action="store_true", help="print one JSON object {term: {openfold, ours, abs_diff}}")
    ap.add_argument("--structure", type=pathlib.Path, help="the chain's mmCIF (default: the one config.json names)")
    ap.add_argument("--end-to-end", action="store_true", help="also run our model from params.npz")
    args = ap.parse_args(argv)
    if is_multimer_vectors(args.vectors):
        return _multimer(args)
    try:
        rows = loss_parity(args.vectors)
    except FileNotFoundError as exc:
        print(f"loss_parity_report: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"# loss terms, fp32, from {args.vectors}/batch.npz[..., -1] and outputs.npz")
    print("| term | OpenFold | ours | abs diff | rel diff |")
    print("|---|---|---|---|---|")
    for k, r in rows.items():
        rel = r["abs_diff"] / abs(r["openfold"]) if r["openfold"] else 0.0
        print(f"| {k} | {r['openfold']:.9g} | {r['ours']:.9g} | {r['abs_diff']:.2e} | {rel:.2e} |")
    config = json.loads((args.vectors / "config.json").read_text())
    structure = args.structure or structure_path(args.vectors, config)
    if (args.vectors / "gt.npz").is_file() and structure is not None:
        print(
            f"\n# our featurisation of {structure.name} chain {config.get('chain', 'A')} vs OpenFold's gt.npz "
            f"(whole chain)"
        )
        print("| feature | max abs diff | max abs value |")
        print("|---|---|---|")
        for k, r in featurisation_diff(args.vectors, structure, config.get("chain", "A")).items():
            cells = (
                (f"shapes {r['shape']}", "")
                if "shape" in r
                else (f"{r['max_abs_diff']:.2e}", f"{r['max_abs_value']:.3g}")
            )
            print(f"| {k} | {cells[0]} | {cells[1]} |")
    if args.end_to_end and (args.vectors / "params.npz").is_file():
        print("\n# our model (params.npz, all recycling slices) then our loss, vs our loss on OpenFold's outputs")
        print("| term | on OpenFold's outputs | on our outputs | rel diff |")
        print("|---|---|---|---|")
        for k, r in end_to_end(args.vectors).items():
            a, b = r["openfold_outputs"], r["our_outputs"]
            print(f"| {k} | {a:.9g} | {b:.9g} | {abs(a - b) / abs(a) if a else 0.0:.2e} |")
    return 0


def _multimer(args: argparse.Namespace) -> int:
    try:
        rows = multimer_loss_parity(args.vectors)
    except (FileNotFoundError, ValueError) as exc:
        print(f"loss_parity_report: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    align = rows.pop("align")
    print(f"# multimer: chain assignment [prediction chain, ground-truth chain] (0-based), from {args.vectors}")
    print(f"OpenFold: {align['openfold']}  ours: {align['ours']}  same: {align['openfold'] == align['ours']}")
    print(f"\n# loss terms, fp32, from {args.vectors}/batch.npz[..., -1], outputs.npz and gt.npz full.*")
    print("| term | OpenFold | ours | abs diff | rel diff | stated departure | rel diff beyond it |")
    print("|---|---|---|---|---|---|---|")
    for k, r in rows.items():
        of, ours, doc = r["openfold"], r["ours"], r["documented_diff"]
        rel = abs(ours - of) / abs(of) if of else 0.0
        rest = abs(ours - of - doc) / abs(of) if of else 0.0
        print(f"| {k} | {of:.9g} | {ours:.9g} | {r['abs_diff']:.2e} | {rel:.2e} | {doc:+.6g} | {rest:.2e} |")
    if args.end_to_end and (args.vectors / "params.npz").is_file():
        e2e = multimer_end_to_end(args.vectors)
        align = e2e.pop("align")
        print("\n# our model (params.npz, all recycling slices), our alignment and loss, vs on OpenFold's outputs")
        print(
            f"assignment: OpenFold {align['openfold']}, ours on OpenFold's outputs {align['on_openfold_outputs']}, "
            f"ours on our outputs {align['on_our_outputs']}"
        )
        print("| term | on OpenFold's outputs | on our outputs | rel diff |")
        print("|---|---|---|---|")
        for k, r in e2e.items():
            a, b = r["ours_on_openfold_outputs"], r["ours_on_our_outputs"]
            print(f"| {k} | {a:.9g} | {b:.9g} | {abs(a - b) / abs(a) if a else 0.0:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
