"""The files of one predicted complex (layout: :mod:`.complex_run`): one prediction's files
(:func:`write_prediction`), its Amber relaxation with ``--relax`` (:func:`relax_prediction`), and the
ranking of a complex's predictions by AF2-Multimer's ranking confidence, ``0.8 * ipTM + 0.2 * pTM``
(:func:`rank_complex`)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Callable

import numpy as np

from ..io import atomic_write
from ..version import __version__
from .complex_features import CHAIN_GAP
from .complex_target import ComplexTarget
from .outputs.complex_files import pdb_chain_ids_fit, write_complex_modelcif, write_complex_pdb
from .outputs.complex_plots import plot_complex_pae, plot_complex_plddt
from .outputs.scores import pae_json, write_json

__all__ = [
    "RANKING_KEY",
    "chain_plddts",
    "ranking_confidence",
    "rank_complex",
    "relax_prediction",
    "relax_predictions",
    "write_prediction",
]

#: ``ranking_debug.json``'s score key in AF2-Multimer.
RANKING_KEY = "iptm+ptm"


def ranking_confidence(iptm: float, ptm: float) -> float:
    """AF2-Multimer's ranking confidence ``0.8 * ipTM + 0.2 * pTM``."""
    return 0.8 * float(iptm) + 0.2 * float(ptm)


def chain_plddts(t: ComplexTarget, plddt: np.ndarray) -> dict[str, float]:
    """Mean pLDDT (0-100) of every chain, by chain id."""
    return {c.chain_id: round(float(np.mean(plddt[o : o + len(c)])), 2) for c, o in zip(t.cx.chains, t.cx.offsets)}


def _chains_record(t: ComplexTarget) -> list[dict]:
    return [
        {
            "chain_id": c.chain_id,
            "length": len(c),
            "entity_id": c.entity_id,
            "sym_id": c.sym_id,
            "asym_id": c.asym_id,
            "record": c.record,
            "sequence": c.sequence,
        }
        for c in t.cx.chains
    ]


def write_prediction(
    target_dir: str, tag: str, t: ComplexTarget, arrays: dict, *, member, seed: int, config, templates=None
) -> dict:
    """Write ``<tag>.pdb`` (when the chain ids fit), ``<tag>.cif``, ``<tag>_scores.json`` and
    ``<tag>_pae.json`` of one prediction into ``target_dir``; returns the scores record.

    Args:
        arrays: the model's outputs as numpy arrays (``final_atom_positions [N_res, 37, 3]``,
            ``final_atom_mask``, ``plddt [N_res]``, ``ptm``, ``iptm``, ``chain_pair_iptm [C, C]``,
            ``predicted_aligned_error [N_res, N_res]``, ``max_predicted_aligned_error``, ``num_recycles``).
        member: the :class:`~alphafold_mem.weights.directory.ModelWeights` that made it.
        seed: its seed; config: the model config it ran with.
        templates: the scores' ``templates`` entry (:func:`~.complex_templates.template_scores`), if any.
    """
    os.makedirs(target_dir, exist_ok=True)
    plddt = np.asarray(arrays["plddt"], np.float64)
    ptm, iptm = round(float(arrays["ptm"]), 4), round(float(arrays["iptm"]), 4)  # ranked as written
    scores = {
        "id": t.name,
        "name": tag,
        "source": t.source,
        "chains": _chains_record(t),
        "length": t.cx.num_res,
        "weights": os.path.basename(member.path),
        "model": tag.rsplit("_pred_", 1)[0],
        "preset": config.preset,
        "route": "multimer" if config.multimer else "monomer_chain_gap",
        "chain_gap": None if config.multimer else CHAIN_GAP,
        "seed": seed,
        "ptm": ptm,
        "iptm": iptm,
        "ranking_confidence": round(ranking_confidence(iptm, ptm), 6),
        "mean_plddt": round(float(plddt.mean()), 2),
        "chain_plddt": chain_plddts(t, plddt),
        "chain_pair_iptm": np.round(np.asarray(arrays["chain_pair_iptm"], np.float64), 4).tolist(),
        "max_predicted_aligned_error": round(float(arrays["max_predicted_aligned_error"]), 2),
        "num_recycles": config.num_recycles,
        "recycles_run": int(arrays["num_recycles"]) - 1,
        "recycle_early_stop_tolerance": config.recycle_early_stop_tolerance,
        "plddt": [round(float(x), 2) for x in plddt],
    }
    if templates is not None:
        scores["templates"] = templates
    pos, mask = arrays["final_atom_positions"], arrays["final_atom_mask"]
    route = "AF2-Multimer" if config.multimer else f"monomer weights, residue-index gap {CHAIN_GAP} between chains"
    method = f"{route}, weights {os.path.basename(member.path)} (preset {config.preset}); seed {seed}"
    if pdb_chain_ids_fit(t.cx):
        write_complex_pdb(os.path.join(target_dir, f"{tag}.pdb"), t.cx, pos, mask, plddt, remarks=[method])
    write_complex_modelcif(
        os.path.join(target_dir, f"{tag}.cif"),
        t.cx,
        pos,
        mask,
        plddt,
        ptm=ptm,
        iptm=iptm,
        software_version=__version__,
        method_details=method,
    )
    write_json(
        os.path.join(target_dir, f"{tag}_pae.json"),
        pae_json(arrays["predicted_aligned_error"], float(arrays["max_predicted_aligned_error"])),
        indent=None,
    )
    write_json(os.path.join(target_dir, f"{tag}_scores.json"), scores, flat=True)
    return scores


