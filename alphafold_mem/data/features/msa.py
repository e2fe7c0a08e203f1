"""MSA features and transforms (Jumper et al. 2021, Suppl. 1.2.2, 1.2.6, 1.2.7, 1.2.9): merging
parsed alignments into tokens and a deletion matrix (:func:`make_msa_features`), MSA block
deletion, cluster sampling, masked MSA (BERT corruption), nearest-neighbour cluster profiles and
``msa_feat``; :func:`cluster_features` is one draw of the last three, shared by the monomer pipeline,
multimer training and complex prediction (which choose the centres their own way).

The transforms work on numpy arrays with an explicit ``np.random.Generator`` (reproducible per
sample, cheap in data-loader workers). Token alphabet of ``msa``: 0-19 amino acids (``restypes``
order), 20 = X, 21 = gap, 22 = the masked-MSA mask token (AF2 Suppl. 1.2.7).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...geometry import residue_constants as rc
from ..errors import InputError, warn_input
from ..fasta import standard_residues
from ..msa import Msa

__all__ = [
    "msa_to_tokens",
    "make_msa_features",
    "block_delete_msa",
    "sample_msa",
    "make_hhblits_profile",
    "make_masked_msa",
    "masked_msa_for",
    "cluster_features",
    "nearest_neighbor_clusters",
    "summarize_clusters",
    "make_msa_feat",
    "deletion_value",
]

NUM_MSA_CLASSES = 23  # 20 aa + X + gap + mask token
GAP = 21
MASK_TOKEN = 22

# Byte -> our token (hhblits alphabet mapped into restypes_with_x_and_gap); 255 = invalid.
_MSA_LUT = np.full(256, 255, dtype=np.uint8)
for _ch, _hh in rc.HHBLITS_AA_TO_ID.items():
    _MSA_LUT[ord(_ch)] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[_hh]
    _MSA_LUT[ord(_ch.lower())] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[_hh]
_MSA_LUT[ord(".")] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[rc.HHBLITS_AA_TO_ID["-"]]


def msa_to_tokens(sequences: Sequence[str]) -> np.ndarray:
    """Aligned rows -> ``[N_seq, N_res]`` int64 tokens (0-19 aa, 20 X, 21 gap) via AF2's HHblits
    alphabet (B->D, Z->E, U->C, J/O->X).

    Raises:
        ValueError: rows of unequal length or a character outside the alphabet.
    """
    if not sequences:
        return np.zeros((0, 0), dtype=np.int64)
    width = len(sequences[0])
    if any(len(s) != width for s in sequences):
        raise ValueError("MSA rows differ in length")
    raw = np.frombuffer("".join(sequences).encode("ascii", errors="replace"), dtype=np.uint8)
    tokens = _MSA_LUT[raw].reshape(len(sequences), width)
    if (tokens == 255).any():
        i, j = map(int, np.argwhere(tokens == 255)[0])
        raise ValueError(f"invalid MSA character {sequences[i][j]!r} in row {i + 1}, column {j + 1}")
    return tokens.astype(np.int64)


def make_msa_features(sequence: str, msas: Sequence[Msa] = (), *, name: str | None = None) -> dict[str, np.ndarray]:
    """Merge MSAs into ``msa`` ``[N_seq, N_res]`` int64 and ``deletion_matrix`` float32 (counts).

    Row 0 is the query ``sequence``; rows of every MSA follow in order, with exact duplicates
    (same aligned string) dropped as in AF2 ``make_msa_features``. No MSA = single-sequence mode.

    Raises:
        InputError: an MSA whose query length differs from the sequence (naming the MSA file).
    """
    seqs = [sequence.upper()]
    dels = [np.zeros((1, len(sequence)), dtype=np.int32)]
    seen = {seqs[0]}
    query = standard_residues(seqs[0])[0]
    for msa in msas:
        if msa.depth == 0:
            warn_input("empty alignment; using the query alone", file=msa.path, record=name, stacklevel=4)
            continue
        if msa.length != len(sequence):
            raise InputError(
                f"alignment has {msa.length} query columns but the sequence has {len(sequence)} residues",
                file=msa.path,
                record=name or "query",
                line=1,
            )
        first = standard_residues(msa.query)[0]  # J in the MSA is the X of the query (NONSTANDARD)
        if first.replace("-", "") != query and first != query:
            diff = sum(a != b for a, b in zip(first, query))
            if diff:
                warn_input(
                    f"alignment query differs from the sequence at {diff} positions",
                    file=msa.path,
                    record=name or "query",
                    line=1,
                )
        keep = []
        for i, s in enumerate(msa.sequences):
            if s not in seen and (i > 0 or first != query):
                seen.add(s)
                keep.append(i)
        if keep:
            seqs.extend(msa.sequences[i] for i in keep)
            dels.append(np.asarray(msa.deletion_matrix)[keep])
    try:
        tokens = msa_to_tokens(seqs)
    except ValueError as exc:
        raise InputError(str(exc), record=name) from exc
    return {"msa": tokens, "deletion_matrix": np.concatenate(dels).astype(np.float32)}


def block_delete_msa(
    num_seq: int, rng: np.random.Generator, *, fraction_per_block: float = 0.3, num_blocks: int = 5
) -> np.ndarray:
    """Rows kept after MSA block deletion (AF2 Suppl. 1.2.6, training only).

    ``num_blocks`` blocks of ``floor(fraction_per_block * num_seq)`` consecutive rows start at random
    rows and are deleted; the query (row 0) is always kept.

    Returns:
        Sorted int64 row indices, starting with 0.
    """
    block = int(num_seq * fraction_per_block)
    if num_seq <= 1 or block == 0:
        return np.arange(num_seq)
    starts = rng.integers(0, num_seq, size=num_blocks)
    deleted = np.clip(starts[:, None] + np.arange(block)[None, :], 0, num_seq - 1).ravel()
    keep = np.ones(num_seq, dtype=bool)
    keep[deleted] = False
    keep[0] = True
    return np.flatnonzero(keep)


def sample_msa(num_seq: int, max_clusters: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split MSA rows into cluster centres and the rest (AF2 Suppl. 1.2.7, ``sample_msa``).

    The query stays first; the other rows are shuffled; the first ``max_clusters`` rows become the
    cluster centres (``msa_feat`` rows), the remainder the extra MSA, in shuffled order.

    Returns:
        ``(cluster_rows, extra_rows)`` int64 index arrays into the MSA.
    """
    order = np.concatenate([[0], 1 + rng.permutation(max(num_seq - 1, 0))]).astype(np.int64)
    n = max(1, min(max_clusters, num_seq))
    return order[:n], order[n:]


