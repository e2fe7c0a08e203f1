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
from ..memory.axes import WHOLE, Shard, Slice, Split, declare, exempt, run_split
from ..memory.chunking import chain_count
from ..precision import fp32_island
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
    ``half[i, :]`` and the columns ``half[:, i]``. With ``chunk_size`` (memory policy) the logits
    are computed row chunk by row chunk into the output (row i reads z rows i and z columns i), so
    the only pair-sized tensor is the output itself.
    """

    memory_spec = declare(
        splits={
            "half": Split(
                "pair_row",
                (Shard(-3),),
                output=-3,
                also=Split("pair_column", (Shard(-2, columns=True),), output=Shard(-2, columns=True)),
            ),
            "symmetric": Split("pair_row", (Shard(-3), Shard(-2, columns=True)), output=-3),
            "rows": Split("pair_row", (Shard(-3), Shard(-2, columns=True)), output=-3),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_z: int, num_bins: int):
        super().__init__()
        self.half_logits = Linear(c_z, num_bins, init="final")

    def forward(self, z: Tensor) -> Tensor:
        if self.chunk_size is None:
            half = run_split(self, "half", self.half_logits, z)
            return run_split(self, "symmetric", lambda rows, cols: rows + cols.transpose(-2, -3), half, half)
        rows = lambda z_rows, z_cols: self.half_logits(z_rows) + self.half_logits(z_cols).transpose(-2, -3)  # noqa: E731
        return run_split(self, "rows", rows, z, z)


class PredictedAlignedErrorHead(Linear):
    """Predicted aligned error head (Suppl. 1.9.7): a linear layer z -> logits ``[*, N_res, N_res,
    num_bins]`` (its weight and bias keep AF2's names), the expected error (PAE, Å) and pTM.

    Forward: z ``[*, N_res, N_res, c_z]``, seq_mask ``[*, N_res]``. Returns ``pae_logits`` (with
    ``keep_logits``), ``predicted_aligned_error [*, N_res, N_res]``, ``max_predicted_aligned_error``
    and ``ptm [*]``. ``chunk_size`` (memory policy) reduces the logits row chunk by row chunk, so
    without ``keep_logits`` no ``[*, N_res, N_res, num_bins]`` tensor exists.
    """

    # rows i read z rows i; the TM-score term per bin and the normalised residue weights whole. The
    # score of each alignment frame i is per residue: every device holds it whole ("frames")
    memory_spec = declare(
        splits={
            "rows": Split("pair_row", (Shard(-3), WHOLE, WHOLE), output=-2),
            "frames": Split("pair_row", (Shard(-1, columns=True),), output=Slice(-1)),
            # AF2-Multimer: rows i also read their chain ids and the whole chain ids and weights
            "rows_chains": Split("pair_row", (Shard(-3), WHOLE, WHOLE, Slice(-1), WHOLE, WHOLE, WHOLE), output=-2),
            "chain_sums": Split("pair_row", (Shard(-2, columns=True),), output=Slice(-2)),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_z: int, num_bins: int, max_bin: float):
        super().__init__(c_z, num_bins)
        self.max_bin = max_bin

    def forward(
        self, z: Tensor, seq_mask: Tensor, keep_logits: bool = True, asym_id: Optional[Tensor] = None
    ) -> dict[str, Tensor]:
        if asym_id is not None:
            return self._forward_chains(z, seq_mask, keep_logits, asym_id)
        w = fp32_island(seq_mask)
        centers = _pae_bin_centers(self.out_features, self.max_bin, w)
        normed = w / (1e-8 + w.sum(-1, keepdim=True))  # [*, N_res]

        def rows(z_rows: Tensor, tm: Tensor, nrm: Tensor):
            logits = F.linear(z_rows, self.weight, self.bias)  # [*, I, N_res, B]
            pae, per_alignment = _pae_rows(logits, centers, tm, nrm)
            kept = (logits.flatten(-2),) if keep_logits else ()  # rows on dim -2 like the others
            return (*kept, pae, per_alignment[..., None])

        *logits, pae, per_alignment = run_split(self, "rows", rows, z, _tm_per_bin(centers, w), normed)
        out = {
            "predicted_aligned_error": pae,
            "max_predicted_aligned_error": centers[-1],
            "ptm": _best_alignment(run_split(self, "frames", lambda x: x, per_alignment[..., 0]), w),
        }
        if logits:
            out["pae_logits"] = logits[0].unflatten(-1, (z.shape[-2], self.out_features))
        return out

    def _forward_chains(self, z: Tensor, seq_mask: Tensor, keep_logits: bool, asym_id: Tensor) -> dict[str, Tensor]:
        """AF2-Multimer: PAE, pTM, ipTM (alignment frames i scored over residues j of other chains),
        the ranking confidence 0.8 ipTM + 0.2 pTM and, outside the memory estimator, the chain-pair
        ipTM matrix (:func:`chain_pair_iptm`)."""
        w = fp32_island(seq_mask)
        centers = _pae_bin_centers(self.out_features, self.max_bin, w)
        normed = w / (1e-8 + w.sum(-1, keepdim=True))  # [*, N_res]
        tm = _tm_per_bin(centers, w)
        # per chain (asym_id 1..C), the residue weights: [*, N_res, C]; under the estimator only when
        # it knows the number of chains (a value of the data: memory.chunking.traced_chains)
        chains = None
        num_chains = chain_count(asym_id)
        if num_chains is not None:
            ids = torch.arange(1, max(num_chains, 1) + 1, device=asym_id.device)
            chains = (asym_id.long()[..., None] == ids).to(w.dtype) * w[..., None]

        def rows(z_rows: Tensor, tm_: Tensor, nrm: Tensor, asym_rows: Tensor, asym: Tensor, w_: Tensor, ch):
            logits = F.linear(z_rows, self.weight, self.bias)  # [*, I, N_res, B]
            probs = torch.softmax(fp32_island(logits), dim=-1)
            pae = (probs * centers).sum(-1)
            term = (probs * tm_[..., None, None, :]).sum(-1)  # [*, I, N_res]
            ptm_rows = (term * nrm[..., None, :]).sum(-1)
            other = (asym_rows[..., :, None] != asym[..., None, :]).to(w_.dtype) * w_[..., None, :]  # [*, I, N_res]
            iptm_rows = (term * other).sum(-1) / (1e-8 + other.sum(-1))
            kept = (logits.flatten(-2),) if keep_logits else ()
            sums = () if ch is None else (torch.einsum("...ijb,...jc->...icb", probs, ch).flatten(-2),)
            return (*kept, pae, ptm_rows[..., None], iptm_rows[..., None], *sums)

        res = run_split(self, "rows_chains", rows, z, tm, normed, asym_id, asym_id, w, chains)
        n_kept = 1 if keep_logits else 0
        pae, ptm_rows, iptm_rows = res[n_kept : n_kept + 3]
        gather = lambda x: run_split(self, "frames", lambda y: y, x)  # noqa: E731
        ptm = _best_alignment(gather(ptm_rows[..., 0]), w)
        iptm = _best_alignment(gather(iptm_rows[..., 0]), w)
        out = {
            "predicted_aligned_error": pae,
            "max_predicted_aligned_error": centers[-1],
            "ptm": ptm,
            "iptm": iptm,
            "ranking_confidence": 0.8 * iptm + 0.2 * ptm,
        }
        if chains is not None:
            sums = run_split(self, "chain_sums", lambda y: y, res[-1])  # [*, N_res, C * B]
            out["chain_pair_iptm"] = chain_pair_iptm(sums.unflatten(-1, (chains.shape[-1], -1)), chains, centers)
        if keep_logits:
            out["pae_logits"] = res[0].unflatten(-1, (z.shape[-2], self.out_features))
        return out


def chain_pair_iptm(sums: Tensor, chains: Tensor, centers: Tensor) -> Tensor:
    """The chain-pair ipTM matrix ``[*, C, C]`` (as ColabFold and AF3 report it): entry (a, b), a != b,
    is the ipTM of the complex made of chains a and b alone (TM-score d0 from their residue count,
    alignment frames i in a or b scored over the residues of the other chain); entry (a, a) is the
    pTM of chain a alone.

    Args:
        sums: ``[*, N_res, C, B]``: for each alignment frame i and chain c, the PAE-bin probabilities
            of the residues j of chain c summed with their weights.
        chains: ``[*, N_res, C]`` the residue weights of each chain (one-hot of ``asym_id`` - 1 times
            the residue weights).
        centers: the PAE bin centres ``[B]`` (Å).
    """
    size = chains.sum(-2)  # [*, C] weighted residue count of each chain
    pair_n = size[..., :, None] + size[..., None, :]  # [*, C, C]
    pair_n = torch.where(torch.eye(size.shape[-1], dtype=torch.bool, device=size.device), size[..., :, None], pair_n)
    d0 = 1.24 * (torch.clamp(pair_n, min=19.0) - 15.0) ** (1.0 / 3) - 1.8  # [*, C, C]
    tm = 1.0 / (1.0 + centers**2 / d0[..., None] ** 2)  # [*, C (a), C (b), B]
    # score of frame i (in chain a) over chain b with the (a, b) d0: [*, N_res, C (b)]
    chain_of = chains / chains.sum(-1, keepdim=True).clamp(min=1e-8)  # [*, N_res, C] (0/1 where weighted)
    tm_rows = torch.einsum("...ia,...abk->...ibk", chain_of, tm)  # [*, N_res, C (b), B] with i's own chain a
    score = (sums * tm_rows).sum(-1) / size[..., None, :].clamp(min=1e-8)  # [*, N_res, C (b)]
    # (a, b): the best frame i among the residues of a (scored over b) and of b (scored over a)
    best = torch.where(chains[..., :, :, None] > 0, score[..., :, None, :], score.new_tensor(float("-inf")))
    best = best.amax(-3)  # [*, C (a), C (b)]: frames in a, scored over b
    return torch.maximum(best, best.transpose(-1, -2))


class AuxiliaryHeads(nn.Module):
    """All auxiliary heads: pLDDT, distogram, masked MSA (1.9.9), experimentally resolved (1.9.10)
    and, when enabled, predicted aligned error (1.9.7).

    Seam ``head_logits`` (memory policy): ``"keep"`` returns ``distogram_logits`` and ``pae_logits``
    ``[*, N_res, N_res, bins]``; ``"drop"`` (without autograd; the losses need both) computes
    neither the distogram nor the PAE logits as whole tensors (PAE and pTM are reduced from them
    row chunk by row chunk)."""

    memory_spec = declare(seams=["head_logits"])
    head_logits: str = "keep"

    def __init__(self, c_m: int, c_z: int, c_s: int, cfg: HeadsConfig):
        super().__init__()
        self.cfg = cfg
        self.predicted_lddt = PredictedLDDTHead(c_s, cfg.plddt_c_hidden, cfg.plddt_num_bins)
        self.distogram = DistogramHead(c_z, cfg.distogram_num_bins)
        self.masked_msa = Linear(c_m, cfg.masked_msa_num_classes, init="final")
        self.experimentally_resolved = Linear(c_s, 37, init="final")
        self.predicted_aligned_error = (
            PredictedAlignedErrorHead(c_z, cfg.pae_num_bins, cfg.pae_max_bin) if cfg.pae_enabled else None
        )

    def forward(
        self, m: Tensor, z: Tensor, s: Tensor, sm_single: Tensor, seq_mask: Tensor, asym_id: Optional[Tensor] = None
    ) -> dict[str, Tensor]:
        """Logits and confidences; ``asym_id [*, N_res]`` (AF2-Multimer, ``iptm_enabled``) adds ipTM,
        the ranking confidence and the chain-pair ipTM matrix."""
        keep = self.head_logits == "keep" or torch.is_grad_enabled()  # the losses read both
        out = {
            "lddt_logits": self.predicted_lddt(sm_single),
            "masked_msa_logits": self.masked_msa(m),
            "experimentally_resolved_logits": self.experimentally_resolved(s),
        }
        if keep:
            out["distogram_logits"] = self.distogram(z)
        out["plddt"] = compute_plddt(out["lddt_logits"])
        if self.predicted_aligned_error is not None:
            chains = asym_id if self.cfg.iptm_enabled else None
            out.update(self.predicted_aligned_error(z, seq_mask, keep_logits=keep, asym_id=chains))
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


def _tm_per_bin(centers: Tensor, residue_weights: Tensor) -> Tensor:
    """TM-score term of each PAE bin centre ``[*, B]`` (Suppl. 1.9.7, Eq. 40; d0 from N_res >= 19)."""
    n = torch.clamp(residue_weights.sum(-1), min=19.0)  # [*]
    d0 = 1.24 * (n - 15.0) ** (1.0 / 3) - 1.8
    return 1.0 / (1.0 + centers**2 / d0[..., None] ** 2)


def _pae_rows(logits: Tensor, centers: Tensor, tm_per_bin: Tensor, normed: Tensor) -> tuple[Tensor, Tensor]:
    """From PAE logits rows ``[*, I, N_res, B]``: PAE ``[*, I, N_res]`` (Å) and each row's expected
    TM-score as the alignment frame ``[*, I]``."""
    probs = torch.softmax(fp32_island(logits), dim=-1)
    pae = (probs * centers).sum(-1)
    term = (probs * tm_per_bin[..., None, None, :]).sum(-1)  # [*, I, N_res]
    return pae, (term * normed[..., None, :]).sum(-1)


def _best_alignment(per_alignment: Tensor, residue_weights: Tensor) -> Tensor:
    best = (per_alignment * residue_weights).argmax(-1, keepdim=True)
    return per_alignment.gather(-1, best).squeeze(-1)


def compute_ptm(logits: Tensor, max_bin: float, residue_weights: Tensor, eps: float = 1e-8) -> Tensor:
    """Predicted TM-score (Suppl. 1.9.7, Eq. 40) from PAE logits ``[*, N_res, N_res, B]``.

    Args:
        residue_weights: ``[*, N_res]`` (the seq_mask; padding gets weight 0).

    Returns:
        ``[*]`` pTM in [0, 1]: the best alignment frame's expected TM-score.
    """
    w = fp32_island(residue_weights)
    centers = _pae_bin_centers(logits.shape[-1], max_bin, fp32_island(logits))
    normed = w / (eps + w.sum(-1, keepdim=True))
    _, per_alignment = _pae_rows(logits, centers, _tm_per_bin(centers, w), normed)
    return _best_alignment(per_alignment, w)
