"""Synthetic, valid AF2 feature batches for tests and benchmarks."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import ModelConfig
from .geometry import all_atom
from .geometry import residue_constants as rc


def random_features(
    config: ModelConfig,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int = 0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    chains: tuple[int, ...] = (1, 2, 1),
) -> dict[str, Tensor]:
    """A synthetic batch that :meth:`AlphaFold.forward` accepts (no batch dim).

    For a multimer config (``config.multimer``) the residues are split into consecutive chains of
    near-equal length, one per entry of ``chains`` (the entity of each chain; the default is an
    A2B heteromer with the A copies apart): ``asym_id``, ``entity_id``, ``sym_id`` (numbered from
    1), ``residue_index`` restarting per chain, a 21-wide ``target_feat``, the raw
    ``extra_deletion_matrix``, and the same sequence for every copy of an entity.

    The MSA's first row is the query; the other rows are random mutants with gaps and deletions;
    msa_feat follows AF2's 49-channel layout ([one_hot(msa, 23), has_deletion, deletion_value,
    cluster_profile (23), deletion_mean]). Templates (when ``n_templ > 0`` or the config enables
    them) are noisy copies of an ideal-ish Cα random walk with consistent pseudo-beta and torsion
    features.

    Args:
        config: the model config (templates are added if ``config.template.enabled``).
        n_res, n_seq, n_extra_seq, n_templ: N_res, N_seq, N_extra and N_templ.
        seed: RNG seed (the batch is a pure function of its arguments).

    Returns:
        dict of tensors named as in AF2/OpenFold (see :class:`alphafold_mem.AlphaFold`).
    """
    g = torch.Generator().manual_seed(seed)
    aatype = torch.randint(0, 20, (n_res,), generator=g)
    msa = torch.randint(0, 22, (n_seq, n_res), generator=g)
    msa[0] = aatype
    deletions = torch.where(
        torch.rand(n_seq, n_res, generator=g) < 0.1, torch.randint(1, 5, (n_seq, n_res), generator=g), 0
    ).float()
    deletions[0] = 0
    profile = torch.softmax(torch.randn(n_seq, n_res, 23, generator=g), -1)
    del_mean = deletions.mean(0, keepdim=True).expand(n_seq, n_res)
    msa_feat = torch.cat(
        [
            F.one_hot(msa, 23).float(),
            (deletions > 0).float()[..., None],
            (torch.atan(deletions / 3.0) * (2 / math.pi))[..., None],
            profile,
            (torch.atan(del_mean / 3.0) * (2 / math.pi))[..., None],
        ],
        -1,
    )
    extra = torch.randint(0, 22, (n_extra_seq, n_res), generator=g)
    extra_del = torch.where(
        torch.rand(n_extra_seq, n_res, generator=g) < 0.1, torch.randint(1, 5, (n_extra_seq, n_res), generator=g), 0
    ).float()
    masks = all_atom.make_atom14_masks(aatype)
    batch = {
        "aatype": aatype,
        "residue_index": torch.arange(n_res),
        "seq_mask": torch.ones(n_res),
        "target_feat": torch.cat([torch.zeros(n_res, 1), F.one_hot(aatype, 21).float()], -1),
        "msa_feat": msa_feat,
        "msa_mask": torch.ones(n_seq, n_res),
        "extra_msa": extra,
        "extra_msa_mask": torch.ones(n_extra_seq, n_res),
        "extra_has_deletion": (extra_del > 0).float(),
        "extra_deletion_value": torch.atan(extra_del / 3.0) * (2 / math.pi),
        **{k: v for k, v in masks.items()},
    }
    if config.multimer:
        batch.update(_chains(aatype, chains, extra_del))
        aatype = batch["aatype"]
    if config.template.enabled or n_templ > 0:
        batch.update(_random_templates(aatype, max(n_templ, 1) if config.template.enabled else n_templ, g))
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in batch.items()}


def _chains(aatype: Tensor, entities: tuple[int, ...], extra_del: Tensor) -> dict[str, Tensor]:
    """Chain features of AF2-Multimer for ``aatype`` split into ``len(entities)`` chains."""
    n_res = aatype.shape[0]
    bounds = torch.linspace(0, n_res, len(entities) + 1).round().long().tolist()
    asym, entity, sym, index = (torch.zeros(n_res, dtype=torch.long) for _ in range(4))
    aatype = aatype.clone()
    first: dict[int, tuple[int, int]] = {}
    copies: dict[int, int] = {}
    for c, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        e = entities[c]
        copies[e] = copies.get(e, 0) + 1
        asym[lo:hi], entity[lo:hi], sym[lo:hi] = c + 1, e, copies[e]
        index[lo:hi] = torch.arange(hi - lo)
        if e in first:  # a copy: the entity's sequence (as long as both chains have)
            f_lo, f_hi = first[e]
            n = min(hi - lo, f_hi - f_lo)
            aatype[lo : lo + n] = aatype[f_lo : f_lo + n]
        else:
            first[e] = (lo, hi)
    masks = all_atom.make_atom14_masks(aatype)
    return {
        "aatype": aatype,
        "asym_id": asym,
        "entity_id": entity,
        "sym_id": sym,
        "residue_index": index,
        "target_feat": F.one_hot(aatype, 21).float(),
        "extra_deletion_matrix": extra_del,
        **masks,
    }


def _random_templates(aatype: Tensor, n_templ: int, g: torch.Generator) -> dict[str, Tensor]:
    n_res = aatype.shape[0]
    steps = torch.nn.functional.normalize(torch.randn(n_templ, n_res, 3, generator=g), dim=-1) * 3.8
    ca = steps.cumsum(1)  # [T, N_res, 3] Cα random walk, Å
    t_aatype = aatype.expand(n_templ, n_res).clone()
    mutate = torch.rand(n_templ, n_res, generator=g) < 0.3
    t_aatype[mutate] = torch.randint(0, 20, (int(mutate.sum()),), generator=g)
    atom_mask = torch.as_tensor(rc.restype_atom37_mask, dtype=torch.float32)[t_aatype]  # [T, N_res, 37]
    pos = ca[..., None, :] + torch.randn(n_templ, n_res, 37, 3, generator=g) * 1.5
    pos = pos * atom_mask[..., None]
    pb, pb_mask = all_atom.pseudo_beta(t_aatype, pos, atom_mask)
    tors = all_atom.atom37_to_torsion_angles(t_aatype, pos, atom_mask)
    return {
        "template_aatype": t_aatype,
        "template_all_atom_positions": pos,
        "template_all_atom_mask": atom_mask,
        "template_pseudo_beta": pb,
        "template_pseudo_beta_mask": pb_mask,
        "template_torsion_angles_sin_cos": tors["torsion_angles_sin_cos"],
        "template_alt_torsion_angles_sin_cos": tors["alt_torsion_angles_sin_cos"],
        "template_torsion_angles_mask": tors["torsion_angles_mask"],
        "template_mask": torch.ones(n_templ),
    }
