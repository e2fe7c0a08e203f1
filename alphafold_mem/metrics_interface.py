"""DockQ interface metrics of a complex: Fnat, iRMSD, LRMSD and DockQ for each pair of chains.

Definition (Basu & Wallner 2016, PLoS ONE 11(8), "DockQ: a quality measure for
protein-protein docking models"), for a pair of chains, receptor the longer (more residues present;
the first on a tie), ligand the shorter:

* Fnat: the fraction of the native residue-residue contacts across the interface (any two heavy
  atoms within 5 Å) that the model also has;
* iRMSD: the backbone (N, Cα, C, O) RMSD of the interface residues (native residues of either chain
  with any heavy atom within 10 Å of the other chain) after optimal superposition of those atoms;
* LRMSD: the ligand's backbone RMSD after superposing the model's receptor backbone on the native's;
* DockQ = (Fnat + 1 / (1 + (iRMSD / 1.5)²) + 1 / (1 + (LRMSD / 8.5)²)) / 3, in [0, 1].

The DockQ package on PyPI (2.1.3, the authors' own) pins numpy 1.26, which would downgrade the
numpy 2 that torch needs here, so it cannot be a dependency; this module implements the published
definition on atom37 coordinates (atom37 holds heavy atoms only) and their masks, with the
superposition of :func:`alphafold_mem.metrics.kabsch`. Residues are matched by index (model and
native share the residue numbering), so no sequence alignment is done.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .geometry import residue_constants as rc
from .metrics import kabsch, rmsd

__all__ = ["dockq_score", "dockq_pair", "dockq_complex", "residue_min_distance"]

#: Contact distance of Fnat and interface distance of iRMSD (Å), as published.
FNAT_CUTOFF = 5.0
INTERFACE_CUTOFF = 10.0
_BACKBONE = [rc.atom_order[a] for a in ("N", "CA", "C", "O")]
_CHUNK = 32  # residues of the first chain per block of the atom-pair distances


def dockq_score(fnat: Tensor, irmsd: Tensor, lrmsd: Tensor) -> Tensor:
    """DockQ from its parts (RMSDs in Å): the mean of Fnat and the two scaled RMSDs (module docstring)."""
    return (fnat + 1.0 / (1.0 + (irmsd / 1.5) ** 2) + 1.0 / (1.0 + (lrmsd / 8.5) ** 2)) / 3.0


def residue_min_distance(x_a: Tensor, m_a: Tensor, x_b: Tensor, m_b: Tensor) -> Tensor:
    """Smallest distance between any present atoms of residue i of ``a`` and residue j of ``b``.

    Args:
        x_a ``[Na, 37, 3]``, x_b ``[Nb, 37, 3]`` (Å); m_a ``[Na, 37]``, m_b ``[Nb, 37]`` (atom masks).

    Returns:
        ``[Na, Nb]`` (Å); ``inf`` where either residue has no atom present.
    """
    nb = x_b.shape[0]
    pb = x_b.reshape(-1, 3).double()
    absent_b = (m_b.reshape(-1) <= 0)[None, :]
    rows = []
    for s in range(0, x_a.shape[0], _CHUNK):
        pa = x_a[s : s + _CHUNK].reshape(-1, 3).double()
        d = torch.cdist(pa, pb)
        d = d.masked_fill((m_a[s : s + _CHUNK].reshape(-1) <= 0)[:, None] | absent_b, float("inf"))
        rows.append(d.reshape(-1, 37, nb, 37).amin((1, 3)))
    return torch.cat(rows) if rows else x_a.new_zeros((0, nb), dtype=torch.float64)


def dockq_pair(pred: Tensor, true: Tensor, mask: Tensor, rec: Tensor, lig: Tensor) -> dict[str, Tensor] | None:
    """Fnat, iRMSD, LRMSD and DockQ of one receptor-ligand pair.

    Args:
        pred, true: ``[N, 37, 3]`` model and native atoms (Å), residues matched by index.
        mask: ``[N, 37]`` the atoms present (the native's, times the model's where it has one);
            absent atoms take no part in contacts, interface or RMSDs.
        rec, lig: ``[N]`` boolean residue selections of the receptor and ligand chains.

    Returns:
        ``{"fnat", "irmsd", "lrmsd", "dockq"}`` 0-d float64 tensors (RMSDs in Å), or None when the
        native has no contact between the two chains.
    """
    pred, true, mask = pred.double(), true.double(), mask.double()
    d_true = residue_min_distance(true[rec], mask[rec], true[lig], mask[lig])  # [Nr, Nl]
    native = d_true < FNAT_CUTOFF
    if not bool(native.any()):
        return None
    d_pred = residue_min_distance(pred[rec], mask[rec], pred[lig], mask[lig])
    fnat = (native & (d_pred < FNAT_CUTOFF)).sum().double() / native.sum().double()

    near = d_true < INTERFACE_CUTOFF
    iface = torch.zeros(rec.shape, dtype=torch.bool, device=rec.device)
    iface[torch.nonzero(rec).squeeze(-1)[near.any(1)]] = True
    iface[torch.nonzero(lig).squeeze(-1)[near.any(0)]] = True
    bb_p, bb_t, bb_m = pred[:, _BACKBONE], true[:, _BACKBONE], mask[:, _BACKBONE]
    irmsd = rmsd(bb_p[iface].reshape(-1, 3), bb_t[iface].reshape(-1, 3), bb_m[iface].reshape(-1))

    r, t = kabsch(bb_p[rec].reshape(-1, 3), bb_t[rec].reshape(-1, 3), bb_m[rec].reshape(-1))
    lig_p = bb_p[lig].reshape(-1, 3) @ r.T + t
    lrmsd = rmsd(lig_p, bb_t[lig].reshape(-1, 3), bb_m[lig].reshape(-1), superpose_first=False)
    return {"fnat": fnat, "irmsd": irmsd, "lrmsd": lrmsd, "dockq": dockq_score(fnat, irmsd, lrmsd)}


def dockq_complex(pred: Tensor, true: Tensor, mask: Tensor, asym_id: Tensor) -> dict[str, Tensor] | None:
    """:func:`dockq_pair` of every pair of chains in contact in the native, and their mean.

    Args:
        pred, true: ``[N, 37, 3]`` (Å); mask: ``[N, 37]``; asym_id: ``[N]`` chain of each residue
            (residues without any atom present are left out; a chain needs one to count).

    Returns:
        ``{"fnat", "irmsd", "lrmsd", "dockq"}``, each the mean over the pairs in contact
        (0-d float64), plus ``"pairs"`` (their number); None when no two chains are in contact.
    """
    present = mask.sum(-1) > 0
    chains = [c for c in torch.unique(asym_id[present]).tolist()]
    scores = []
    for i, a in enumerate(chains):
        for b in chains[i + 1 :]:
            sel_a, sel_b = (asym_id == a) & present, (asym_id == b) & present
            rec, lig = (sel_a, sel_b) if int(sel_a.sum()) >= int(sel_b.sum()) else (sel_b, sel_a)
            s = dockq_pair(pred, true, mask, rec, lig)
            if s is not None:
                scores.append(s)
    if not scores:
        return None
    out = {k: torch.stack([s[k] for s in scores]).mean() for k in ("fnat", "irmsd", "lrmsd", "dockq")}
    out["pairs"] = torch.tensor(len(scores))
    return out