def relax_prediction(target_dir: str, tag: str, pipeline, log: Callable[[str], None]) -> None:
    """Relax prediction ``tag`` of a complex as a monomer's (:meth:`~.stages.PipelineOptions.relax_target`,
    AF2's protocol): ``<tag>.pdb`` -> ``<tag>_relaxed.pdb`` with every chain its own (its id and
    residue numbers kept; the chain ends are termini, no bond joins two chains), the ``relax`` record
    in ``<tag>_scores.json``, one ``relax:`` line. A complex whose chain ids do not fit the PDB format
    has no ``<tag>.pdb``: one ``note:`` line, nothing relaxed."""
    pdb = os.path.join(target_dir, f"{tag}.pdb")
    if not os.path.exists(pdb):
        log(f"note: relax: {tag}: chain ids too long for the PDB format: not relaxed (the relaxed model is a PDB)")
        return
    outputs = {"pdb": pdb, "scores": os.path.join(target_dir, f"{tag}_scores.json")}
    dataclasses.replace(pipeline, log=log).relax_target(outputs, tag)


def relax_predictions(target_dir: str, tags: list[str], pipeline, log: Callable[[str], None]) -> None:
    """With ``pipeline.relax``: :func:`relax_prediction` of every prediction ``tags`` of one complex,
    once all its forwards ran (before ranking; under DAP the other ranks then wait in no collective
    while rank 0 relaxes). Without it nothing."""
    if pipeline is not None and pipeline.relax:
        for tag in tags:
            relax_prediction(target_dir, tag, pipeline, log)


def _copy(source: str, dest: str) -> None:
    with atomic_write(dest) as tmp:
        shutil.copyfile(source, tmp)


