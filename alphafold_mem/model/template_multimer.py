"""AF2-Multimer template embedding (Evans et al. 2021, Suppl. 2.3; AF2 ``modules_multimer``
``TemplateEmbedding`` / ``SingleTemplateEmbedding`` / ``template_embedding_1d``).

Per template, nine pair features are projected one by one to c_t and summed (the normalised query
pair representation is the ninth), the template pair stack runs (triangle multiplications first),
the results are averaged over every template slot (padding slots included), and ReLU + a linear
layer give the update of z. Pair features stay within a chain: masks, unit vectors and the
distogram are multiplied by the same-chain mask. The template rows appended to the MSA come from
the templates' chi angles.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..config import TemplateConfig
from ..geometry import all_atom
from ..memory.axes import WHOLE, Shard, Slice, Split, declare, run_split
from ..memory.checkpoint import run_blocks
from ..memory.chunking import estimating, loop_range
from ..memory.offload import Parked, offload_active
from .embedders import dgram_from_positions, one_hot_linear
from .pair_stack import PairStackUpdates
from .primitives import LayerNorm, Linear

_N, _CA, _C = 0, 1, 2  # atom37 indices of the backbone atoms
#: per-residue arrays of one template that its pair features read (``_per_residue``)
_PER_RESIDUE = ("pseudo_beta", "pseudo_beta_mask", "aatype", "rots", "trans", "backbone_mask", "asym_id")


def _norm(v: Tensor, eps: float = 1e-6) -> Tensor:
    """``|v|`` over the last dim with the squared norm clamped at ``eps**2`` (AF2's ``Vec3Array.norm``)."""
    return torch.sqrt(torch.clamp((v * v).sum(-1, keepdim=True), min=eps * eps))


def backbone_frames(positions: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Backbone frames of AF2-Multimer (``make_backbone_affine``): origin CA, x-axis CA -> C, N in
    the xy-plane (y > 0); norms clamped at 1e-6 Å.

    Args:
        positions: ``[*, N_res, 37, 3]`` (Å); mask: ``[*, N_res, 37]``.

    Returns:
        rotations ``[*, N_res, 3, 3]`` (columns are the axes), translations (CA) ``[*, N_res, 3]``
        and the backbone mask ``[*, N_res]`` (N, CA and C present).
    """
    n, ca, c = positions[..., _N, :], positions[..., _CA, :], positions[..., _C, :]
    e0 = c - ca
    e0 = e0 / _norm(e0)
    e1 = n - ca
    e1 = e1 - e0 * (e1 * e0).sum(-1, keepdim=True)
    e1 = e1 / _norm(e1)
    e2 = torch.cross(e0, e1, dim=-1)
    mask = mask.to(positions.dtype)
    return torch.stack([e0, e1, e2], dim=-1), ca, mask[..., _N] * mask[..., _CA] * mask[..., _C]


def template_single_features(aatype: Tensor, positions: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The 34 template single-feature channels of AF2-Multimer (``template_embedding_1d``):
    one_hot(aatype, 22), sin chi1-4 x chi mask, cos chi1-4 x chi mask, chi mask; and the rows' MSA
    mask (the chi1 mask).

    Args:
        aatype: ``[*, N_res]`` (0-21); positions: ``[*, N_res, 37, 3]`` (Å); mask: ``[*, N_res, 37]``.

    Returns:
        ``[*, N_res, 34]`` and ``[*, N_res]``.
    """
    chi, chi_mask = all_atom.chi_angles(aatype, positions, mask)  # [*, N_res, 4] (radians), mask
    feats = torch.cat(
        [
            F.one_hot(aatype.long(), 22).to(positions.dtype),
            torch.sin(chi) * chi_mask,
            torch.cos(chi) * chi_mask,
            chi_mask,
        ],
        dim=-1,
    )
    return feats, chi_mask[..., 0]


class TemplateEmbeddingMultimer(nn.Module):
    """Template embedding of AF2-Multimer: pair update of z and template rows for the MSA.

    ``add_pair_embedding(z, batch, pair_mask)`` returns z plus the template update ``[*, N_res,
    N_res, c_z]`` (in place under ``inplace`` without autograd). It reads ``template_aatype [*,
    N_templ, N_res]``, ``template_all_atom_positions [*, N_templ, N_res, 37, 3]`` (Å),
    ``template_all_atom_mask [*, N_templ, N_res, 37]`` and ``asym_id [*, N_res]``;
    ``template_mask`` is not read (the average counts every slot). ``angle_embedding`` returns the
    template rows ``[*, N_templ, N_res, c_m]`` and their mask ``[*, N_templ, N_res]``.

    Memory seams: ``templates`` (``"batched"``: every template through the pair stack, stacked,
    then averaged; ``"streamed"``: one template at a time into a running sum), ``inplace``,
    ``offload`` (streamed inference on an accelerator: z and the running sum wait in host memory
    while each template's pair stack runs). ``chunk_size`` chunks every pair-sized step by rows.
    """

    memory_spec = declare(
        splits={
            # the query feature (ninth projection of LayerNorm(z)): rows i read z rows i
            "query": Split("pair_row", (Shard(-3),), output=-3),
            # rows i of one template's features: the i side's per-residue arrays, the query rows i,
            # and the whole template for the j side
            "pair_features": Split(
                "pair_row",
                (Slice(-2), Slice(-1), Slice(-1), Slice(-3), Slice(-2), Slice(-1), Slice(-1), Shard(-3), WHOLE),
                output=-3,
            ),
            "output_norm": Split("pair_row", (Shard(-3),), output=-3),
            "output": Split("pair_row", (Shard(-3),), output=-3),
            "angles": Split("msa_column", (Slice(-2),), output=Shard(-2, columns=True)),
        },
        seams=["templates", "inplace", "offload"],
        stack="template",
    )
    checkpoint_every: int = 0
    chunk_size: Optional[int] = None
    templates: str = "batched"
    inplace: bool = False
    offload: str = "none"

    def __init__(self, cfg: TemplateConfig, c_m: int, c_z: int, c_t: int):
        super().__init__()
        self.cfg = cfg
        ps = cfg.pair_stack
        self.query_embedding_norm = LayerNorm(c_z)
        # template_pair_embedding_0 ... _8: distogram, pseudo-beta mask, aatype of j, aatype of i,
        # unit vector x, y, z, backbone mask, the normed query
        widths = (cfg.dgram_num_bins, 1, 22, 22, 1, 1, 1, 1, c_z)
        self.template_pair_embedding = nn.ModuleList([Linear(w, c_t, init="relu") for w in widths])
        self.blocks = nn.ModuleList(
            [
                PairStackUpdates(
                    c_t,
                    ps.c_hidden_tri_mul,
                    ps.c_hidden_tri_att,
                    ps.num_heads_tri_att,
                    ps.transition_n,
                    ps.dropout_rate,
                    attention_first=not ps.tri_mul_first,
                )
                for _ in range(ps.num_blocks)
            ]
        )
        self.output_layer_norm = LayerNorm(c_t)
        self.output_linear = Linear(c_t, c_z, init="relu")
        self.template_single_embedding = Linear(cfg.angle_feat_dim, c_m, init="relu")
        self.template_projection = Linear(c_m, c_m, init="relu")

    # -- one template's pair activations ---------------------------------------------------------
    def _per_residue(self, batch: dict[str, Tensor], i: int, dim: int, dtype: torch.dtype) -> dict[str, Tensor]:
        """The per-residue arrays of template ``i`` that its pair features read (geometry in >= fp32)."""
        aatype = batch["template_aatype"].select(dim, i)
        pos = batch["template_all_atom_positions"].select(dim, i).to(dtype)
        atom_mask = batch["template_all_atom_mask"].select(dim, i).to(dtype)
        pb, pb_mask = all_atom.pseudo_beta(aatype, pos, atom_mask)
        rots, trans, bb_mask = backbone_frames(pos, atom_mask)
        return {
            "pseudo_beta": pb,
            "pseudo_beta_mask": pb_mask,
            "aatype": aatype,
            "rots": rots,
            "trans": trans,
            "backbone_mask": bb_mask,
            "asym_id": batch["asym_id"],
        }

    def _feature_rows(self, pb, pb_mask, aatype, rots, trans, bb_mask, asym, query, whole) -> Tensor:
        """Rows i of one template's summed feature projections ``[*, I, N_res, c_t]``."""
        e = self.template_pair_embedding
        same_chain = (asym[..., :, None] == whole["asym_id"][..., None, :]).to(pb.dtype)  # [*, I, N_res]
        pb_2d = pb_mask[..., :, None] * whole["pseudo_beta_mask"][..., None, :] * same_chain
        dgram = dgram_from_positions(
            pb, self.cfg.dgram_num_bins, self.cfg.dgram_min_bin, self.cfg.dgram_max_bin, y=whole["pseudo_beta"]
        )
        act = e[0](dgram * pb_2d[..., None]) + e[1](pb_2d[..., None])
        act = act + one_hot_linear(e[2], whole["aatype"])[..., None, :, :]  # residue j, over rows i
        act = act + one_hot_linear(e[3], aatype)[..., :, None, :]  # residue i, over columns j
        bb_2d = bb_mask[..., :, None] * whole["backbone_mask"][..., None, :] * same_chain
        # the CA of j in the backbone frame of i, as a unit vector
        local = torch.einsum("...iba,...ijb->...ija", rots, whole["trans"][..., None, :, :] - trans[..., :, None, :])
        unit = local / _norm(local) * bb_2d[..., None]  # [*, I, N_res, 3]
        for k in range(3):
            act = act + e[4 + k](unit[..., k : k + 1])
        act = act + e[7](bb_2d[..., None])
        return act + query

    def embed_one(self, single: dict[str, Tensor], query: Tensor, pair_mask: Tensor, stack: bool = True) -> Tensor:
        """One template through its feature projections, the pair stack and the output LayerNorm:
        ``[*, N_res, N_res, c_t]``. ``query`` is the ninth projection ``[*, N_res, N_res, c_t]``.
        ``stack=False`` skips the pair stack (the estimator)."""
        args = [single[k] for k in _PER_RESIDUE]
        t = run_split(self, "pair_features", self._feature_rows, *args, query, single)
        if stack:
            t = run_blocks(self, t, pair_mask)
        out = t if self.inplace and not torch.is_grad_enabled() else None  # normalised in place, by rows
        return run_split(self, "output_norm", self.output_layer_norm, t, out=out)

    # -- the pair update -------------------------------------------------------------------------
    def add_pair_embedding(self, z: Tensor, batch: dict[str, Tensor], pair_mask: Tensor) -> Tensor:
        """``z`` plus the template pair update (AF2-Multimer: the average over every template slot)."""
        dim = pair_mask.dim() - 2  # the template dim of the per-template arrays
        n_templ = batch["template_aatype"].shape[dim]
        fdtype = torch.promote_types(z.dtype, torch.float32)
        inplace = self.inplace and not torch.is_grad_enabled()
        q_linear = self.template_pair_embedding[8]
        query = run_split(self, "query", lambda zr: q_linear(self.query_embedding_norm(zr)), z)
        if self.templates == "batched":
            t = torch.stack(
                [self.embed_one(self._per_residue(batch, i, dim, fdtype), query, pair_mask) for i in range(n_templ)],
                dim=-4,
            )  # [*, N_templ, N_res, N_res, c_t]
            total = t.sum(-4)
            del t
        else:
            park = self.offload != "none" and inplace and offload_active(z.device)
            parked_z = Parked(z) if park else None
            total = None
            for i in loop_range(0, n_templ):
                idle = [Parked(total)] if park and total is not None else []
                # the estimator skips the first template's pair stack: the second one's peaks at least
                # as high (the running sum is alive besides it)
                t = self.embed_one(
                    self._per_residue(batch, i, dim, fdtype),
                    query,
                    pair_mask,
                    stack=not (estimating() and i == 0 and n_templ > 1),
                )
                for p in idle:
                    total = p.restore()
                total = t if total is None else (total.add_(t) if inplace else total + t)
                del t, idle
            if parked_z is not None:
                z = parked_z.restore()
        del query

        def output(rows: Tensor) -> Tensor:
            return self.output_linear(F.relu(rows / n_templ))

        if inplace:
            return run_split(self, "output", output, total, out=z, accumulate=True)
        return z + run_split(self, "output", output, total)

    # -- the template rows of the MSA --------------------------------------------------------------
    def angle_embedding(self, batch: dict[str, Tensor], dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Template rows ``[*, N_templ, N_res, c_m]`` and their MSA mask (chi1 mask) ``[*, N_templ, N_res]``."""
        fdtype = torch.promote_types(dtype, torch.float32)
        feats, mask = template_single_features(
            batch["template_aatype"],
            batch["template_all_atom_positions"].to(fdtype),
            batch["template_all_atom_mask"].to(fdtype),
        )
        rows = run_split(
            self,
            "angles",
            lambda f: self.template_projection(F.relu(self.template_single_embedding(f))),
            feats.to(dtype),
        )
        return rows, mask.to(dtype)


__all__ = ["TemplateEmbeddingMultimer", "backbone_frames", "template_single_features"]
