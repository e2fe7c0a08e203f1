"""Complex-wide template features from per-entity templates (AF2-Multimer ``msa_pairing._pad_templates``,
``merge_chain_features``).

Templates are searched and built per entity (identical chains share them) and stay within a chain:
template slot ``t`` of the complex holds, in every chain's columns, that chain's ``t``-th template
(at most ``max_templates`` per chain, AF2's ``MAX_TEMPLATES`` 4), or all-zero padding (aatype 0,
positions 0, masks 0) where the chain has fewer. Every complex therefore has exactly
``max_templates`` slots; the multimer model averages over all of them, padding included.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..geometry import residue_constants as rc
from .complex import Complex

__all__ = ["MAX_TEMPLATES", "TEMPLATE_KEYS", "assemble_templates"]

#: Template slots per chain in AF2-Multimer (``feature_processing.MAX_TEMPLATES``).
MAX_TEMPLATES = 4
#: Per-residue template features assembled, with their trailing shapes.
TEMPLATE_KEYS = {
    "template_aatype": (),
    "template_all_atom_positions": (rc.atom_type_num, 3),
    "template_all_atom_mask": (rc.atom_type_num,),
}


def assemble_templates(
    cx: Complex, entity_templates: Mapping[int, Mapping[str, np.ndarray]], *, max_templates: int = MAX_TEMPLATES
) -> dict[str, np.ndarray]:
    """Put each entity's templates at the columns of every copy of it.

    Args:
        cx: the complex.
        entity_templates: ``entity_id`` -> ``template_aatype`` ``[T, L]``, ``template_all_atom_positions``
            ``[T, L, 37, 3]``, ``template_all_atom_mask`` ``[T, L, 37]`` (numpy arrays or CPU tensors,
            e.g. from :func:`~.features.templates.make_template_features`), ``L`` the entity's length; a
            missing entity has no templates. The first ``max_templates`` are used.
        max_templates: slots per chain.

    Returns:
        ``template_aatype`` ``[max_templates, N_res]`` int64, ``template_all_atom_positions``
        ``[max_templates, N_res, 37, 3]`` float32, ``template_all_atom_mask`` ``[max_templates, N_res, 37]``
        float32, and ``template_mask`` ``[max_templates]`` (1 where any chain has a template; the
        multimer model does not read it).

    Raises:
        ValueError: a feature missing or of the wrong shape for its entity (naming the entity).
    """
    n_res = cx.num_res
    out = {
        key: np.zeros((max_templates, n_res) + tail, np.int64 if key == "template_aatype" else np.float32)
        for key, tail in TEMPLATE_KEYS.items()
    }
    used = np.zeros(max_templates, np.float32)
    for chain, offset in zip(cx.chains, cx.offsets):
        feats = entity_templates.get(chain.entity_id)
        if feats is None:
            continue
        count = None
        for key, tail in TEMPLATE_KEYS.items():
            if key not in feats:
                raise ValueError(f"templates of entity {chain.entity_id} lack {key}")
            value = np.asarray(feats[key])
            if value.ndim != 2 + len(tail) or value.shape[1:] != (len(chain),) + tail:
                raise ValueError(
                    f"{key} of entity {chain.entity_id} has shape {tuple(value.shape)}, "
                    f"expected [T, {len(chain)}{''.join(', ' + str(t) for t in tail)}]"
                )
            if count is not None and value.shape[0] != count:
                raise ValueError(f"template features of entity {chain.entity_id} differ in their number of templates")
            count = value.shape[0]
            k = min(count, max_templates)
            out[key][:k, offset : offset + len(chain)] = value[:k]
        used[: min(count, max_templates)] = 1.0
    out["template_mask"] = used
    return out