def make_hhblits_profile(msa: np.ndarray) -> np.ndarray:
    """Per-column amino-acid frequencies over all rows, ``[N_res, 22]`` float32 (AF2
    ``make_hhblits_profile``: mean of ``one_hot(msa, 22)``)."""
    num_seq, num_res = msa.shape
    counts = np.zeros((num_res, 22), dtype=np.float32)
    np.add.at(counts, (np.broadcast_to(np.arange(num_res), msa.shape), np.minimum(msa, 21)), 1.0)
    return counts / max(num_seq, 1)


def make_masked_msa(
    msa: np.ndarray,
    profile: np.ndarray,
    rng: np.random.Generator,
    *,
    replace_fraction: float = 0.15,
    uniform_prob: float = 0.1,
    profile_prob: float = 0.1,
    same_prob: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style MSA corruption (AF2 Suppl. 1.2.7, ``make_masked_msa``).

    Each position is selected with probability ``replace_fraction``; a selected token becomes a
    uniformly random amino acid (``uniform_prob``), a sample of the column profile
    (``profile_prob``), stays the same (``same_prob``) or becomes the mask token 22 (the rest).

    Args:
        msa: ``[N_seq, N_res]`` int tokens 0-21.
        profile: ``[N_res, 22]`` from :func:`make_hhblits_profile`.

    Returns:
        ``(masked_msa [N_seq, N_res] int64, bert_mask [N_seq, N_res] float32)``.
    """
    num_seq, num_res = msa.shape
    mask_prob = 1.0 - uniform_prob - profile_prob - same_prob
    probs = np.zeros((num_seq, num_res, NUM_MSA_CLASSES), dtype=np.float32)
    probs[..., :20] = uniform_prob / 20.0
    probs[..., :22] += profile_prob * profile[None]
    np.put_along_axis(probs, msa[..., None], np.take_along_axis(probs, msa[..., None], -1) + same_prob, -1)
    probs[..., MASK_TOKEN] = mask_prob
    cum = np.cumsum(probs, axis=-1)
    u = rng.random((num_seq, num_res, 1), dtype=np.float32) * cum[..., -1:]
    replacement = np.minimum((cum < u).sum(-1), NUM_MSA_CLASSES - 1)
    bert_mask = rng.random((num_seq, num_res)) < replace_fraction
    masked = np.where(bert_mask, replacement, msa).astype(np.int64)
    return masked, bert_mask.astype(np.float32)


def masked_msa_for(
    msa: np.ndarray, profile: np.ndarray, rng: np.random.Generator, data
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`make_masked_msa` with the probabilities of ``data`` (a
    :class:`~alphafold_mem.config.DataConfig`: ``masked_msa_fraction``, ``masked_msa_uniform_prob``,
    ``masked_msa_profile_prob``, ``masked_msa_same_prob``); same shapes and returns."""
    return make_masked_msa(
        msa,
        profile,
        rng,
        replace_fraction=data.masked_msa_fraction,
        uniform_prob=data.masked_msa_uniform_prob,
        profile_prob=data.masked_msa_profile_prob,
        same_prob=data.masked_msa_same_prob,
    )


def nearest_neighbor_clusters(
    msa: np.ndarray, msa_mask: np.ndarray, extra_msa: np.ndarray, extra_mask: np.ndarray
) -> np.ndarray:
    """Assign every extra row to the cluster centre it agrees with most (AF2
    ``nearest_neighbor_clusters`` with gap agreement weight 0): agreement counts positions where both
    rows carry the same amino acid or X; gaps and mask tokens do not count.

    Args:
        msa: ``[N_clust, N_res]`` centre tokens (after masking), ``msa_mask`` likewise;
        extra_msa: ``[N_extra, N_res]`` tokens, ``extra_mask`` likewise.

    Returns:
        ``[N_extra]`` int64 centre index (ties: lowest index).
    """
    if extra_msa.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    agreement = np.zeros((extra_msa.shape[0], msa.shape[0]), dtype=np.float32)
    centre_ok = msa_mask > 0
    extra_ok = extra_mask > 0
    for token in range(21):  # 20 amino acids + X; gap (21) and mask (22) carry weight 0
        c = ((msa == token) & centre_ok).astype(np.float32)
        if not c.any():
            continue
        e = ((extra_msa == token) & extra_ok).astype(np.float32)
        agreement += e @ c.T  # [N_extra, N_res] @ [N_res, N_clust]
    return agreement.argmax(axis=1).astype(np.int64)


def summarize_clusters(
    msa: np.ndarray,
    msa_mask: np.ndarray,
    deletion_matrix: np.ndarray,
    extra_msa: np.ndarray,
    extra_mask: np.ndarray,
    extra_deletion: np.ndarray,
    assignment: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster profiles and mean deletions over each centre and its assigned extra rows (AF2
    ``summarize_clusters``; counts carry a 1e-6 floor).

    Returns:
        ``cluster_profile [N_clust, N_res, 23]`` and ``cluster_deletion_mean [N_clust, N_res]``,
        float32.
    """
    num_clust, num_res = msa.shape
    res = np.arange(num_res)
    counts = 1e-6 + msa_mask.astype(np.float32)
    profile = np.zeros((num_clust, num_res, NUM_MSA_CLASSES), dtype=np.float32)
    np.put_along_axis(profile, msa[..., None], 1.0, axis=-1)
    del_sum = deletion_matrix.astype(np.float32).copy()
    if extra_msa.shape[0]:
        w = extra_mask.astype(np.float32)
        flat = (assignment[:, None] * num_res + res[None, :]) * NUM_MSA_CLASSES + extra_msa
        profile += (
            np.bincount(flat.ravel(), weights=w.ravel(), minlength=num_clust * num_res * NUM_MSA_CLASSES)
            .reshape(profile.shape)
            .astype(np.float32)
        )
        cell = (assignment[:, None] * num_res + res[None, :]).ravel()
        counts += (
            np.bincount(cell, weights=w.ravel(), minlength=num_clust * num_res)
            .reshape(num_clust, num_res)
            .astype(np.float32)
        )
        del_sum += (
            np.bincount(cell, weights=(w * extra_deletion).ravel(), minlength=num_clust * num_res)
            .reshape(num_clust, num_res)
            .astype(np.float32)
        )
    return profile / counts[..., None], del_sum / counts


def deletion_value(d: np.ndarray) -> np.ndarray:
    return (np.arctan(d / 3.0) * (2.0 / np.pi)).astype(np.float32)


def make_msa_feat(
    msa: np.ndarray, deletion_matrix: np.ndarray, cluster_profile: np.ndarray, cluster_deletion_mean: np.ndarray
) -> np.ndarray:
    """``msa_feat [N_clust, N_res, 49]`` float32 (AF2 Suppl. 1.2.9, Table 1): ``one_hot(msa, 23)``,
    ``has_deletion``, ``atan(d/3)*2/pi``, ``cluster_profile`` (23), ``atan(mean_d/3)*2/pi``."""
    n, r = msa.shape
    one_hot = np.zeros((n, r, NUM_MSA_CLASSES), dtype=np.float32)
    np.put_along_axis(one_hot, msa[..., None], 1.0, axis=-1)
    return np.concatenate(
        [
            one_hot,
            np.clip(deletion_matrix, 0.0, 1.0).astype(np.float32)[..., None],
            deletion_value(deletion_matrix)[..., None],
            cluster_profile.astype(np.float32),
            deletion_value(cluster_deletion_mean)[..., None],
        ],
        axis=-1,
    )


def cluster_features(
    tokens: np.ndarray,
    deletions: np.ndarray,
    profile: np.ndarray,
    centres: np.ndarray,
    extra: np.ndarray,
    max_extra: int,
    rng: np.random.Generator,
    data,
    allowed: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """One draw's MSA features from the rows chosen as cluster centres and as extra MSA (AF2 Suppl.
    1.2.7, 1.2.9; AF2-Multimer ``make_masked_msa``, ``nearest_neighbor_clusters``, ``create_msa_feat``,
    ``create_extra_msa_feature``): BERT masking of the centres (:func:`masked_msa_for`), every extra
    row joined to the centre it agrees with most, the cluster profiles and mean deletions, ``msa_feat``.

    Args:
        tokens: ``[N_seq, N_res]`` MSA tokens; deletions: ``[N_seq, N_res]`` float32 deletion counts;
            profile: :func:`make_hhblits_profile` ``(tokens)``.
        centres, extra: row indices of the cluster centres and of the extra rows (all of which join a
            cluster); the first ``max_extra`` extra rows are returned.
        rng: the masking's draws; data: its probabilities (as :func:`masked_msa_for`).
        allowed: ``[N_clust, N_res]``, where the masking may change a centre (AF2-Multimer's
            ``bert_mask``): elsewhere the centre keeps its token and ``bert_mask`` is 0. ``None``:
            everywhere.

    Returns:
        numpy arrays ``msa_feat``, ``msa_mask``, ``extra_msa``, ``extra_msa_mask``,
        ``extra_deletion_matrix``, ``extra_has_deletion``, ``extra_deletion_value``, ``true_msa`` (the
        centres before masking) and ``bert_mask``.
    """
    msa_c, del_c = tokens[centres], deletions[centres]
    extra_msa, del_e = tokens[extra], deletions[extra]
    masked, bert_mask = masked_msa_for(msa_c, profile, rng, data)
    if allowed is not None:
        keep = allowed > 0
        masked, bert_mask = np.where(keep, masked, msa_c), bert_mask * keep
    msa_mask = np.ones(msa_c.shape, np.float32)
    extra_mask = np.ones(extra_msa.shape, np.float32)
    assignment = nearest_neighbor_clusters(masked, msa_mask, extra_msa, extra_mask)
    profile_c, del_mean = summarize_clusters(masked, msa_mask, del_c, extra_msa, extra_mask, del_e, assignment)
    del_e = del_e[:max_extra]
    return {
        "msa_feat": make_msa_feat(masked, del_c, profile_c, del_mean),
        "msa_mask": msa_mask,
        "extra_msa": extra_msa[:max_extra],
        "extra_msa_mask": extra_mask[:max_extra],
        "extra_deletion_matrix": del_e,
        "extra_has_deletion": np.clip(del_e, 0.0, 1.0).astype(np.float32),
        "extra_deletion_value": deletion_value(del_e),
        "true_msa": msa_c,
        "bert_mask": bert_mask,
    }
