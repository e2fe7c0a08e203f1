"""Multi-chain permutation alignment (Evans et al. 2022, AlphaFold-Multimer, Suppl. 7.3).

The chains of a complex that share an entity (identical sequences) are interchangeable: the model
cannot know which copy of a homomer the ground truth calls chain A. Before the losses the
ground-truth chains of each entity are therefore matched to the predicted chains:

1. **Anchor.** Among the entities with a chain in the crop, the one with the fewest chains in the
   whole ground truth (ties: the most residues over all its chains, then a random draw); the
   ground-truth anchor is drawn at random among its chains; every predicted chain of that entity
   is a candidate predicted anchor.
2. **Superposition.** For each candidate, the ground-truth anchor (Cα of the crop's residues of the
   candidate) is superposed onto the predicted anchor by Kabsch; every ground-truth chain is moved
   by that transform.
3. **Greedy assignment.** Predicted chains in ``asym_id`` order each take the unused ground-truth
   chain of the same entity whose (moved) Cα centroid, over the crop's residues, lies closest to
   the predicted chain's. Chains of different entities are never matched.
4. The candidate whose assignment gives the lowest Cα RMSD of the whole crop wins (first on ties).

The draws use python's ``random`` (or the ``rng`` given) in OpenFold's order, so a seed gives
OpenFold's anchor. Renumbering identical ground-truth chains changes nothing but which physical
chain a draw picks: for a prediction whose assignment is clear the result does not depend on it;
where two assignments fit about equally well (an untrained model) the anchor can decide.

The transform only chooses the assignment; the losses see the ground truth as it is. The
ground truth of the whole complex (``gt``: every chain, residues in SEQRES order, as OpenFold's
``gt_features``) is gathered for each predicted chain from its assigned chain at the crop's
``residue_index`` (the 0-based SEQRES position inside the chain).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from ..geometry import residue_constants as rc

__all__ = [
    "PermutationResult",
    "choose_anchor",
    "kabsch_superposition",
    "greedy_assignment",
    "merge_ground_truth",
    "multi_chain_permutation_align",
    "permutation_align_batch",
]

_CA = rc.atom_order["CA"]


@dataclass
class PermutationResult:
    """``align``: pairs ``(i, j)``, predicted chain ``i`` (0-based: ``asym_id`` i + 1 of the batch)
    scored against ground-truth chain ``j`` (``asym_id`` j + 1 of ``gt``); ``anchor_gt_asym_id``;
    ``candidates``: per candidate predicted anchor ``(asym_id, align, rmsd)``; ``labels``: the
    gathered ground truth (every key of ``gt``), ``[N_res, ...]`` of the crop."""

    align: list[tuple[int, int]]
    anchor_gt_asym_id: int
    candidates: list[tuple[int, list[tuple[int, int]], float]]
    labels: dict[str, Tensor]


def _chain_ids(asym_id: Tensor) -> list[int]:
    return [int(a) for a in torch.unique(asym_id) if int(a) != 0]


def choose_anchor(
    gt: dict[str, Tensor], crop_asym_id: Tensor, rng: random.Random | None = None
) -> tuple[int, list[int]]:
    """Step 1: ``(ground-truth anchor asym_id, candidate predicted anchor asym_ids)``.

    Args:
        gt: ``asym_id``, ``entity_id`` ``[N_full]`` of the whole ground truth.
        crop_asym_id: ``[N_res]`` chains of the crop (the predicted chains).
        rng: draws among tied entities and among the anchor entity's chains (default: python's
            ``random`` module).
    """
    draw = rng.choice if rng is not None else random.choice
    present = set(_chain_ids(crop_asym_id))
    count: dict[int, int] = {}
    length: dict[int, int] = {}
    for e in sorted({int(x) for x in gt["entity_id"]} - {0}):
        in_entity = gt["entity_id"] == e
        chains = _chain_ids(gt["asym_id"][in_entity])
        if present & set(chains):
            count[e], length[e] = len(chains), int(in_entity.sum())
    fewest = min(count.values())
    tied = [e for e in count if count[e] == fewest]
    longest = max(length[e] for e in tied)
    tied = [e for e in tied if length[e] == longest]
    entity = tied[0] if len(tied) == 1 else draw(tied)
    chains = _chain_ids(gt["asym_id"][gt["entity_id"] == entity])
    return draw(chains), [a for a in chains if a in present]


def kabsch_superposition(mobile: Tensor, target: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Rotation ``r [3, 3]`` and translation ``t [3]`` minimising the RMSD of ``mobile @ r + t`` to
    ``target`` (row vectors, ``[N, 3]`` each, Å) over the points where ``mask [N]`` is true; proper
    rotation (det +1). No point: the identity."""
    m = mask.bool()
    if not bool(m.any()):
        return torch.eye(3, dtype=mobile.dtype), torch.zeros(3, dtype=mobile.dtype)
    p, q = mobile[m], target[m]
    pc, qc = p.mean(0), q.mean(0)
    u, _, vt = torch.linalg.svd((p - pc).T @ (q - qc))
    d = torch.sign(torch.linalg.det(u @ vt))
    s = torch.diag(torch.stack([torch.ones_like(d), torch.ones_like(d), d]))
    r = u @ s @ vt
    return r, qc - pc @ r


