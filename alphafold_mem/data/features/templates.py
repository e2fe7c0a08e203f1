"""Template features (Jumper et al. 2021, Suppl. 1.2.3, 1.7.1): :func:`make_template_features` puts
``N_templ`` experimental chains (:class:`~..structure.ProteinChain`) on the query's residues, by a
given mapping or by :func:`align_template` (global alignment, BLOSUM62), and derives the
``template_*`` geometry (pseudo-beta, torsion angles) with :mod:`alphafold_mem.geometry.all_atom`;
:func:`empty_template_features` gives all-masked placeholders when no template is available.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from Bio import Align
from Bio.Align import substitution_matrices
from torch import Tensor

from ...geometry import all_atom
from ...geometry import residue_constants as rc
from ..errors import InputError
from ..structure import ProteinChain

__all__ = ["align_template", "make_template_features", "empty_template_features"]


def align_template(query: str, template: str) -> np.ndarray:
    """Query index -> template index (-1 where unaligned) by a global alignment with free end gaps
    (Biopython ``PairwiseAligner``, BLOSUM62, gap open -11 / extend -1)."""
    aligner = Align.PairwiseAligner(mode="global")
    aligner.substitution_matrix = substitution_matrices.load("BLOSUM62")
    aligner.open_gap_score, aligner.extend_gap_score = -11.0, -1.0
    aligner.end_gap_score = 0.0
    aln = aligner.align(query.upper(), template.upper())[0]
    mapping = np.full(len(query), -1, dtype=np.int64)
    for (q0, q1), (t0, t1) in zip(*aln.aligned):
        mapping[q0:q1] = np.arange(t0, t1)
    return mapping


def make_template_features(
    query: str, templates: Sequence[ProteinChain | tuple[ProteinChain, np.ndarray]]
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
            raise InputError(
                f"template mapping must have shape ({n},) with indices < {len(chain)}",
                file=chain.path,
                record=chain.name,
            )
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
    out.update(
        _template_geometry(out["template_aatype"], out["template_all_atom_positions"], out["template_all_atom_mask"])
    )
    return out


def empty_template_features(n_res: int, n_templ: int = 1) -> dict[str, Tensor]:
    """``n_templ`` all-masked placeholder templates (``template_mask`` 0, aatype gap), for a model
    with templates enabled when no template is available."""
    aatype = torch.full((n_templ, n_res), rc.restype_num + 1, dtype=torch.int64)
    pos = torch.zeros(n_templ, n_res, rc.atom_type_num, 3)
    mask = torch.zeros(n_templ, n_res, rc.atom_type_num)
    out = {
        "template_aatype": aatype,
        "template_all_atom_positions": pos,
        "template_all_atom_mask": mask,
        "template_mask": torch.zeros(n_templ),
    }
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
