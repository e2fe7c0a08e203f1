"""Model input features: the feature table and :func:`make_features` (Jumper et al. 2021, Suppl. 1.2).

:func:`make_features` turns a query sequence, its MSAs, optionally templates and (for training) the
experimental chain into the batch the model reads: torch tensors, no batch dim, AF2/OpenFold
names. The steps follow AF2's input pipeline: sequence features; MSA tokens and deletion matrix
(deduplicated, query first); in training MSA block deletion and a contiguous crop; cluster sampling
into ``msa_feat`` rows and the extra MSA; BERT masking of the cluster rows; nearest-neighbour
cluster profiles; ``msa_feat`` / ``target_feat``; atom14/atom37 layout maps; template and
ground-truth geometry (via :mod:`alphafold_mem.geometry.all_atom`).

Deliberate difference from AF2: the crop is taken *before* cluster sampling, so the nearest-neighbour
assignment and profiles only see the cropped columns (AF2 computes them on the full length and crops
afterwards). It keeps the cost proportional to ``N_crop`` instead of ``N_res``.

Feature table (``N_res`` residues, ``N_seq`` cluster rows, ``N_extra`` extra rows, ``N_templ``
templates; all float32 unless noted):

==================================== ========================== ==================================
key                                  shape                      meaning
==================================== ========================== ==================================
aatype                               [N_res] int64              0-19 ``restypes``, 20 = X
residue_index                        [N_res] int64              SEQRES index (0-based)
seq_mask                             [N_res]                    1 = real residue
between_segment_residues             [N_res]                    0 (monomer)
seq_length                           [] int64                   N_res before padding
target_feat                          [N_res, 22]                [has_break, one_hot(aatype, 21)]
msa_feat                             [N_seq, N_res, 49]         Table 1, see transforms.make_msa_feat
msa_mask                             [N_seq, N_res]             1 = real row
extra_msa                            [N_extra, N_res] int64     tokens 0-21 (X 20, gap 21)
extra_msa_mask                       [N_extra, N_res]
extra_has_deletion                   [N_extra, N_res]           deletion count > 0
extra_deletion_value                 [N_extra, N_res]           atan(d/3)*2/pi
atom37_atom_exists                   [N_res, 37]
atom14_atom_exists                   [N_res, 14]
residx_atom14_to_atom37              [N_res, 14] int64
residx_atom37_to_atom14              [N_res, 37] int64
template_aatype                      [N_templ, N_res] int64     0-20, 21 = gap (unaligned)
template_all_atom_positions          [N_templ, N_res, 37, 3]    Å
template_all_atom_mask               [N_templ, N_res, 37]
template_pseudo_beta(_mask)          [N_templ, N_res, 3] / [..] Å, CB (CA for Gly)
template_torsion_angles_sin_cos      [N_templ, N_res, 7, 2]     (sin, cos)
template_alt_torsion_angles_sin_cos  [N_templ, N_res, 7, 2]
template_torsion_angles_mask         [N_templ, N_res, 7]
template_mask                        [N_templ]
-- training / evaluation (ground truth) --
true_msa                             [N_seq, N_res] int64       cluster rows before masking
bert_mask                            [N_seq, N_res]             1 = position was corrupted
all_atom_positions                   [N_res, 37, 3]             Å
all_atom_mask                        [N_res, 37]
atom14_gt_positions / _alt_          [N_res, 14, 3]             Å
atom14_gt_exists / _alt_ / is_ambig. [N_res, 14]
rigidgroups_gt_frames / _alt_        [N_res, 8, 4, 4]           Å (translation)
rigidgroups_gt_exists / group_exists [N_res, 8]
rigidgroups_group_is_ambiguous       [N_res, 8]
backbone_rigid_tensor                [N_res, 4, 4]              group 0 frame
backbone_rigid_mask                  [N_res]
chi_angles_sin_cos                   [N_res, 4, 2]
chi_mask                             [N_res, 4]
pseudo_beta                          [N_res, 3]                 Å
pseudo_beta_mask                     [N_res]
resolution                           []                         Å (0 when not given)
==================================== ========================== ==================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..geometry import all_atom
from ..geometry import residue_constants as rc
from . import transforms as T
from .errors import InputError, warn_input
from .mmcif import ProteinChain
from .parsers import FastaRecord, Msa, parse_msa

__all__ = [
    "FEATURES", "FeatureSpec", "check_features", "sequence_to_aatype", "msa_to_tokens",
    "make_sequence_features", "make_msa_features",
    "make_template_features", "empty_template_features", "align_template", "make_features", "MODES",
]

MODES = ("predict", "eval", "train")

@dataclass(frozen=True)
class FeatureSpec:
    """One batch feature: symbolic shape (str = size symbol, int = fixed), dtype, group, meaning."""

    shape: tuple
    dtype: torch.dtype
    group: str  # "input", "template" or "ground_truth"
    doc: str


_F32, _I64 = torch.float32, torch.int64
#: The feature table (single source of truth; the docstring table mirrors it). Symbols: ``N_res``,
#: ``N_seq`` (msa_feat rows), ``N_extra``, ``N_templ``.
FEATURES: dict[str, FeatureSpec] = {
    "aatype": FeatureSpec(("N_res",), _I64, "input", "0-19 restypes, 20 = X"),
    "residue_index": FeatureSpec(("N_res",), _I64, "input", "SEQRES index, 0-based"),
    "seq_mask": FeatureSpec(("N_res",), _F32, "input", "1 = real residue"),
    "between_segment_residues": FeatureSpec(("N_res",), _F32, "input", "0 for a monomer"),
    "seq_length": FeatureSpec((), _I64, "input", "N_res before padding"),
    "target_feat": FeatureSpec(("N_res", 22), _F32, "input", "[has_break, one_hot(aatype, 21)]"),
    "msa_feat": FeatureSpec(("N_seq", "N_res", 49), _F32, "input",
                            "[one_hot(msa,23), has_del, atan(d/3)*2/pi, cluster_profile(23), atan(mean_d/3)*2/pi]"),
    "msa_mask": FeatureSpec(("N_seq", "N_res"), _F32, "input", "1 = real row"),
    "extra_msa": FeatureSpec(("N_extra", "N_res"), _I64, "input", "tokens 0-21 (20 X, 21 gap)"),
    "extra_msa_mask": FeatureSpec(("N_extra", "N_res"), _F32, "input", "1 = real row"),
    "extra_has_deletion": FeatureSpec(("N_extra", "N_res"), _F32, "input", "deletion count > 0"),
    "extra_deletion_value": FeatureSpec(("N_extra", "N_res"), _F32, "input", "atan(d/3)*2/pi"),
    "atom37_atom_exists": FeatureSpec(("N_res", 37), _F32, "input", "atom exists for the residue type"),
    "atom14_atom_exists": FeatureSpec(("N_res", 14), _F32, "input", "atom14 slot used"),
    "residx_atom14_to_atom37": FeatureSpec(("N_res", 14), _I64, "input", "atom14 slot -> atom37 index"),
    "residx_atom37_to_atom14": FeatureSpec(("N_res", 37), _I64, "input", "atom37 index -> atom14 slot"),
    "template_aatype": FeatureSpec(("N_templ", "N_res"), _I64, "template", "0-20, 21 = gap (unaligned)"),
    "template_all_atom_positions": FeatureSpec(("N_templ", "N_res", 37, 3), _F32, "template", "Å"),
    "template_all_atom_mask": FeatureSpec(("N_templ", "N_res", 37), _F32, "template", "resolved atoms"),
    "template_pseudo_beta": FeatureSpec(("N_templ", "N_res", 3), _F32, "template", "CB (CA for Gly), Å"),
    "template_pseudo_beta_mask": FeatureSpec(("N_templ", "N_res"), _F32, "template", ""),
    "template_torsion_angles_sin_cos": FeatureSpec(("N_templ", "N_res", 7, 2), _F32, "template", "(sin, cos)"),
    "template_alt_torsion_angles_sin_cos": FeatureSpec(("N_templ", "N_res", 7, 2), _F32, "template",
                                                       "pi-periodic chis rotated by pi"),
    "template_torsion_angles_mask": FeatureSpec(("N_templ", "N_res", 7), _F32, "template", ""),
    "template_mask": FeatureSpec(("N_templ",), _F32, "template", "1 = real template"),
    "true_msa": FeatureSpec(("N_seq", "N_res"), _I64, "ground_truth", "cluster rows before masking"),
    "bert_mask": FeatureSpec(("N_seq", "N_res"), _F32, "ground_truth", "1 = corrupted position"),
    "all_atom_positions": FeatureSpec(("N_res", 37, 3), _F32, "ground_truth", "Å"),
    "all_atom_mask": FeatureSpec(("N_res", 37), _F32, "ground_truth", "resolved atoms"),
    "atom14_gt_positions": FeatureSpec(("N_res", 14, 3), _F32, "ground_truth", "Å"),
    "atom14_gt_exists": FeatureSpec(("N_res", 14), _F32, "ground_truth", ""),
    "atom14_alt_gt_positions": FeatureSpec(("N_res", 14, 3), _F32, "ground_truth", "symmetric atoms swapped"),
    "atom14_alt_gt_exists": FeatureSpec(("N_res", 14), _F32, "ground_truth", ""),
    "atom14_atom_is_ambiguous": FeatureSpec(("N_res", 14), _F32, "ground_truth", ""),
    "rigidgroups_gt_frames": FeatureSpec(("N_res", 8, 4, 4), _F32, "ground_truth", "4x4, Å"),
    "rigidgroups_gt_exists": FeatureSpec(("N_res", 8), _F32, "ground_truth", ""),
    "rigidgroups_group_exists": FeatureSpec(("N_res", 8), _F32, "ground_truth", ""),
    "rigidgroups_group_is_ambiguous": FeatureSpec(("N_res", 8), _F32, "ground_truth", ""),
    "rigidgroups_alt_gt_frames": FeatureSpec(("N_res", 8, 4, 4), _F32, "ground_truth", "4x4, Å"),
    "backbone_rigid_tensor": FeatureSpec(("N_res", 4, 4), _F32, "ground_truth", "group-0 frame, Å"),
    "backbone_rigid_mask": FeatureSpec(("N_res",), _F32, "ground_truth", ""),
    "chi_angles_sin_cos": FeatureSpec(("N_res", 4, 2), _F32, "ground_truth", "(sin, cos)"),
    "chi_mask": FeatureSpec(("N_res", 4), _F32, "ground_truth", ""),
    "pseudo_beta": FeatureSpec(("N_res", 3), _F32, "ground_truth", "CB (CA for Gly), Å"),
    "pseudo_beta_mask": FeatureSpec(("N_res",), _F32, "ground_truth", ""),
    "resolution": FeatureSpec((), _F32, "ground_truth", "Å, 0 when unknown"),
}


def check_features(features: dict, *, batched: bool = False) -> dict[str, int]:
    """Check every known feature's dtype and shape against :data:`FEATURES` with one consistent size
    per symbol; returns the symbol sizes. Unknown keys are ignored.

    Raises:
        ValueError: naming the key, the expected and the actual shape/dtype.
    """
    sizes: dict[str, int] = {}
    lead = 1 if batched else 0
    for key, value in features.items():
        spec = FEATURES.get(key)
        if spec is None:
            continue
        if value.dtype != spec.dtype:
            raise ValueError(f"feature '{key}': dtype {value.dtype}, expected {spec.dtype}")
        shape = tuple(value.shape[lead:])
        if len(shape) != len(spec.shape):
            raise ValueError(f"feature '{key}': shape {tuple(value.shape)}, expected {spec.shape}")
        for dim, want in zip(shape, spec.shape):
            if isinstance(want, int):
                if dim != want:
                    raise ValueError(f"feature '{key}': shape {shape}, expected {spec.shape}")
            elif sizes.setdefault(want, dim) != dim:
                raise ValueError(f"feature '{key}': {want}={dim} but another feature has {want}={sizes[want]}")
    return sizes


# Byte -> our token (hhblits alphabet mapped into restypes_with_x_and_gap); 255 = invalid.
_MSA_LUT = np.full(256, 255, dtype=np.uint8)
for _ch, _hh in rc.HHBLITS_AA_TO_ID.items():
    _MSA_LUT[ord(_ch)] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[_hh]
    _MSA_LUT[ord(_ch.lower())] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[_hh]
_MSA_LUT[ord(".")] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[rc.HHBLITS_AA_TO_ID["-"]]


def sequence_to_aatype(sequence: str) -> np.ndarray:
    """One-letter sequence -> ``[N_res]`` int64 in ``restypes`` order; anything outside the 20
    standard letters is X (20), as AF2 ``sequence_to_onehot(map_unknown_to_x=True)``."""
    lut = np.full(256, rc.unk_restype_index, dtype=np.int64)
    for letter, i in rc.restype_order.items():
        lut[ord(letter)] = i
        lut[ord(letter.lower())] = i
    return lut[np.frombuffer(sequence.encode("ascii", errors="replace"), dtype=np.uint8)]


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


def make_sequence_features(sequence: str) -> dict[str, np.ndarray]:
    """``aatype``, ``residue_index`` (0..N-1), ``between_segment_residues`` (0), ``seq_length``."""
    n = len(sequence)
    return {
        "aatype": sequence_to_aatype(sequence),
        "residue_index": np.arange(n, dtype=np.int64),
        "between_segment_residues": np.zeros(n, dtype=np.float32),
        "seq_length": np.asarray(n, dtype=np.int64),
    }


def make_msa_features(sequence: str, msas: Sequence[Msa] = (), *, name: str | None = None
                      ) -> dict[str, np.ndarray]:
    """Merge MSAs into ``msa`` ``[N_seq, N_res]`` int64 and ``deletion_matrix`` float32 (counts).

    Row 0 is the query ``sequence``; rows of every MSA follow in order, with exact duplicates
    (same aligned string) dropped as in AF2 ``make_msa_features``. No MSA = single-sequence mode.

    Raises:
        InputError: an MSA whose query length differs from the sequence (naming the MSA file).
    """
    seqs = [sequence.upper()]
    dels = [np.zeros((1, len(sequence)), dtype=np.int32)]
    seen = {seqs[0]}
    for msa in msas:
        if msa.depth == 0:
            warn_input("empty alignment; using the query alone", file=msa.path, record=name, stacklevel=4)
            continue
        if msa.length != len(sequence):
            raise InputError(f"alignment has {msa.length} query columns but the sequence has "
                             f"{len(sequence)} residues", file=msa.path, record=name or "query", line=1)
        if msa.query.replace("-", "") != sequence.upper() and msa.query != sequence.upper():
            diff = sum(a != b for a, b in zip(msa.query, sequence.upper()))
            if diff:
                warn_input(f"alignment query differs from the sequence at {diff} positions",
                           file=msa.path, record=name or "query", line=1)
        keep = []
        for i, s in enumerate(msa.sequences):
            if s not in seen:
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


# ----------------------------------------------------------------------------------------------
# Templates


def align_template(query: str, template: str) -> np.ndarray:
    """Query index -> template index (-1 where unaligned) by a global alignment with free end gaps
    (Biopython ``PairwiseAligner``, BLOSUM62, gap open -11 / extend -1)."""
    from Bio import Align
    from Bio.Align import substitution_matrices

    aligner = Align.PairwiseAligner(mode="global")
    aligner.substitution_matrix = substitution_matrices.load("BLOSUM62")
    aligner.open_gap_score, aligner.extend_gap_score = -11.0, -1.0
    aligner.end_gap_score = 0.0
    aln = aligner.align(query.upper(), template.upper())[0]
    mapping = np.full(len(query), -1, dtype=np.int64)
    for (q0, q1), (t0, t1) in zip(*aln.aligned):
        mapping[q0:q1] = np.arange(t0, t1)
    return mapping


def make_template_features(query: str, templates: Sequence[ProteinChain | tuple[ProteinChain, np.ndarray]]
                           ) -> dict[str, Tensor]:
    """Template features (AF2 Suppl. 1.2.3, 1.7.1) for ``N_templ`` chains aligned to ``query``.

    Args:
        query: the query sequence (``N_res``).
        templates: chains, or ``(chain, mapping)`` with ``mapping[i]`` = template residue aligned
            to query residue ``i`` (-1 = none); without a mapping :func:`align_template` is used.

    Returns:
        The ``template_*`` tensors of the feature table (``template_aatype`` 21 and zero masks
        where unaligned); an empty ``[0, ...]`` set when ``templates`` is empty.
    """
    n = len(query)
    aatype = np.full((len(templates), n), rc.restype_num + 1, dtype=np.int64)
    pos = np.zeros((len(templates), n, rc.atom_type_num, 3), dtype=np.float32)
    mask = np.zeros((len(templates), n, rc.atom_type_num), dtype=np.float32)
    for t, item in enumerate(templates):
        chain, mapping = item if isinstance(item, tuple) else (item, None)
        if mapping is None:
            mapping = align_template(query, chain.sequence)
        mapping = np.asarray(mapping, dtype=np.int64)
        if mapping.shape != (n,) or mapping.max(initial=-1) >= len(chain):
            raise InputError(f"template mapping must have shape ({n},) with indices < {len(chain)}",
                             file=chain.path, record=chain.name)
        q = np.flatnonzero(mapping >= 0)
        aatype[t, q] = chain.aatype[mapping[q]]
        pos[t, q] = chain.atom37_positions[mapping[q]]
        mask[t, q] = chain.atom37_mask[mapping[q]]
    out = {
        "template_aatype": torch.from_numpy(aatype),
        "template_all_atom_positions": torch.from_numpy(pos),
        "template_all_atom_mask": torch.from_numpy(mask),
        "template_mask": torch.ones(len(templates), dtype=torch.float32),
    }
    out.update(_template_geometry(out["template_aatype"], out["template_all_atom_positions"],
                                  out["template_all_atom_mask"]))
    return out


def empty_template_features(n_res: int, n_templ: int = 1) -> dict[str, Tensor]:
    """``n_templ`` all-masked placeholder templates (``template_mask`` 0, aatype gap), for a model
    with templates enabled when no template is available."""
    aatype = torch.full((n_templ, n_res), rc.restype_num + 1, dtype=torch.int64)
    pos = torch.zeros(n_templ, n_res, rc.atom_type_num, 3)
    mask = torch.zeros(n_templ, n_res, rc.atom_type_num)
    out = {"template_aatype": aatype, "template_all_atom_positions": pos, "template_all_atom_mask": mask,
           "template_mask": torch.zeros(n_templ)}
    out.update(_template_geometry(aatype, pos, mask))
    return out


def _template_geometry(aatype: Tensor, pos: Tensor, mask: Tensor) -> dict[str, Tensor]:
    pb, pb_mask = all_atom.pseudo_beta(aatype, pos, mask)
    tors = all_atom.atom37_to_torsion_angles(aatype, pos, mask)
    return {
        "template_pseudo_beta": pb * pb_mask[..., None],
        "template_pseudo_beta_mask": pb_mask,
        "template_torsion_angles_sin_cos": tors["torsion_angles_sin_cos"],
        "template_alt_torsion_angles_sin_cos": tors["alt_torsion_angles_sin_cos"],
        "template_torsion_angles_mask": tors["torsion_angles_mask"],
    }


# ----------------------------------------------------------------------------------------------
# Ground truth


def _ground_truth(aatype: Tensor, pos: Tensor, mask: Tensor) -> dict[str, Tensor]:
    out = {"all_atom_positions": pos, "all_atom_mask": mask}
    out.update(all_atom.make_atom14_gt(aatype, pos, mask))
    out.update(all_atom.atom37_to_frames(aatype, pos, mask))
    tors = all_atom.atom37_to_torsion_angles(aatype, pos, mask)
    out["backbone_rigid_tensor"] = out["rigidgroups_gt_frames"][..., 0, :, :]
    out["backbone_rigid_mask"] = out["rigidgroups_gt_exists"][..., 0]
    out["chi_angles_sin_cos"] = tors["torsion_angles_sin_cos"][..., 3:, :]
    out["chi_mask"] = tors["torsion_angles_mask"][..., 3:]
    pb, pb_mask = all_atom.pseudo_beta(aatype, pos, mask)
    out["pseudo_beta"] = pb * pb_mask[..., None]
    out["pseudo_beta_mask"] = pb_mask
    return out


# ----------------------------------------------------------------------------------------------
# The whole pipeline


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


def _crop_indices(n_res: int, crop_size: int, rng: np.random.Generator, structure, spatial_prob: float
                  ) -> np.ndarray:
    """Residue indices of a training crop: contiguous (AF2 monomer, Suppl. 1.2.8), or with
    probability ``spatial_prob`` the ``crop_size`` residues whose CA is nearest to a random resolved
    residue's CA (cheap O(N_res) spatial crop; unresolved residues are ranked last)."""
    if n_res <= crop_size:
        return np.arange(n_res)
    if structure is not None and spatial_prob > 0 and rng.random() < spatial_prob:
        ca = rc.atom_order["CA"]
        resolved = np.flatnonzero(structure.atom37_mask[:, ca] > 0)
        if resolved.size:
            centre = structure.atom37_positions[rng.choice(resolved), ca]
            d = np.linalg.norm(structure.atom37_positions[:, ca] - centre, axis=-1)
            d[structure.atom37_mask[:, ca] == 0] = np.inf
            return np.sort(np.argsort(d, kind="stable")[:crop_size])
    start = T.crop_start(n_res, crop_size, rng)
    return np.arange(start, start + crop_size)


