"""Where ``predict`` writes: one layout for one model and for an ensemble (AF2's).

Every target ``<id>`` gets a folder ``<out>/<id>/`` holding:

* ``<prediction>.pdb`` / ``.cif`` / ``_scores.json`` / ``_plddt.png`` (and ``_pae.json``, ``_pae.png``
  with a PAE head, ``_relaxed.pdb`` after ``--relax``): one prediction, named
  ``<model>_seed_<s>`` (:func:`prediction_name`; the model is AF2's ``model_1_ptm`` or the weights
  file's stem, ``demo`` for the demo weights);
* ``ranked_<r>.pdb`` / ``.cif`` (``ranked_<r>_relaxed.pdb``): the predictions best first, ``ranked_0``
  the best (a single model: its one prediction);
* ``ranking_debug.json``: ``{"plddts": {prediction: mean pLDDT}, "order": [predictions best first]}``;
* ``<id>_scores.json``: every prediction with its rank; ``<id>_plddt.png``: their pLDDT on one plot
  (:func:`alphafold_mem.predict.ranking.rank_predictions`).

``<out>/timings.json`` holds the run's seconds and memory per stage of every target.
"""

from __future__ import annotations

import os

from ..weights.directory import model_name_of

__all__ = ["default_output_name", "prediction_name", "prediction_path", "ranked_path", "target_dir", "where_line"]


def prediction_name(model: str, seed: int) -> str:
    """The base name of one prediction of a target: ``<model>_seed_<seed>`` (``model_1_ptm_seed_0``)."""
    return f"{model}_seed_{seed}"


def default_output_name(weights, seed: int) -> str:
    """The outputs' base name of a single-model run, relative to ``out_dir`` with ``{id}`` for the
    target name: ``{id}/<model of weights>_seed_<seed>`` (an ensemble of one)."""
    return "{id}/" + prediction_name(model_name_of(weights), seed)


def target_dir(out_dir, name: str) -> str:
    """The folder of target ``name``'s files: ``<out_dir>/<name>``."""
    return os.path.join(os.fspath(out_dir), name)


def ranked_path(out_dir, name: str, rank: int = 0, suffix: str = ".pdb") -> str:
    """``<out_dir>/<name>/ranked_<rank><suffix>`` (``suffix``: ``.pdb``, ``.cif``, ``_relaxed.pdb``)."""
    return os.path.join(target_dir(out_dir, name), f"ranked_{rank}{suffix}")


def prediction_path(out_dir, name: str, weights, seed: int = 0, suffix: str = ".pdb") -> str:
    """The file ``suffix`` (``.pdb``, ``_scores.json``, ``_pae.json``...) of the prediction of target
    ``name`` with the weights file ``weights`` and ``seed``: ``<out_dir>/<name>/<model>_seed_<seed><suffix>``."""
    return os.path.join(target_dir(out_dir, name), prediction_name(model_name_of(weights), seed) + suffix)


def where_line(out_dir) -> str:
    """The line a run ends with, saying where its files are."""
    folder = target_dir(out_dir, "<id>")
    return (
        f"files: {os.path.join(folder, 'ranked_0.pdb')} is the best structure of each target; "
        f"{folder}/ holds the rest (ranking_debug.json, <model>_seed_<s>.* per prediction)"
    )
