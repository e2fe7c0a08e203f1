"""Structure-accuracy metrics: lDDT-Cα, Cα-RMSD after superposition, GDT-TS and TM-score.

Lengths in Å. ``lddt``, ``kabsch``, ``rmsd`` and ``gdt_ts`` are batched torch functions (any
leading dims ``*``); :func:`tm_score` calls the ``tmtools`` package (TM-align) on one pair.

References: lDDT — Mariani et al. 2013 (inclusion radius 15 Å, thresholds 0.5/1/2/4 Å; here on Cα
only, all pairs i != j of the reference within the radius); GDT-TS — Zemla 2003 (mean fraction of
Cα within 1/2/4/8 Å); TM-score — Zhang & Skolnick 2004.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tmtools
import torch
from torch import Tensor

from .geometry import residue_constants as rc

__all__ = ["lddt", "lddt_ca", "kabsch", "superpose", "rmsd", "ca_rmsd", "gdt_ts", "tm_score"]

_CA = rc.atom_order["CA"]


def lddt(
    pred: Tensor,
    true: Tensor,
    mask: Tensor,
    cutoff: float = 15.0,
    per_residue: bool = False,
    eps: float = 1e-10,
    no_pairs: float = 0.0,
) -> Tensor:
    """Local distance difference test on one atom per residue (superposition-free).

    For every pair (i, j), i != j, both present and with reference distance < ``cutoff``, the
    pair scores the fraction of thresholds {0.5, 1, 2, 4} Å that ``|d_pred - d_true|`` is below.

    Args:
        pred, true: ``[*, N, 3]`` (Å); mask: ``[*, N]``.
        per_residue: return ``[*, N]`` (each residue's mean over its pairs) instead of ``[*]``
            (mean over all pairs).

        no_pairs: the score of a residue (or structure) without any scored pair. AF2's pLDDT
            target, ``(1e-10 + sum) / (1e-10 + count)`` (``lddt`` in alphafold/model/lddt.py), gives
            such a residue 1.0; as a metric 0 is the honest value.

    Returns:
        lDDT in [0, 1].
    """
    d_true = torch.sqrt(eps + ((true[..., :, None, :] - true[..., None, :, :]) ** 2).sum(-1))  # [*, N, N]
    d_pred = torch.sqrt(eps + ((pred[..., :, None, :] - pred[..., None, :, :]) ** 2).sum(-1))
    n = mask.shape[-1]
    eye = torch.eye(n, dtype=mask.dtype, device=mask.device)
    pair = (d_true < cutoff).to(mask.dtype) * mask[..., :, None] * mask[..., None, :] * (1.0 - eye)
    l1 = (d_pred - d_true).abs()
    score = 0.25 * sum((l1 < t).to(mask.dtype) for t in (0.5, 1.0, 2.0, 4.0))
    dims = (-1,) if per_residue else (-1, -2)
    num = (pair * score).sum(dims)
    den = pair.sum(dims)
    return torch.where(den > 0, num / den.clamp(min=eps), torch.full_like(num, no_pairs))


def lddt_ca(
    pred_atom37: Tensor, true_atom37: Tensor, mask_atom37: Tensor, cutoff: float = 15.0, per_residue: bool = False
) -> Tensor:
    """lDDT-Cα from atom37 coordinates ``[*, N, 37, 3]`` and the reference mask ``[*, N, 37]``."""
    return lddt(pred_atom37[..., _CA, :], true_atom37[..., _CA, :], mask_atom37[..., _CA], cutoff, per_residue)


def kabsch(mobile: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Optimal rotation and translation (least squares, proper rotation) mapping ``mobile`` onto
    ``target``: ``target ≈ mobile @ R.T + t``.

    Args:
        mobile, target: ``[*, N, 3]``; mask: ``[*, N]`` (default all ones).

    Returns:
        ``R [*, 3, 3]`` and ``t [*, 3]``. Computed in float64.
    """
    dtype = mobile.dtype
    x, y = mobile.double(), target.double()
    w = torch.ones(x.shape[:-1], dtype=x.dtype, device=x.device) if mask is None else mask.double()
    wsum = w.sum(-1, keepdim=True).clamp(min=1e-12)[..., None]  # [*, 1, 1]
    cx = (x * w[..., None]).sum(-2, keepdim=True) / wsum
    cy = (y * w[..., None]).sum(-2, keepdim=True) / wsum
    h = ((x - cx) * w[..., None]).transpose(-1, -2) @ (y - cy)  # [*, 3, 3]
    u, _, vh = torch.linalg.svd(h)
    d = torch.sign(torch.linalg.det(vh.transpose(-1, -2) @ u.transpose(-1, -2)))
    diag = torch.ones(d.shape + (3,), dtype=x.dtype, device=x.device)
    diag[..., -1] = d
    r = vh.transpose(-1, -2) @ torch.diag_embed(diag) @ u.transpose(-1, -2)  # [*, 3, 3]
    t = cy.squeeze(-2) - (r @ cx.squeeze(-2)[..., None]).squeeze(-1)
    return r.to(dtype), t.to(dtype)


def superpose(mobile: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """``mobile`` ``[*, N, 3]`` optimally superposed onto ``target`` (on the masked points)."""
    r, t = kabsch(mobile, target, mask)
    return mobile @ r.transpose(-1, -2) + t[..., None, :]


def rmsd(pred: Tensor, true: Tensor, mask: Optional[Tensor] = None, superpose_first: bool = True) -> Tensor:
    """Root-mean-square deviation ``[*]`` (Å) over the masked points, after optimal superposition
    of ``pred`` onto ``true`` unless ``superpose_first`` is False."""
    if mask is None:
        mask = torch.ones(pred.shape[:-1], dtype=pred.dtype, device=pred.device)
    x = superpose(pred, true, mask) if superpose_first else pred
    sq = ((x - true) ** 2).sum(-1)
    return torch.sqrt((sq * mask).sum(-1) / mask.sum(-1).clamp(min=1e-12))


def ca_rmsd(pred_atom37: Tensor, true_atom37: Tensor, mask_atom37: Tensor) -> Tensor:
    """Cα-RMSD ``[*]`` (Å) after optimal superposition, from atom37 coordinates."""
    return rmsd(pred_atom37[..., _CA, :], true_atom37[..., _CA, :], mask_atom37[..., _CA])


def gdt_ts(
    pred: Tensor, true: Tensor, mask: Optional[Tensor] = None, cutoffs: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
) -> Tensor:
    """GDT-TS ``[*]`` in [0, 1]: mean over cutoffs of the largest fraction of residues within the
    cutoff after a superposition.

    The superposition search follows the LGA idea in a simplified form: seed superpositions on
    windows of 3, 5, 7 ... consecutive residues and the whole chain, then iterate each (superpose
    on the residues within the cutoff, re-select) a few times; the best fraction per cutoff is
    kept. This is a lower bound of the exhaustive GDT (exact for identical or rigidly moved
    structures), and agrees with LGA to about 1 GDT point on typical models.

    Args:
        pred, true: ``[*, N, 3]`` Cα (Å); mask: ``[*, N]``.
    """
    if mask is None:
        mask = torch.ones(pred.shape[:-1], dtype=pred.dtype, device=pred.device)
    batch_shape = pred.shape[:-2]
    p = pred.reshape(-1, *pred.shape[-2:]).double()
    t = true.reshape(-1, *true.shape[-2:]).double()
    m = mask.reshape(-1, mask.shape[-1]).double()
    out = []
    for pi, ti, mi in zip(p, t, m):
        idx = torch.nonzero(mi > 0).squeeze(-1)
        pi, ti = pi[idx], ti[idx]
        n_total = float(mi.sum())
        n = pi.shape[0]
        if n < 3:
            out.append(torch.tensor(0.0, dtype=torch.float64))
            continue
        seeds = [torch.ones(n, dtype=torch.float64)]
        for w in (3, 5, 9, 17):
            if w >= n:
                break
            for s in range(0, n - w + 1, max(1, w // 2)):
                sm = torch.zeros(n, dtype=torch.float64)
                sm[s : s + w] = 1.0
                seeds.append(sm)
        best = []
        for c in cutoffs:
            top = 0.0
            for seed in seeds:
                sel = seed
                for _ in range(4):
                    if sel.sum() < 3:
                        break
                    d = torch.sqrt(((superpose(pi, ti, sel) - ti) ** 2).sum(-1))
                    within = (d <= c).double()
                    top = max(top, float(within.sum()))
                    if torch.equal(within, sel):
                        break
                    sel = within
            best.append(top / n_total)
        out.append(torch.tensor(sum(best) / len(best), dtype=torch.float64))
    return torch.stack(out).reshape(batch_shape).to(pred.dtype)


def tm_score(pred_ca, true_ca, sequence: str, true_sequence: Optional[str] = None) -> float:
    """TM-score of ``pred_ca`` against ``true_ca`` (normalised by the reference length) with
    TM-align from the ``tmtools`` package.

    Args:
        pred_ca, true_ca: ``[N, 3]`` Cα coordinates (Å), numpy or torch; only resolved residues.
        sequence: one-letter sequence of ``pred_ca`` (``true_sequence`` defaults to it).

    Returns:
        TM-score in (0, 1], 1 for identical structures.
    """
    a = np.ascontiguousarray(np.asarray(pred_ca.detach().cpu() if torch.is_tensor(pred_ca) else pred_ca, np.float64))
    b = np.ascontiguousarray(np.asarray(true_ca.detach().cpu() if torch.is_tensor(true_ca) else true_ca, np.float64))
    res = tmtools.tm_align(a, b, sequence, true_sequence or sequence)
    return float(res.tm_norm_chain2)