def make_features(sequence, msa=None, config=None, train: bool = False, *,
                  structure: ProteinChain | None = None, templates: Sequence = (), mode: str | None = None,
                  seed: int | np.random.Generator = 0, block_delete: bool | None = None,
                  spatial_crop_prob: float = 0.0) -> dict[str, Tensor]:
    """Build one sample's model inputs (see :data:`FEATURES` and the table in the module docstring).

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

    Returns:
        ``dict[str, Tensor]`` without a batch dim, accepted by ``AlphaFold.forward``. MSA masking
        (``config.data.masked_msa_fraction``) is applied in every mode, as AF2 does at inference;
        ``true_msa``/``bert_mask`` are returned in train/eval.

    Raises:
        InputError: empty sequence, ``:`` in it, MSA/structure that do not match the sequence.
        ValueError: unknown mode, or train/eval without a structure.
    """
    if config is None:
        from ..config import model_config
        config = model_config("model_1")
    mode = mode or ("train" if train else "predict")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    sequence, name = _as_sequence(sequence)
    if not sequence:
        raise InputError("empty sequence", record=name)
    if ":" in sequence:
        raise InputError("':' chain separator is not supported by the monomer pipeline", record=name)
    data = config.data
    with_gt = mode in ("train", "eval")
    if with_gt:
        if structure is None:
            raise ValueError(f"mode '{mode}' needs the experimental structure")
        if len(structure) != len(sequence):
            raise InputError(f"structure has {len(structure)} SEQRES residues but the sequence has "
                             f"{len(sequence)}", file=structure.path, record=structure.name)

    feats = make_sequence_features(sequence)
    msa_feats = make_msa_features(sequence, _as_msas(msa, sequence), name=name)
    tokens, deletions = msa_feats["msa"], msa_feats["deletion_matrix"]
    if (mode == "train") if block_delete is None else block_delete:
        rows = T.block_delete_msa(tokens.shape[0], rng)
        tokens, deletions = tokens[rows], deletions[rows]

    # Crop (training), applied to every per-residue array.
    n_res = len(sequence)
    crop = np.arange(n_res)
    if mode == "train":
        crop = _crop_indices(n_res, data.crop_size, rng, structure, spatial_crop_prob)
    for key in ("aatype", "residue_index", "between_segment_residues"):
        feats[key] = feats[key][crop]
    feats["seq_length"] = np.asarray(len(crop), dtype=np.int64)
    tokens, deletions = tokens[:, crop], deletions[:, crop]

    # Templates (AF2: the MSA budget shrinks by max_templates when templates are used).
    use_templates = bool(config.template.enabled)
    max_clusters = data.max_msa_clusters
    if use_templates and data.reduce_msa_clusters_by_max_templates:
        max_clusters = max(1, max_clusters - config.template.max_templates)

    # Cluster sampling, masking and summaries (Suppl. 1.2.7).
    profile = T.make_hhblits_profile(tokens)
    centres, rest = T.sample_msa(tokens.shape[0], max_clusters, rng)
    msa_c, del_c = tokens[centres], deletions[centres]
    extra, del_e = tokens[rest], deletions[rest]
    masked, bert_mask = T.make_masked_msa(
        msa_c, profile, rng, replace_fraction=data.masked_msa_fraction,
        uniform_prob=data.masked_msa_uniform_prob, profile_prob=data.masked_msa_profile_prob,
        same_prob=data.masked_msa_same_prob)
    msa_mask = np.ones(msa_c.shape, dtype=np.float32)
    extra_mask = np.ones(extra.shape, dtype=np.float32)
    assignment = T.nearest_neighbor_clusters(masked, msa_mask, extra, extra_mask)
    profile_c, del_mean = T.summarize_clusters(masked, msa_mask, del_c, extra, extra_mask, del_e, assignment)
    n_extra = data.max_extra_msa
    extra, del_e, extra_mask = extra[:n_extra], del_e[:n_extra], extra_mask[:n_extra]

    aatype = torch.from_numpy(feats["aatype"])
    n = aatype.shape[0]
    target_feat = torch.cat([
        torch.from_numpy(feats["between_segment_residues"]).clamp(0, 1)[:, None],
        torch.nn.functional.one_hot(aatype, 21).float(),
    ], dim=-1)
    out: dict[str, Tensor] = {
        "aatype": aatype,
        "residue_index": torch.from_numpy(feats["residue_index"]),
        "seq_mask": torch.ones(n, dtype=torch.float32),
        "between_segment_residues": torch.from_numpy(feats["between_segment_residues"]),
        "seq_length": torch.from_numpy(feats["seq_length"]),
        "target_feat": target_feat,
        "msa_feat": torch.from_numpy(T.make_msa_feat(masked, del_c, profile_c, del_mean)),
        "msa_mask": torch.from_numpy(msa_mask),
        "extra_msa": torch.from_numpy(np.ascontiguousarray(extra)),
        "extra_msa_mask": torch.from_numpy(np.ascontiguousarray(extra_mask)),
        "extra_has_deletion": torch.from_numpy(np.clip(del_e, 0.0, 1.0).astype(np.float32)),
        "extra_deletion_value": torch.from_numpy(T.deletion_value(del_e)),
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
        out["true_msa"] = torch.from_numpy(msa_c)
        out["bert_mask"] = torch.from_numpy(bert_mask)
        pos = torch.from_numpy(np.array(structure.atom37_positions[crop]))
        mask = torch.from_numpy(np.array(structure.atom37_mask[crop]))
        out.update(_ground_truth(aatype, pos, mask))
        out["resolution"] = torch.tensor(float(structure.resolution or 0.0), dtype=torch.float32)
    return out
