"""What one prediction is compared on: its deviation from the reference prediction of the same chain
(a change of prediction) and its accuracy against the experimental structure (a change of accuracy).

A prediction here is :class:`Prediction`: atom37 coordinates (Å), their mask, per-residue pLDDT and
pTM, as numpy arrays. Metrics come from :mod:`alphafold_mem.metrics` (Cα-RMSD after superposition,
lDDT-Cα, GDT-TS, TM-score via tmtools).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..data.errors import InputWarning
from ..data.pdb import parse_pdb
from ..geometry import residue_constants as rc
from ..io import atomic_write
from ..metrics import ca_rmsd, gdt_ts, lddt_ca, tm_score

__all__ = ["Prediction", "deviation", "accuracy", "ACCURACY_MEASURES", "DEVIATION_MEASURES"]

_CA = rc.atom_order["CA"]
DEVIATION_MEASURES = ("ca_rmsd_to_reference", "plddt_max_abs_diff", "plddt_mean_abs_diff", "ptm_abs_diff")
ACCURACY_MEASURES = ("lddt_ca", "tm_score", "gdt_ts")


@dataclass
class Prediction:
    """One model output: ``positions [N, 37, 3]`` (Å), ``mask [N, 37]``, ``plddt [N]`` (0-100), ``ptm``
    (0-1, None without a PAE head)."""

    positions: np.ndarray
    mask: np.ndarray
    plddt: np.ndarray
    ptm: Optional[float] = None

    @classmethod
    def from_output(cls, out: dict) -> "Prediction":
        """From ``AlphaFold.forward``'s output dict (any dtype/device)."""

        def arr(key):
            return out[key].detach().float().cpu().numpy()

        ptm = float(out["ptm"].float()) if "ptm" in out else None
        return cls(arr("final_atom_positions"), arr("final_atom_mask"), arr("plddt"), ptm)

    @classmethod
    def from_pdb(cls, path: str | os.PathLike, ptm: Optional[float] = None) -> "Prediction":
        """From a predicted PDB file (pLDDT in the B-factor column, as ``alphafold-mem predict``
        writes it); coordinates are rounded to 1e-3 Å there."""
        with warnings.catch_warnings():  # predictions carry no SEQRES: the observed residues are the sequence
            warnings.simplefilter("ignore", InputWarning)
            chain = parse_pdb(path)
        return cls(chain.atom37_positions, chain.atom37_mask, chain.b_factors[:, _CA], ptm)

    def save(self, path: str | os.PathLike) -> None:
        with atomic_write(path) as tmp, open(tmp, "wb") as fh:
            np.savez(
                fh,
                positions=self.positions,
                mask=self.mask,
                plddt=self.plddt,
                ptm=np.array(np.nan if self.ptm is None else self.ptm),
            )

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Prediction":
        with np.load(path) as d:
            ptm = float(d["ptm"])
            return cls(d["positions"], d["mask"], d["plddt"], None if np.isnan(ptm) else ptm)


def deviation(run: Prediction, ref: Prediction) -> dict[str, Optional[float]]:
    """Cα-RMSD after superposition (Å), max and mean |ΔpLDDT|, |ΔpTM| of ``run`` against ``ref``.
    Raises:
        ValueError: the two predictions have different lengths.
    """
    if run.positions.shape != ref.positions.shape:
        raise ValueError(f"predictions of different shapes {run.positions.shape} vs {ref.positions.shape}")
    x, y = torch.tensor(run.positions, dtype=torch.float64), torch.tensor(ref.positions, dtype=torch.float64)
    mask = torch.tensor(ref.mask * run.mask, dtype=torch.float64)
    dp = np.abs(run.plddt.astype(np.float64) - ref.plddt.astype(np.float64))
    # identical coordinates: exactly 0 (the superposition's own rounding would leave ~1e-15 Å)
    rmsd = 0.0 if np.array_equal(run.positions, ref.positions) else float(ca_rmsd(x, y, mask))
    return {
        "ca_rmsd_to_reference": rmsd,
        "plddt_max_abs_diff": float(dp.max()),
        "plddt_mean_abs_diff": float(dp.mean()),
        "ptm_abs_diff": None if run.ptm is None or ref.ptm is None else abs(run.ptm - ref.ptm),
    }


def accuracy(run: Prediction, true_positions: np.ndarray, true_mask: np.ndarray, sequence: str) -> dict[str, float]:
    """lDDT-Cα, TM-score and GDT-TS of ``run`` against an experimental chain (atom37, same residues),
    over the residues whose Cα is resolved.

    Raises:
        ValueError: different lengths, or fewer than 3 resolved Cα.
    """
    if run.positions.shape[0] != true_positions.shape[0]:
        raise ValueError(f"prediction has {run.positions.shape[0]} residues, the structure {true_positions.shape[0]}")
    resolved = true_mask[:, _CA] > 0
    if resolved.sum() < 3:
        raise ValueError("fewer than 3 resolved Cα atoms")
    pred = torch.tensor(run.positions, dtype=torch.float64)
    true = torch.tensor(true_positions, dtype=torch.float64)
    m = torch.tensor(true_mask, dtype=torch.float64)
    seq = "".join(c for c, r in zip(sequence, resolved) if r)
    return {
        "lddt_ca": float(lddt_ca(pred, true, m)),
        "tm_score": tm_score(run.positions[resolved, _CA], true_positions[resolved, _CA], seq),
        "gdt_ts": float(gdt_ts(pred[:, _CA], true[:, _CA], m[:, _CA])),
    }
