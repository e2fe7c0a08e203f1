"""Which input features the network reads, and how the few that differ between AF2 and
AF2-Multimer become the same inputs of the shared modules.

The model picks one feature set in its constructor (``ModelConfig.multimer``); its forward then
reads features only through it.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor


class MonomerFeatures:
    """AF2 (Jumper et al. 2021, Suppl. Table 1): extra-MSA deletion features given as
    ``extra_has_deletion`` and ``extra_deletion_value``; no chain features."""

    required: tuple[str, ...] = (
        "aatype",
        "residue_index",
        "seq_mask",
        "target_feat",
        "msa_feat",
        "msa_mask",
        "extra_msa",
        "extra_msa_mask",
        "extra_has_deletion",
        "extra_deletion_value",
    )
    template_keys: tuple[str, ...] = (
        "template_aatype",
        "template_all_atom_positions",
        "template_all_atom_mask",
        "template_pseudo_beta",
        "template_pseudo_beta_mask",
        "template_mask",
        "template_torsion_angles_sin_cos",
        "template_alt_torsion_angles_sin_cos",
        "template_torsion_angles_mask",
    )

    @staticmethod
    def extra_deletions(batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(has_deletion, deletion_value)`` of the extra MSA, ``[*, N_extra, N_res]`` each."""
        return batch["extra_has_deletion"], batch["extra_deletion_value"]

    @staticmethod
    def asym_id(batch: dict[str, Tensor]) -> Optional[Tensor]:
        """The chain of each residue ``[*, N_res]`` (None: one chain)."""
        return None


class MultimerFeatures(MonomerFeatures):
    """AF2-Multimer (Evans et al. 2021): chain features ``asym_id``, ``entity_id``, ``sym_id``
    ``[*, N_res]`` (int, chains numbered from 1); the extra-MSA deletion features made here from the
    raw counts ``extra_deletion_matrix [*, N_extra, N_res]`` (``clip(d, 0, 1)`` and
    ``atan(d / 3) * 2 / pi``); templates as atom positions only."""

    required = (
        "aatype",
        "residue_index",
        "asym_id",
        "entity_id",
        "sym_id",
        "seq_mask",
        "target_feat",
        "msa_feat",
        "msa_mask",
        "extra_msa",
        "extra_msa_mask",
        "extra_deletion_matrix",
    )
    template_keys = ("template_aatype", "template_all_atom_positions", "template_all_atom_mask")

    @staticmethod
    def extra_deletions(batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        d = batch["extra_deletion_matrix"]
        return torch.clamp(d, 0.0, 1.0), torch.atan(d / 3.0) * (2.0 / math.pi)

    @staticmethod
    def asym_id(batch: dict[str, Tensor]) -> Optional[Tensor]:
        return batch["asym_id"]


__all__ = ["MonomerFeatures", "MultimerFeatures"]