def _chain_rows(gt_asym_id: Tensor) -> dict[int, Tensor]:
    return {a: torch.nonzero(gt_asym_id == a).squeeze(-1) for a in _chain_ids(gt_asym_id)}


def greedy_assignment(
    pred_ca: Tensor,
    pred_ca_mask: Tensor,
    crop: dict[str, Tensor],
    gt_ca: Tensor,
    gt_ca_mask: Tensor,
    gt: dict[str, Tensor],
) -> list[tuple[int, int]]:
    """Step 3: predicted chains in ``asym_id`` order each take the closest unused ground-truth chain
    of their entity by Cα centroid over the crop's residues (both masks applied).

    Args:
        pred_ca, pred_ca_mask: ``[N_res, 3]``, ``[N_res]`` predicted Cα.
        crop: ``asym_id``, ``entity_id``, ``residue_index`` ``[N_res]`` of the crop.
        gt_ca, gt_ca_mask: ``[N_full, 3]`` (already superposed), ``[N_full]``.
        gt: ``asym_id``, ``entity_id`` ``[N_full]``.

    Returns:
        ``[(i, j), ...]`` 0-based predicted / ground-truth chain indices (asym_id - 1).

    Raises:
        ValueError: a predicted chain has no unused ground-truth chain of its entity.
    """
    rows = _chain_rows(gt["asym_id"])
    used: set[int] = set()
    align = []
    for a in _chain_ids(crop["asym_id"]):
        sel = crop["asym_id"] == a
        entity = int(crop["entity_id"][sel][0])
        idx = crop["residue_index"][sel].long()
        best, best_d = None, float("inf")
        for j in _chain_ids(gt["asym_id"][gt["entity_id"] == entity]):
            if j in used:
                continue
            r = rows[j][idx]
            m = (pred_ca_mask[sel] * gt_ca_mask[r]).bool()
            d = (
                float(torch.linalg.norm(pred_ca[sel][m].mean(0) - gt_ca[r][m].mean(0)))
                if bool(m.any())
                else float("inf")
            )
            if best is None or d < best_d:
                best, best_d = j, d
        if best is None:
            raise ValueError(f"predicted chain asym_id {a} (entity {entity}) has no unused ground-truth chain")
        used.add(best)
        align.append((a - 1, best - 1))
    return align


def merge_ground_truth(
    gt: dict[str, Tensor], crop: dict[str, Tensor], align: list[tuple[int, int]]
) -> dict[str, Tensor]:
    """Every ``gt`` key with a leading ``N_full`` dim, gathered for the crop: at the positions of
    predicted chain i the rows of ground-truth chain j at the crop's ``residue_index``; zeros
    elsewhere (padding). Returns ``{key: [N_res, ...]}``."""
    n_full = gt["asym_id"].shape[0]
    n_res = crop["asym_id"].shape[0]
    rows = _chain_rows(gt["asym_id"])
    pos = torch.arange(n_res)
    src = torch.full((n_res,), -1, dtype=torch.long)
    for i, j in align:
        sel = crop["asym_id"] == i + 1
        src[pos[sel]] = rows[j + 1][crop["residue_index"][sel].long()]
    keep = src >= 0
    out = {}
    for k, v in gt.items():
        if v.dim() == 0 or v.shape[0] != n_full:
            continue
        o = v.new_zeros((n_res, *v.shape[1:]))
        o[keep] = v[src[keep]]
        out[k] = o
    return out


def _check(crop: dict[str, Tensor], gt: dict[str, Tensor]) -> None:
    """One line per problem that would make the alignment index outside the ground truth."""
    rows = _chain_rows(gt["asym_id"])
    for a in _chain_ids(crop["asym_id"]):
        sel = crop["asym_id"] == a
        entity = int(crop["entity_id"][sel][0])
        chains = _chain_ids(gt["asym_id"][gt["entity_id"] == entity])
        if a not in rows or not chains:
            raise ValueError(
                f"crop chain asym_id {a} (entity {entity}) is not in the ground truth: build the crop and "
                "the ground truth from the same complex (asym_id / entity_id numbered alike)"
            )
        top = int(crop["residue_index"][sel].max())
        short = [j for j in chains if top >= len(rows[j])]
        if short:
            raise ValueError(
                f"crop chain asym_id {a} has residue_index {top}, beyond ground-truth chain(s) {short} "
                f"of its entity: residue_index must be the 0-based SEQRES position inside the chain"
            )