def rank_complex(target_dir: str, t: ComplexTarget, tags: list[str]) -> list[str]:
    """Rank the predictions ``tags`` of complex ``t`` (their ``<tag>_scores.json``) by
    ``ranking_confidence`` (0.8 * ipTM + 0.2 * pTM), best first, ties in the order given; write
    ``ranked_<r>.pdb``/``.cif`` (and ``ranked_<r>_relaxed.pdb`` of a relaxed prediction),
    ``ranking_debug.json``, ``<id>_scores.json``, ``<id>_pae.json``, and ``<id>_pae.png`` /
    ``<id>_plddt.png`` (the best prediction's, with chain boundaries / by chain) and remove ranked
    files of a larger earlier run. Returns the tags best first.

    Raises:
        OSError: a file could not be read or written.
    """
    scores = {}
    for tag in tags:
        with open(os.path.join(target_dir, f"{tag}_scores.json")) as fh:
            scores[tag] = json.load(fh)
    confidence = {tag: ranking_confidence(scores[tag]["iptm"], scores[tag]["ptm"]) for tag in tags}
    order = sorted(tags, key=lambda tag: -confidence[tag])
    for r, tag in enumerate(order):
        for suffix in (".pdb", ".cif", "_relaxed.pdb"):
            source = os.path.join(target_dir, tag + suffix)
            ranked = os.path.join(target_dir, f"ranked_{r}{suffix}")
            if os.path.exists(source):
                _copy(source, ranked)
            elif os.path.exists(ranked):
                os.remove(ranked)
    for entry in os.listdir(target_dir):  # ranks left from an earlier, larger run
        stem = entry.split(".")[0].removesuffix("_relaxed")
        if stem.startswith("ranked_") and stem[7:].isdigit() and int(stem[7:]) >= len(order):
            os.remove(os.path.join(target_dir, entry))
    write_json(
        os.path.join(target_dir, "ranking_debug.json"),
        {RANKING_KEY: {tag: round(confidence[tag], 6) for tag in tags}, "order": order},
        indent=4,
    )
    best = scores[order[0]]
    listing = [
        {
            "rank": r,
            "name": tag,
            "model": scores[tag]["model"],
            "seed": scores[tag]["seed"],
            "weights": scores[tag]["weights"],
            "ptm": scores[tag]["ptm"],
            "iptm": scores[tag]["iptm"],
            "ranking_confidence": round(confidence[tag], 6),
            "mean_plddt": scores[tag]["mean_plddt"],
            "recycles_run": scores[tag]["recycles_run"],
            "ranked_pdb": f"ranked_{r}.pdb" if os.path.exists(os.path.join(target_dir, f"{tag}.pdb")) else None,
            "ranked_cif": f"ranked_{r}.cif",
            "ranked_relaxed_pdb": (
                f"ranked_{r}_relaxed.pdb" if os.path.exists(os.path.join(target_dir, f"{tag}_relaxed.pdb")) else None
            ),
        }
        for r, tag in enumerate(order)
    ]
    write_json(
        os.path.join(target_dir, f"{t.name}_scores.json"),
        {
            "id": t.name,
            "source": t.source,
            "chains": best["chains"],
            "length": best["length"],
            "best": order[0],
            "route": best.get("route"),
            "ptm": best["ptm"],
            "iptm": best["iptm"],
            "ranking_confidence": round(confidence[order[0]], 6),
            "mean_plddt": best["mean_plddt"],
            "chain_plddt": best["chain_plddt"],
            "chain_pair_iptm": best["chain_pair_iptm"],
            "templates": best.get("templates"),
            "rank_by": "0.8*iptm+0.2*ptm",
            "order": order,
            "predictions": listing,
        },
    )
    _copy(os.path.join(target_dir, f"{order[0]}_pae.json"), os.path.join(target_dir, f"{t.name}_pae.json"))
    chains = [(c.chain_id, len(c)) for c in t.cx.chains]
    with open(os.path.join(target_dir, f"{order[0]}_pae.json")) as fh:
        pae = json.load(fh)[0]
    title = f"{t.name} {order[0]}"
    plot_complex_pae(
        os.path.join(target_dir, f"{t.name}_pae.png"),
        pae["predicted_aligned_error"],
        chains,
        pae["max_predicted_aligned_error"],
        title=title,
    )
    plot_complex_plddt(os.path.join(target_dir, f"{t.name}_plddt.png"), best["plddt"], chains, title=title)
    return order
