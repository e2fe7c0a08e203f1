"""The AF2-Multimer model inputs of one complex: the processed complex features
(:func:`alphafold_mem.data.multimer_features.complex_msa_features`) sampled into the batch that
:class:`alphafold_mem.AlphaFold` reads under a multimer config (:class:`alphafold_mem.model.features.MultimerFeatures`).

Steps (AF2-Multimer ``modules_multimer``: ``sample_msa``, ``make_masked_msa``,
``nearest_neighbor_clusters``, ``create_msa_feat``, ``create_extra_msa_feature``):

1. cluster centres: the query row first, then the other rows in random order, ``max_msa_clusters``
   of them; the rest (at most ``max_extra_msa``) is the extra MSA;
2. BERT masking of the centres, only where ``bert_mask`` is 1 (the diagonal chain blocks);
3. every extra row joins the centre it agrees with most; cluster profiles and mean deletions;
4. ``msa_feat [N_clust, N_res, 49]``, ``target_feat = one_hot(aatype, 21)``, ``extra_msa``,
   ``extra_msa_mask``, ``extra_deletion_matrix`` (raw counts), the chain features, and the
   templates: ``processed``'s ``template_*`` (per chain, :mod:`.complex_templates`) fitted to the
   config's slots, or every slot zero padding when the complex has none.

Monomer weights (ColabFold's route for AF2 ``_ptm`` models): the same MSA, AF2's monomer inputs
(``target_feat`` of 22 channels, ``extra_has_deletion`` / ``extra_deletion_value``), and
``residue_index`` numbered through the complex with a gap of :data:`CHAIN_GAP` residues before every
chain after the first, so that the relative position encoding sees the chains as far apart, and empty
templates (the monomer template stack would join templates of different chains).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from ..data.complex import Complex
from ..data.features.msa import cluster_features, make_hhblits_profile, sample_msa
from ..data.features.templates import empty_template_features
from ..data.multimer_templates import TEMPLATE_KEYS, assemble_templates
from ..geometry import all_atom

__all__ = ["CHAIN_GAP", "complex_batch"]

#: Residue-index gap between chains for monomer weights (ColabFold: 200).
CHAIN_GAP = 200

#: The batch's MSA features of :func:`~alphafold_mem.data.features.msa.cluster_features`.
_MSA_KEYS = ("msa_feat", "msa_mask", "extra_msa", "extra_msa_mask", "extra_deletion_matrix")


def complex_batch(cx: Complex, processed: Mapping[str, np.ndarray], config, seed: int = 0) -> dict[str, Tensor]:
    """The model batch (no batch dim) of complex ``cx`` from its processed features.

    Args:
        cx: the complex the features were made from.
        processed: :func:`~alphafold_mem.data.multimer_features.make_multimer_msa_features` output
            (``msa``, ``deletion_matrix``, ``bert_mask`` ``[N_seq, N_res]``, ``aatype``,
            ``residue_index``, ``asym_id``, ``entity_id``, ``sym_id`` ``[N_res]``...), optionally
            with ``template_aatype [T, N_res]``, ``template_all_atom_positions [T, N_res, 37, 3]``,
            ``template_all_atom_mask [T, N_res, 37]`` (:func:`~.complex_templates.complex_templates`).
        config: a multimer :class:`~alphafold_mem.config.ModelConfig` (``config.data`` sizes and
            masking fractions, ``config.template``).
        seed: seed of the cluster sampling and masking.

    Returns:
        ``dict[str, Tensor]`` with every key of ``MultimerFeatures.required`` (and the template
        keys when the config enables templates).
    """
    rng = np.random.default_rng(seed)
    data = config.data
    tokens = np.asarray(processed["msa"], np.int64)
    deletions = np.asarray(processed["deletion_matrix"], np.float32)
    profile = make_hhblits_profile(tokens)
    centres, rest = sample_msa(tokens.shape[0], data.max_msa_clusters, rng)
    allowed = np.asarray(processed["bert_mask"], np.float32)[centres]  # AF2-Multimer masks only the chains' blocks
    c = cluster_features(tokens, deletions, profile, centres, rest, data.max_extra_msa, rng, data, allowed)
    aatype = torch.from_numpy(np.asarray(processed["aatype"], np.int64))
    out: dict[str, Tensor] = {
        "aatype": aatype,
        "residue_index": torch.from_numpy(np.asarray(processed["residue_index"], np.int64)),
        "asym_id": torch.from_numpy(np.asarray(processed["asym_id"], np.int64)),
        "entity_id": torch.from_numpy(np.asarray(processed["entity_id"], np.int64)),
        "sym_id": torch.from_numpy(np.asarray(processed["sym_id"], np.int64)),
        "seq_mask": torch.ones(aatype.shape[0], dtype=torch.float32),
        "target_feat": torch.nn.functional.one_hot(aatype, 21).float(),
        **{k: torch.from_numpy(np.ascontiguousarray(c[k])) for k in _MSA_KEYS},
    }
    out.update(all_atom.make_atom14_masks(aatype))
    if not config.multimer:
        return _monomer_inputs(out, processed, c, config)
    if config.template.enabled:
        templates = _template_slots(cx, processed, config.template.max_templates)
        out.update({k: torch.from_numpy(v) for k, v in templates.items()})
    return out


def _template_slots(cx: Complex, processed: Mapping[str, np.ndarray], slots: int) -> dict[str, np.ndarray]:
    """``processed``'s template features cut or zero-padded to ``slots`` templates (all padding when
    it has none)."""
    empty = assemble_templates(cx, {}, max_templates=slots)
    if "template_aatype" not in processed:
        return empty
    for key in TEMPLATE_KEYS:
        value = np.asarray(processed[key])[:slots]
        empty[key][: value.shape[0]] = value
    mask = np.asarray(processed.get("template_mask", np.ones(len(processed["template_aatype"]))), np.float32)
    empty["template_mask"][: min(slots, mask.shape[0])] = mask[:slots]
    return empty


def _monomer_inputs(out: dict, processed: Mapping[str, np.ndarray], msa: Mapping[str, np.ndarray], config) -> dict:
    """The batch for monomer weights: 22-channel ``target_feat``, the extra-MSA deletion features,
    ``residue_index`` through the complex with :data:`CHAIN_GAP` between chains, empty templates.
    ``msa``: the :func:`~alphafold_mem.data.features.msa.cluster_features` of the batch."""
    aatype = out["aatype"]
    asym = np.asarray(processed["asym_id"], np.int64)
    out["residue_index"] = torch.from_numpy(np.arange(len(asym), dtype=np.int64) + CHAIN_GAP * (asym - asym.min()))
    out["target_feat"] = torch.cat(
        [torch.zeros(aatype.shape[0], 1), torch.nn.functional.one_hot(aatype, 21).float()], dim=-1
    )
    out["extra_has_deletion"] = torch.from_numpy(msa["extra_has_deletion"])
    out["extra_deletion_value"] = torch.from_numpy(msa["extra_deletion_value"])
    if config.template.enabled:
        out.update(empty_template_features(aatype.shape[0]))
    return out