def _rmsd(a: Tensor, b: Tensor, mask: Tensor) -> float:
    m = mask.bool()
    return float(torch.sqrt(((a[m] - b[m]) ** 2).sum(-1).mean())) if bool(m.any()) else float("inf")


def multi_chain_permutation_align(
    final_atom_positions: Tensor,
    final_atom_mask: Tensor,
    crop: dict[str, Tensor],
    gt: dict[str, Tensor],
    rng: random.Random | None = None,
) -> PermutationResult:
    """Suppl. 7.3 for one example (no batch dim).

    Args:
        final_atom_positions: ``[N_res, 37, 3]`` (Å) predicted atoms; final_atom_mask ``[N_res, 37]``.
        crop: the crop's ``asym_id``, ``entity_id``, ``residue_index`` ``[N_res]`` (int; asym_id 0 =
            padding; chains numbered 1..C as in ``gt``).
        gt: ground truth of the whole complex: ``asym_id``, ``entity_id``, ``all_atom_positions
            [N_full, 37, 3]``, ``all_atom_mask [N_full, 37]`` and any per-residue training target to
            gather (chains in asym_id order, residues in SEQRES order).
        rng: the anchor draws (see :func:`choose_anchor`).

    Returns:
        :class:`PermutationResult`; with one chain in the crop the identity.

    Raises:
        ValueError: a crop chain, its entity or its ``residue_index`` is not in ``gt``, or a predicted
            chain has no ground-truth chain of its entity left (the message names the chain).
    """
    _check(crop, gt)
    chains = _chain_ids(crop["asym_id"])
    if len(chains) == 1:
        align = [(chains[0] - 1, chains[0] - 1)]
        return PermutationResult(align, chains[0], [], merge_ground_truth(gt, crop, align))
    dt = torch.float64
    pred_ca = final_atom_positions[..., _CA, :].detach().to(dt)
    pred_mask = final_atom_mask[..., _CA].detach().to(dt)
    gt_ca = gt["all_atom_positions"][..., _CA, :].detach().to(dt)
    gt_mask = gt["all_atom_mask"][..., _CA].detach().to(dt)
    rows = _chain_rows(gt["asym_id"])
    anchor_gt, anchor_preds = choose_anchor(gt, crop["asym_id"], rng)
    best, best_rmsd, candidates = None, float("inf"), []
    for a in anchor_preds:
        sel = crop["asym_id"] == a
        r_gt = rows[anchor_gt][crop["residue_index"][sel].long()]
        r, t = kabsch_superposition(gt_ca[r_gt], pred_ca[sel], pred_mask[sel] * gt_mask[r_gt])
        moved = gt_ca @ r + t
        align = greedy_assignment(pred_ca, pred_mask, crop, moved, gt_mask, gt)
        merged = merge_ground_truth({"asym_id": gt["asym_id"], "ca": moved, "m": gt_mask}, crop, align)
        rmsd = _rmsd(merged["ca"], pred_ca, pred_mask * merged["m"])
        candidates.append((a, align, rmsd))
        if rmsd < best_rmsd or best is None:
            best, best_rmsd = align, rmsd
    return PermutationResult(best, anchor_gt, candidates, merge_ground_truth(gt, crop, best))


def permutation_align_batch(
    outputs: dict[str, Tensor],
    batch: dict[str, Tensor],
    ground_truth: list[dict[str, Tensor]],
    rng: random.Random | None = None,
) -> dict[str, Tensor]:
    """:func:`multi_chain_permutation_align` for a batch: example ``b`` of ``outputs``
    (``final_atom_positions [B, N_res, 37, 3]``, ``final_atom_mask [B, N_res, 37]``) and ``batch``
    (``asym_id``, ``entity_id``, ``residue_index`` ``[B, N_res]``) against ``ground_truth[b]`` (whole
    complex, no batch dim). Returns ``batch`` with every ground-truth key replaced by the gathered
    labels, stacked ``[B, N_res, ...]``.

    Raises:
        ValueError: ``len(ground_truth)`` is not the batch size, or see
            :func:`multi_chain_permutation_align`.
    """
    n = batch["asym_id"].shape[0]
    if len(ground_truth) != n:
        raise ValueError(f"{len(ground_truth)} ground truths for a batch of {n} examples")
    labels = [
        multi_chain_permutation_align(
            outputs["final_atom_positions"][b],
            outputs["final_atom_mask"][b],
            {k: batch[k][b] for k in ("asym_id", "entity_id", "residue_index")},
            ground_truth[b],
            rng,
        ).labels
        for b in range(n)
    ]
    return {**batch, **{k: torch.stack([lab[k] for lab in labels]) for k in labels[0]}}
