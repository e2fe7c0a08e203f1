"""Value checks of model inputs before the forward pass (predict and training): every floating
feature finite, masks 0 or 1, integer tokens and fractions within the ranges of the feature table
(:mod:`.spec`). A NaN template coordinate or an ``aatype`` of 23 must never reach the model: the
check names the feature, the target or sample, and the first bad position in the feature's own
terms (template, MSA row, residue, atom, xyz component).

Ranges (inclusive): ``aatype`` 0-20; ``extra_msa``, ``true_msa``, ``template_aatype`` 0-21;
``residx_atom14_to_atom37`` 0-36; ``residx_atom37_to_atom14`` 0-13; ``msa_feat``, ``target_feat``,
``extra_deletion_value`` 0-1; every ``*_mask``, ``*_exists``, ``*_is_ambiguous`` and
``extra_has_deletion`` exactly 0 or 1. Keys outside the table only get the finiteness check.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ...geometry import residue_constants as rc
from ..errors import InputError
from .spec import FEATURES

__all__ = ["feature_value_problem", "check_feature_values", "RANGES"]

#: Inclusive value ranges (feature -> (low, high)).
RANGES = {
    "aatype": (0, 20),
    "extra_msa": (0, 21),
    "true_msa": (0, 21),
    "template_aatype": (0, 21),
    "residx_atom14_to_atom37": (0, 36),
    "residx_atom37_to_atom14": (0, 13),
    "msa_feat": (0.0, 1.0),
    "target_feat": (0.0, 1.0),
    "extra_deletion_value": (0.0, 1.0),
}
_DIM_WORDS = {"N_res": "residue", "N_seq": "MSA row", "N_extra": "extra MSA row", "N_templ": "template"}


def _is_binary(key: str) -> bool:
    return key.endswith(("_mask", "_exists", "_is_ambiguous")) or key == "extra_has_deletion"


def _describe_position(key: str, index: tuple[int, ...], lead: Optional[str]) -> str:
    """``"sample '1abc_A', template 1, residue 12, atom CA, z"`` for an index into feature ``key``."""
    parts = [lead] if lead else []
    spec = FEATURES.get(key)
    dims = spec.shape if spec is not None else ()
    for k, i in enumerate(index):
        sym = dims[k] if k < len(dims) else None
        if sym in _DIM_WORDS:
            parts.append(f"{_DIM_WORDS[sym]} {i + 1}")
        elif sym == 37:
            parts.append(f"atom {rc.atom_types[i]}")
        elif sym == 3 and k == len(dims) - 1:
            parts.append("xyz"[i])
        else:
            parts.append(f"index {i}")
    return ", ".join(parts) if parts else "the value"


def _checks(key: str, value: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """``(bad elements, what is wrong)`` per rule that applies to one feature (no host sync)."""
    out = []
    if value.is_floating_point():
        out.append((~torch.isfinite(value), "non-finite value {v}"))
    if _is_binary(key):
        out.append(((value != 0) & (value != 1), "value {v} in a mask (expected 0 or 1)"))
    if key in RANGES:
        low, high = RANGES[key]
        out.append(((value < low) | (value > high), f"value {{v}} outside {low}-{high}"))
    return out


def _order(key: str) -> tuple:
    names = list(FEATURES)
    return (key not in FEATURES, names.index(key) if key in FEATURES else 0, key)


def feature_value_problem(
    features: dict, *, sample_ids: Optional[Sequence[str]] = None, batched: bool = False
) -> Optional[str]:
    """The first out-of-range input value of ``features`` as a one-line message, or ``None``.

    Features are visited in :data:`~.spec.FEATURES` order (unknown keys last, by name); all counts
    are gathered with one device-to-host copy, positions are looked up only for a bad feature.

    Args:
        features: ``{name: tensor}`` as :func:`~.pipeline.make_features` / :func:`~.batch.collate`
            build them (``[*, ...]`` with the shapes of :data:`~.spec.FEATURES`).
        sample_ids: names of the samples along the leading batch dim (``batched``).
        batched: the tensors carry a leading batch dim.

    Returns:
        ``"feature 'template_all_atom_positions': non-finite value nan at sample '1abc_A', template 1,
        residue 12, atom CA, x"`` (positions 1-based), or None when every value is valid.
    """
    checks = []
    for key in sorted(features, key=_order):
        value = features[key]
        if isinstance(value, torch.Tensor) and value.numel() and value.dtype != torch.bool:
            checks += [(key, value, bad, what) for bad, what in _checks(key, value.detach())]
    if not checks:
        return None
    counts = torch.stack([bad.sum() for _, _, bad, _ in checks]).cpu()  # one sync
    for (key, value, bad, what), count in zip(checks, counts.tolist()):
        if not count:
            continue
        index = tuple(int(i) for i in torch.nonzero(bad)[0]) if bad.dim() else ()
        shown = value[index].item()
        lead = None
        if batched and index:
            sample = index[0]
            name = sample_ids[sample] if sample_ids is not None and sample < len(sample_ids) else str(sample)
            lead, index = f"sample '{name}'", index[1:]
        more = f" ({count} bad values)" if count > 1 else ""
        return f"feature '{key}': {what.format(v=shown)} at {_describe_position(key, index, lead)}{more}"
    return None


def check_feature_values(
    features: dict,
    *,
    record: Optional[str] = None,
    file=None,
    sample_ids: Optional[Sequence[str]] = None,
    batched: bool = False,
) -> None:
    """Raise :class:`~alphafold_mem.data.InputError` (naming ``record``/``file``) when
    :func:`feature_value_problem` finds one; see there."""
    problem = feature_value_problem(features, sample_ids=sample_ids, batched=batched)
    if problem is not None:
        raise InputError(f"{problem}; not passed to the model", record=record, file=file)
