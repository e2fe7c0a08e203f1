"""Training features of a complex for the AF2-Multimer model (Evans et al. 2022, Suppl. 7.2).

:func:`make_complex_training_features` turns a :class:`~.complex_examples.ComplexExample` into one
sample the multimer model and loss read:

1. complex MSA features (:func:`~.multimer_features.complex_msa_features`: per chain the unpaired
   MSAs of its alignment folder when there is one, else its sequence alone; rows paired across the
   chains of a heteromer from the pairing alignments when present);
2. the crop (:mod:`.multimer_crop`), applied to every per-residue and MSA-column feature at once;
3. cluster sampling as AF2-Multimer's ``sample_msa``: the rows of ``cluster_bias_mask`` (the paired
   block's query or each entity's query) stay first, the other rows are shuffled; the first
   ``max_msa_clusters`` rows are cluster centres, the next ``max_extra_msa`` the extra MSA;
4. BERT masking of the centres (``bert_mask`` limited to the merged MSA's ``bert_mask``),
   nearest-neighbour cluster profiles and ``msa_feat`` (:mod:`.features.msa`);
5. ``target_feat`` (21-wide one-hot), atom14 maps, the chain features and the cropped ground truth
   (``all_atom_positions``, ``all_atom_mask``; the other targets are derived after permutation
   alignment, :func:`alphafold_mem.losses.add_ground_truth_features`).

Draws come from the ``np.random.Generator`` given, in a fixed order: a sample is a pure function of
the example, the config and the generator's seed.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from ..geometry import all_atom
from .complex_examples import ComplexExample
from .features.msa import cluster_features, make_hhblits_profile
from .features.templates import empty_template_features
from .multimer_crop import MultimerCrop, apply_crop, choose_crop
from .multimer_features import complex_msa_features

__all__ = ["complex_raw_features", "sample_multimer_msa", "make_complex_training_features"]


def complex_raw_features(example: ComplexExample, msa_dir=None) -> dict[str, np.ndarray]:
    """Uncropped complex features: :func:`~.multimer_features.complex_msa_features` plus the
    ground truth's ``all_atom_positions`` / ``all_atom_mask`` and ``resolution``."""
    raw = complex_msa_features(example.complex, msa_dir)
    gt = example.ground_truth()
    raw["all_atom_positions"] = gt["all_atom_positions"]
    raw["all_atom_mask"] = gt["all_atom_mask"]
    raw["resolution"] = np.asarray(example.resolution or 0.0, np.float32)
    return raw


def sample_multimer_msa(
    feats: Mapping[str, np.ndarray], max_clusters: int, max_extra: int, data, rng: np.random.Generator
) -> dict[str, Tensor]:
    """Steps 3-4 of the module docstring on cropped complex features (``msa``, ``deletion_matrix``,
    ``bert_mask`` ``[N_seq, N_res]``, ``cluster_bias_mask [N_seq]``). ``data``: the config's
    masking fractions. Returns ``msa_feat``, ``msa_mask``, ``extra_msa``, ``extra_msa_mask``,
    ``extra_deletion_matrix``, ``extra_has_deletion``, ``extra_deletion_value``, ``true_msa``, ``bert_mask``."""
    tokens, dels = feats["msa"], feats["deletion_matrix"].astype(np.float32)
    bias = feats["cluster_bias_mask"] > 0
    first, rest = np.flatnonzero(bias), np.flatnonzero(~bias)
    order = np.concatenate([first, rest[rng.permutation(rest.size)]]).astype(np.int64)
    n = max(1, min(max_clusters, order.size))
    centres, extra = order[:n], order[n : n + max_extra]
    c = cluster_features(tokens, dels, make_hhblits_profile(tokens), centres, extra, max_extra, rng, data)
    # the loss's bert_mask within the merged MSA's; the masked tokens themselves are not limited to it
    c["bert_mask"] = (c["bert_mask"] * feats["bert_mask"][centres]).astype(np.float32)
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in c.items()}


def make_complex_training_features(
    raw: Mapping[str, np.ndarray],
    config,
    rng: np.random.Generator,
    crop: MultimerCrop | None = None,
) -> tuple[dict[str, Tensor], str]:
    """One training sample of a complex (module docstring).

    Args:
        raw: :func:`complex_raw_features` of the example (reused across draws).
        config: the multimer ``ModelConfig`` (``data`` sizes and masking; ``template.enabled``).
        rng: the sample's draws (crop first, then MSA sampling and masking).
        crop: crop settings; ``None``: ``MultimerCrop(config.data.crop_size)``. A crop size of 0 or
            less keeps the whole complex (validation).

    Returns:
        ``(features, crop mode)``: tensors without a batch dim; the mode as
        :class:`~.multimer_crop.CropChoice` gives it.
    """
    crop = crop or MultimerCrop(config.data.crop_size)
    choice = choose_crop(raw["all_atom_positions"], raw["all_atom_mask"], raw["asym_id"], crop, rng)
    f = apply_crop(raw, choice.index)
    out = sample_multimer_msa(f, config.data.max_msa_clusters, config.data.max_extra_msa, config.data, rng)
    aatype = torch.from_numpy(np.ascontiguousarray(f["aatype"]))
    out.update(
        {
            "aatype": aatype,
            "residue_index": torch.from_numpy(np.ascontiguousarray(f["residue_index"])),
            "asym_id": torch.from_numpy(np.ascontiguousarray(f["asym_id"])),
            "entity_id": torch.from_numpy(np.ascontiguousarray(f["entity_id"])),
            "sym_id": torch.from_numpy(np.ascontiguousarray(f["sym_id"])),
            "seq_mask": torch.ones(aatype.shape[0]),
            "seq_length": torch.tensor(int(aatype.shape[0])),
            "target_feat": torch.nn.functional.one_hot(aatype, 21).float(),
            "all_atom_positions": torch.from_numpy(np.ascontiguousarray(f["all_atom_positions"])),
            "all_atom_mask": torch.from_numpy(np.ascontiguousarray(f["all_atom_mask"])),
            "resolution": torch.tensor(float(raw["resolution"])),
        }
    )
    out.update(all_atom.make_atom14_masks(aatype))
    if config.template.enabled:
        out.update(empty_template_features(aatype.shape[0]))
    return out, choice.mode
