"""Auxiliary heads and confidence metrics (Jumper et al. 2021, Suppl. 1.9.6-1.9.10, Alg. 29).

Heads return logits; ``compute_plddt``, ``compute_predicted_aligned_error`` and ``compute_ptm``
turn them into the confidence numbers (pLDDT 0-100, PAE in Å, pTM 0-1), in fp32.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..config import HeadsConfig
from ..precision import fp32_island
from ..memory.axes import Shard, Slice, Split, declare, exempt, run_split
from .primitives import LayerNorm, Linear


class PredictedLDDTHead(nn.Module):
    """pLDDT head (Suppl. Alg. 29): LayerNorm, two ReLU layers, 50-bin logits.

    Forward: s ``[*, N_res, c_s]`` (structure-module single). Returns ``[*, N_res, num_bins]``.
    """

    memory_spec = exempt("per residue: [*, N_res, c] activations only")

    def __init__(self, c_s: int, c_hidden: int, num_bins: int):
        super().__init__()
        self.input_layer_norm = LayerNorm(c_s)
        self.act_0 = Linear(c_s, c_hidden, init="relu")
        self.act_1 = Linear(c_hidden, c_hidden, init="relu")
        self.logits = Linear(c_hidden, num_bins, init="final")

    def forward(self, s: Tensor) -> Tensor:
        s = F.relu(self.act_0(self.input_layer_norm(s)))
        return self.logits(F.relu(self.act_1(s)))


class DistogramHead(nn.Module):
    """Distogram head (Suppl. 1.9.8): symmetric logits ``[*, N_res, N_res, num_bins]`` from z.

    Steps: the half logits (pointwise in z), then rows i of ``half + half^T`` read the rows
    ``half[i, :]`` and the columns ``half[:, i]``.
    """

    memory_spec = declare(splits={
        "half": Split("pair_row", (Shard(-3),), output=-3,
                      also=Split("pair_column", (Shard(-2, columns=True),), output=Shard(-2, columns=True))),
        "symmetric": Split("pair_row", (Shard(-3), Shard(-2, columns=True)), output=-3),
    })
    chunk_size: Optional[int] = None

    def __init__(self, c_z: int, num_bins: int):
        super().__init__()
        self.half_logits = Linear(c_z, num_bins, init="final")

    def forward(self, z: Tensor) -> Tensor:
        half = run_split(self, "half", self.half_logits, z)
        return run_split(self, "symmetric", lambda rows, cols: rows + cols.transpose(-2, -3), half, half)


class AuxiliaryHeads(nn.Module):
    """All auxiliary heads: pLDDT, distogram, masked MSA (1.9.9), experimentally resolved (1.9.10)
    and, when enabled, predicted aligned error (1.9.7)."""

    # the pTM's score of each alignment frame i reads the PAE logit rows i (and the whole residue
    # weights): per residue, every device holds it whole
    memory_spec = declare(splits={"ptm": Split("pair_row", (Shard(-3),), output=Slice(-1))})
    chunk_size: Optional[int] = None

    def __init__(self, c_m: int, c_z: int, c_s: int, cfg: HeadsConfig):
        super().__init__()
        self.cfg = cfg
        self.predicted_lddt = PredictedLDDTHead(c_s, cfg.plddt_c_hidden, cfg.plddt_num_bins)
        self.distogram = DistogramHead(c_z, cfg.distogram_num_bins)
        self.masked_msa = Linear(c_m, cfg.masked_msa_num_classes, init="final")
        self.experimentally_resolved = Linear(c_s, 37, init="final")
        self.predicted_aligned_error = Linear(c_z, cfg.pae_num_bins) if cfg.pae_enabled else None

    def forward(self, m: Tensor, z: Tensor, s: Tensor, sm_single: Tensor, seq_mask: Tensor) -> dict[str, Tensor]:
        out = {
            "lddt_logits": self.predicted_lddt(sm_single),
            "distogram_logits": self.distogram(z),
            "masked_msa_logits": self.masked_msa(m),
            "experimentally_resolved_logits": self.experimentally_resolved(s),
        }
        out["plddt"] = compute_plddt(out["lddt_logits"])
        if self.predicted_aligned_error is not None:
            logits = self.predicted_aligned_error(z)
            out["pae_logits"] = logits
            pae, max_pae = compute_predicted_aligned_error(logits, self.cfg.pae_max_bin)
            out["predicted_aligned_error"] = pae
            out["max_predicted_aligned_error"] = max_pae
            per_frame = run_split(self, "ptm", lambda lg: ptm_per_frame(lg, self.cfg.pae_max_bin, seq_mask), logits)
            out["ptm"] = best_frame(per_frame, seq_mask)
        return out


def compute_plddt(logits: Tensor) -> Tensor:
    """Expected lDDT-Cα from the binned head ``[*, N_res, B]`` -> ``[*, N_res]`` on 0-100 (Alg. 29)."""
    logits = fp32_island(logits)
    num_bins = logits.shape[-1]
    centers = (torch.arange(num_bins, device=logits.device, dtype=logits.dtype) + 0.5) / num_bins
    return (torch.softmax(logits, dim=-1) * centers).sum(-1) * 100.0


def _pae_bin_centers(num_bins: int, max_bin: float, like: Tensor) -> Tensor:
    breaks = torch.linspace(0.0, max_bin, num_bins - 1, device=like.device, dtype=like.dtype)
    step = breaks[1] - breaks[0]
    return torch.cat([breaks + step / 2, (breaks[-1] + 3 * step / 2).reshape(1)])  # [num_bins]


def compute_predicted_aligned_error(logits: Tensor, max_bin: float) -> tuple[Tensor, Tensor]:
    """Expected aligned error (Suppl. 1.9.7): logits ``[*, N_res, N_res, B]`` -> PAE ``[*, N_res, N_res]``
    in Å, and the largest representable value (the last bin centre, Å)."""
    centers = _pae_bin_centers(logits.shape[-1], max_bin, fp32_island(logits))
    pae = (torch.softmax(fp32_island(logits), dim=-1) * centers).sum(-1)
    return pae, centers[-1]


def compute_ptm(logits: Tensor, max_bin: float, residue_weights: Tensor, eps: float = 1e-8) -> Tensor:
    """Predicted TM-score (Suppl. 1.9.7, Eq. 40) from PAE logits ``[*, N_res, N_res, B]``.

    Args:
        residue_weights: ``[*, N_res]`` (the seq_mask; padding gets weight 0).

    Returns:
        ``[*]`` pTM in [0, 1]: the best alignment frame's expected TM-score.
    """
    return best_frame(ptm_per_frame(logits, max_bin, residue_weights, eps), residue_weights)


def ptm_per_frame(logits: Tensor, max_bin: float, residue_weights: Tensor, eps: float = 1e-8) -> Tensor:
    """Expected TM-score of the alignment on each frame i (Eq. 40 before the max) from the PAE logit
    rows ``[*, I, N_res, B]`` of those frames and the weights ``[*, N_res]`` of all residues (the
    seq_mask). Returns ``[*, I]``."""
    w = fp32_island(residue_weights)
    centers = _pae_bin_centers(logits.shape[-1], max_bin, fp32_island(logits))
    n = torch.clamp(w.sum(-1), min=19.0)  # [*]
    d0 = 1.24 * (n - 15.0) ** (1.0 / 3) - 1.8
    tm_per_bin = 1.0 / (1.0 + centers ** 2 / d0[..., None] ** 2)  # [*, B]
    probs = torch.softmax(fp32_island(logits), dim=-1)
    term = (probs * tm_per_bin[..., None, None, :]).sum(-1)  # [*, I, N_res]
    normed = w / (eps + w.sum(-1, keepdim=True))
    return (term * normed[..., None, :]).sum(-1)  # [*, I]


def best_frame(per_frame: Tensor, residue_weights: Tensor) -> Tensor:
    """pTM: the score of the best-weighted alignment frame, ``[*, N_res]`` -> ``[*]``."""
    weighted = per_frame * fp32_island(residue_weights)
    best = weighted.argmax(-1, keepdim=True)
    return per_frame.gather(-1, best).squeeze(-1)
