"""The feature pipeline: :func:`make_features` (Jumper et al. 2021, Suppl. 1.2) turns a query
sequence, its MSAs, optionally templates and (for training) the experimental chain into the batch
the model reads: torch tensors, no batch dim, AF2/OpenFold names (table: :mod:`.spec`). The steps
follow AF2's input pipeline: sequence features (here); MSA tokens and deletion matrix
(deduplicated, query first), in training MSA block deletion (:mod:`.msa`) and a contiguous crop
(:mod:`.crop`); cluster sampling into ``msa_feat`` rows and the extra MSA; BERT masking of the
cluster rows; nearest-neighbour cluster profiles; ``msa_feat`` / ``target_feat`` (:mod:`.msa`);
atom14/atom37 layout maps; template (:mod:`.templates`) and ground-truth (:mod:`.ground_truth`)
geometry (via :mod:`alphafold_mem.geometry.all_atom`).

Deliberate difference from AF2: the crop is taken *before* cluster sampling, so the nearest-neighbour
assignment and profiles only see the cropped columns (AF2 computes them on the full length and crops
afterwards). It keeps the cost proportional to ``N_crop`` instead of ``N_res``.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ...config import model_config
from ...geometry import all_atom
from ...geometry import residue_constants as rc
from ..errors import InputError
from ..fasta import FastaRecord, empty_chains
from ..msa import Msa, parse_msa
from ..structure import ProteinChain
from .crop import crop_indices
from .ground_truth import make_ground_truth_features
from .msa import block_delete_msa, cluster_features, make_hhblits_profile, make_msa_features, sample_msa
from .recycling import add_recycling_dim
from .templates import empty_template_features, make_template_features

__all__ = ["MODES", "sequence_to_aatype", "make_sequence_features", "make_features"]

MODES = ("predict", "eval", "train")


def sequence_to_aatype(sequence: str) -> np.ndarray:
    """One-letter sequence -> ``[N_res]`` int64 in ``restypes`` order; anything outside the 20
    standard letters is X (20), as AF2 ``sequence_to_onehot(map_unknown_to_x=True)``."""
    lut = np.full(256, rc.unk_restype_index, dtype=np.int64)
    for letter, i in rc.restype_order.items():
        lut[ord(letter)] = i
        lut[ord(letter.lower())] = i
    return lut[np.frombuffer(sequence.encode("ascii", errors="replace"), dtype=np.uint8)]


def make_sequence_features(sequence: str) -> dict[str, np.ndarray]:
    """``aatype``, ``residue_index`` (0..N-1), ``between_segment_residues`` (0), ``seq_length``."""
    n = len(sequence)
    return {
        "aatype": sequence_to_aatype(sequence),
        "residue_index": np.arange(n, dtype=np.int64),
        "between_segment_residues": np.zeros(n, dtype=np.float32),
        "seq_length": np.asarray(n, dtype=np.int64),
    }


def _as_sequence(query) -> tuple[str, str]:
    if isinstance(query, (FastaRecord, ProteinChain)):
        return query.sequence, query.name
    if isinstance(query, str):
        return query.upper(), "query"
    raise TypeError(f"expected a sequence string, FastaRecord or ProteinChain, got {type(query).__name__}")


def _as_msas(msa, sequence: str) -> list[Msa]:
    """``msa`` may be None, a path, an :class:`Msa`, or a list of either."""
    if msa is None:
        return []
    items = msa if isinstance(msa, (list, tuple)) else [msa]
    out = []
    for item in items:
        if isinstance(item, Msa):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)):
            out.append(parse_msa(item, query=sequence))
        else:
            raise TypeError(f"msa entries must be paths or Msa records, got {type(item).__name__}")
    return out


def make_features(
    sequence,
    msa=None,
    config=None,
    train: bool = False,
    *,
    structure: ProteinChain | None = None,
    templates: Sequence = (),
    mode: str | None = None,
    seed: int | np.random.Generator = 0,
    block_delete: bool | None = None,
    spatial_crop_prob: float = 0.0,
    recycling_slices: int | None = None,
) -> dict[str, Tensor]:
    """Build one sample's model inputs (see :data:`~.spec.FEATURES` and the table in :mod:`.spec`).

    Args:
        sequence: one-letter string, :class:`FastaRecord` or :class:`ProteinChain` (its SEQRES).
        msa: ``None`` (single-sequence mode), a path to an ``.a3m``/``.sto`` file, an :class:`Msa`,
            or a list of these (merged in order, duplicates dropped). The first row of every MSA
            must equal the sequence.
        config: a ``ModelConfig`` (``config.data`` sizes and masking fractions, ``config.template``);
            ``None`` = ``model_config("model_1")``.
        train: shorthand for ``mode="train"``.
        structure: the experimental chain (same SEQRES), required for ``train``/``eval``.
        templates: template chains or ``(chain, mapping)`` pairs; used when ``config.template.enabled``
            (the first ``max_templates``; a random subset of that size in training).
        mode: ``"predict"`` (inputs only), ``"eval"`` (+ ground truth, full length) or ``"train"``
            (+ ground truth, MSA block deletion, random crop to ``config.data.crop_size``).
        seed: int seed or ``np.random.Generator``; the same seed gives the same sample.
        block_delete: override MSA block deletion (default: on in training only).
        spatial_crop_prob: probability of a spatial instead of a contiguous crop in training.
        recycling_slices: ``None``: one draw of the MSA clusters. An int ``R``: every feature gets a
            trailing recycling dim of size ``R`` (OpenFold's layout, ``AlphaFold.forward(...,
            recycle_dim=-1)``), and each slice has its own cluster sample, BERT masking and masked-MSA
            targets (AF2 Suppl. 1.10: the MSA is resampled for every recycling iteration); the
            other features are the same in every slice (crop, templates, ground truth).

    Returns:
        ``dict[str, Tensor]`` without a batch dim, accepted by ``AlphaFold.forward``. MSA masking
        (``config.data.masked_msa_fraction``) is applied in every mode, as AF2 does at inference;
        ``true_msa``/``bert_mask`` are returned in train/eval.

    Raises:
        InputError: empty sequence, ``:`` in it, MSA/structure that do not match the sequence.
        ValueError: unknown mode, or train/eval without a structure.
    """
    if config is None:
        config = model_config("model_1")
    mode = mode or ("train" if train else "predict")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    sequence, name = _as_sequence(sequence)
    if not sequence:
        raise InputError("empty sequence", record=name)
    if ":" in sequence:
        empty = empty_chains(sequence)
        detail = f" (and chain {empty[0][0]} of {empty[0][1]} is empty)" if empty else ""
        raise InputError(f"':' chain separator is not supported by the monomer pipeline{detail}", record=name)
    data = config.data
    with_gt = mode in ("train", "eval")
    if with_gt:
        if structure is None:
            raise ValueError(f"mode '{mode}' needs the experimental structure")
        if len(structure) != len(sequence):
            raise InputError(
                f"structure has {len(structure)} SEQRES residues but the sequence has {len(sequence)}",
                file=structure.path,
                record=structure.name,
            )

    feats = make_sequence_features(sequence)
    msa_feats = make_msa_features(sequence, _as_msas(msa, sequence), name=name)
    tokens, deletions = msa_feats["msa"], msa_feats["deletion_matrix"]
    if (mode == "train") if block_delete is None else block_delete:
        rows = block_delete_msa(tokens.shape[0], rng)
        tokens, deletions = tokens[rows], deletions[rows]

    # Crop (training), applied to every per-residue array.
    n_res = len(sequence)
    crop = np.arange(n_res)
    if mode == "train":
        crop = crop_indices(n_res, data.crop_size, rng, structure, spatial_crop_prob)
    for key in ("aatype", "residue_index", "between_segment_residues"):
        feats[key] = feats[key][crop]
    feats["seq_length"] = np.asarray(len(crop), dtype=np.int64)
    tokens, deletions = tokens[:, crop], deletions[:, crop]

    # Templates (AF2: the MSA budget shrinks by max_templates when templates are used).
    use_templates = bool(config.template.enabled)
    max_clusters = data.max_msa_clusters
    if use_templates and data.reduce_msa_clusters_by_max_templates:
        max_clusters = max(1, max_clusters - config.template.max_templates)

    # Cluster sampling, masking and summaries (Suppl. 1.2.7), once per recycling slice (Suppl. 1.10).
    profile = make_hhblits_profile(tokens)
    slices = [
        _sample_clusters(tokens, deletions, profile, data, max_clusters, rng) for _ in range(recycling_slices or 1)
    ]

    aatype = torch.from_numpy(feats["aatype"])
    n = aatype.shape[0]
    target_feat = torch.cat(
        [
            torch.from_numpy(feats["between_segment_residues"]).clamp(0, 1)[:, None],
            torch.nn.functional.one_hot(aatype, 21).float(),
        ],
        dim=-1,
    )
    out: dict[str, Tensor] = {
        "aatype": aatype,
        "residue_index": torch.from_numpy(feats["residue_index"]),
        "seq_mask": torch.ones(n, dtype=torch.float32),
        "between_segment_residues": torch.from_numpy(feats["between_segment_residues"]),
        "seq_length": torch.from_numpy(feats["seq_length"]),
        "target_feat": target_feat,
        **{k: v for k, v in slices[0].items() if k not in _GT_MSA_KEYS},
    }
    out.update(all_atom.make_atom14_masks(aatype))

    if use_templates:
        chosen = list(templates)
        k = min(len(chosen), config.template.max_templates)
        if mode == "train" and k:
            chosen = [chosen[i] for i in sorted(rng.choice(len(chosen), size=k, replace=False))]
        else:
            chosen = chosen[:k]
        # Geometry on the full length first, so torsions at crop edges see their real neighbours.
        # No template given: one empty placeholder (template_mask 0), as AF2's zero padding.
        tfeats = make_template_features(sequence, chosen) if chosen else empty_template_features(len(sequence))
        idx = torch.from_numpy(crop)
        out.update({key: v[:, idx] if v.dim() > 1 else v for key, v in tfeats.items()})

    if with_gt:
        out.update({k: slices[0][k] for k in _GT_MSA_KEYS})
        pos = torch.from_numpy(np.array(structure.atom37_positions[crop]))
        mask = torch.from_numpy(np.array(structure.atom37_mask[crop]))
        out.update(make_ground_truth_features(aatype, pos, mask))
        out["resolution"] = torch.tensor(float(structure.resolution or 0.0), dtype=torch.float32)
    if recycling_slices is not None:
        out = add_recycling_dim(out, [{k: v for k, v in sl.items() if k in out} for sl in slices])
    return out


_GT_MSA_KEYS = ("true_msa", "bert_mask")


def _sample_clusters(
    tokens: np.ndarray, deletions: np.ndarray, profile: np.ndarray, data, max_clusters: int, rng: np.random.Generator
) -> dict[str, Tensor]:
    """One draw of the MSA cluster features (Suppl. 1.2.7): cluster centres and extra rows
    (:func:`sample_msa`), BERT masking of the centres, nearest-neighbour cluster profiles, ``msa_feat``
    and the extra-MSA features, plus the masked-MSA targets ``true_msa`` / ``bert_mask``."""
    centres, rest = sample_msa(tokens.shape[0], max_clusters, rng)
    c = cluster_features(tokens, deletions, profile, centres, rest, data.max_extra_msa, rng, data)
    # the monomer model reads the extra deletions as extra_has_deletion / extra_deletion_value
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in c.items() if k != "extra_deletion_matrix"}
