"""Template embedding (Jumper et al. 2021, Suppl. 1.7.1, Alg. 2 lines 7-13, Alg. 16-17); the template
pair stack's blocks are :class:`~alphafold_mem.model.pair_stack.PairStackUpdates` in attention-first
order, the pointwise attention is :mod:`.template_attention`."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..config import TemplateConfig
from ..geometry.rigid import Rigid
from ..memory.axes import WHOLE, Shard, Slice, Split, declare, run_split
from ..memory.checkpoint import run_blocks
from ..memory.chunking import estimating, loop_range
from ..memory.offload import Parked, offload_active
from .embedders import dgram_from_positions
from .pair_stack import PairStackUpdates
from .primitives import LayerNorm, Linear
from .template_attention import TemplatePointwiseAttention

_N, _CA, _C = 0, 1, 2  # atom37 indices of the backbone atoms
#: one template's pair-feature inputs; the first five are the per-residue arrays of the i side
_SINGLE_KEYS = (
    "template_pseudo_beta",
    "template_pseudo_beta_mask",
    "template_aatype",
    "template_all_atom_positions",
    "template_all_atom_mask",
)


def template_pair_features(
    batch: dict[str, Tensor], cfg: TemplateConfig, dtype: torch.dtype, rows: Optional[dict[str, Tensor]] = None
) -> Tensor:
    """The 88 template pair feature channels of one template (Suppl. 1.7.1, Table 1).

    Channels: distogram of the template pseudo-beta (39 bins 3.25-50.75 Å), pseudo-beta pair mask,
    one_hot(template_aatype, 22) of residue j and of residue i, unit vectors in the backbone frame of
    i (zero unless ``use_unit_vector``), backbone pair mask; all multiplied by the backbone pair mask.

    Args:
        batch: ``template_aatype [*, N_res]``, ``template_all_atom_positions [*, N_res, 37, 3]`` (Å),
            ``template_all_atom_mask [*, N_res, 37]``, ``template_pseudo_beta [*, N_res, 3]``,
            ``template_pseudo_beta_mask [*, N_res]`` (one template: no template dim): the residues j.
        rows: the same arrays for the residues i (a row chunk); default ``batch``.

    Returns:
        ``[*, N_i, N_res, 88]``.
    """
    rows = batch if rows is None else rows
    pb_mask_i, pb_mask_j = rows["template_pseudo_beta_mask"].to(dtype), batch["template_pseudo_beta_mask"].to(dtype)
    pb_mask_2d = pb_mask_i[..., :, None] * pb_mask_j[..., None, :]
    dgram = dgram_from_positions(
        rows["template_pseudo_beta"].to(dtype),
        cfg.dgram_num_bins,
        cfg.dgram_min_bin,
        cfg.dgram_max_bin,
        y=batch["template_pseudo_beta"].to(dtype),
    )
    aatype_i = F.one_hot(rows["template_aatype"].long(), 22).to(dtype)  # [*, N_i, 22]
    aatype_j = F.one_hot(batch["template_aatype"].long(), 22).to(dtype)  # [*, N_res, 22]
    n_i, n_j = aatype_i.shape[-2], aatype_j.shape[-2]
    bb_i, frames_i = _backbone(rows, dtype)
    bb_j, frames_j = _backbone(batch, dtype)
    bb_mask_2d = bb_i[..., :, None] * bb_j[..., None, :]  # [*, N_i, N_res]
    if cfg.use_unit_vector:
        vec = frames_i.unsqueeze(-1).invert_apply(frames_j.trans[..., None, :, :])  # [*, N_i, N_res, 3]
        inv_dist = torch.rsqrt(1e-20 + (vec**2).sum(-1)) * bb_mask_2d
        unit = vec * inv_dist[..., None]
    else:
        unit = bb_mask_2d.new_zeros(bb_mask_2d.shape + (3,))
    feats = torch.cat(
        [
            dgram,
            pb_mask_2d[..., None],
            aatype_j[..., None, :, :].expand(*aatype_j.shape[:-2], n_i, n_j, 22),
            aatype_i[..., :, None, :].expand(*aatype_i.shape[:-2], n_i, n_j, 22),
            unit,
            bb_mask_2d[..., None],
        ],
        dim=-1,
    )  # [*, N_i, N_res, 88]
    return feats * bb_mask_2d[..., None]


def _backbone(batch: dict[str, Tensor], dtype: torch.dtype) -> tuple[Tensor, Rigid]:
    """Backbone mask ``[*, N]`` and frames (N, CA, C) of a template's residues."""
    pos = batch["template_all_atom_positions"].to(dtype)
    atom_mask = batch["template_all_atom_mask"].to(dtype)
    bb_mask = atom_mask[..., _N] * atom_mask[..., _CA] * atom_mask[..., _C]
    return bb_mask, Rigid.from_3_points(pos[..., _N, :], pos[..., _CA, :], pos[..., _C, :])


def template_angle_features(batch: dict[str, Tensor], dtype: torch.dtype) -> Tensor:
    """The 57 template torsion-angle feature channels (Suppl. 1.7.1, Table 1):
    one_hot(template_aatype, 22), torsion sin/cos (14), alternative torsion sin/cos (14), torsion mask (7).

    Args:
        batch: ``template_aatype [*, N_templ, N_res]``, ``template_torsion_angles_sin_cos`` and
            ``template_alt_torsion_angles_sin_cos [*, N_templ, N_res, 7, 2]``,
            ``template_torsion_angles_mask [*, N_templ, N_res, 7]``.

    Returns:
        ``[*, N_templ, N_res, 57]``.
    """
    aatype = F.one_hot(batch["template_aatype"].long(), 22).to(dtype)
    return torch.cat(
        [
            aatype,
            batch["template_torsion_angles_sin_cos"].to(dtype).flatten(-2),
            batch["template_alt_torsion_angles_sin_cos"].to(dtype).flatten(-2),
            batch["template_torsion_angles_mask"].to(dtype),
        ],
        dim=-1,
    )


class TemplateEmbedding(nn.Module):
    """Template pair embedding (Alg. 2 lines 7-9, Alg. 16-17) and template angle embedding
    (Alg. 2 lines 10-13).

    ``add_pair_embedding(z, batch, pair_mask)`` returns ``z`` plus the template update
    ``[*, N_res, N_res, c_z]`` (in place under ``inplace`` without autograd); ``angle_embedding``
    returns the extra MSA rows ``[*, N_templ, N_res, c_m]`` and their mask ``[*, N_templ, N_res]``.

    Memory seams: ``templates`` (``"batched"``: all templates through the pair stack, then the
    pointwise attention over the stack; ``"streamed"``: one at a time, folded into the pointwise
    attention's online-softmax state, see :mod:`.template_attention`), ``inplace``, and ``offload``
    (streamed inference on an accelerator: z waits in host memory for the whole template phase,
    the queries and the attention state during each template's pair stack). ``chunk_size`` chunks
    the pair features (computed and embedded row chunk by row chunk).
    """

    # rows i of one template's pair features read the i-side per-residue arrays (pseudo-beta, its
    # mask, aatype, atom positions, atom mask) and the whole template for the j side; the angle rows:
    # residue columns read their own features
    memory_spec = declare(
        splits={
            "pair_features": Split(
                "pair_row", (Slice(-2), Slice(-1), Slice(-1), Slice(-3), Slice(-2), WHOLE), output=-3
            ),
            "output_norm": Split("pair_row", (Shard(-3),), output=-3),
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
        self.embedding2d = Linear(cfg.pair_in_dim, c_t)
        self.blocks = nn.ModuleList(
            [
                PairStackUpdates(
                    c_t,
                    ps.c_hidden_tri_mul,
                    ps.c_hidden_tri_att,
                    ps.num_heads_tri_att,
                    ps.transition_n,
                    ps.dropout_rate,
                    attention_first=True,
                )
                for _ in range(ps.num_blocks)
            ]
        )
        self.output_layer_norm = LayerNorm(c_t)
        self.pointwise_attention = TemplatePointwiseAttention(c_z, c_t, cfg.pointwise_c_hidden, cfg.pointwise_num_heads)
        if cfg.embed_angles:
            self.template_single_embedding = Linear(cfg.angle_feat_dim, c_m, init="relu")
            self.template_projection = Linear(c_m, c_m, init="relu")

    def embed_one(self, single: dict[str, Tensor], pair_mask: Tensor, dtype: torch.dtype, stack: bool = True) -> Tensor:
        """One template through the pair stack: ``[*, N_res, N_res, c_t]``. The features (distogram,
        frames) are computed in at least fp32 (a geometry fp32 island, also under bf16 autocast), in
        row chunks, each embedded at once. ``stack=False`` skips the pair stack (the estimator)."""
        fdtype = torch.promote_types(dtype, torch.float32)

        def rows(pb, pb_mask, aatype, pos, atom_mask, whole):
            i_side = {
                "template_pseudo_beta": pb,
                "template_pseudo_beta_mask": pb_mask,
                "template_aatype": aatype,
                "template_all_atom_positions": pos,
                "template_all_atom_mask": atom_mask,
            }
            return self.embedding2d(template_pair_features(whole, self.cfg, fdtype, rows=i_side))

        t = run_split(self, "pair_features", rows, *(single[k] for k in _SINGLE_KEYS[:5]), single)
        if stack:
            t = run_blocks(self, t, pair_mask)
        out = t if self.inplace and not torch.is_grad_enabled() else None  # normalised in place, by rows
        return run_split(self, "output_norm", self.output_layer_norm, t, out=out)

    def _single(self, batch: dict[str, Tensor], pair_mask: Tensor, i: int) -> dict[str, Tensor]:
        return {k: batch[k].select(pair_mask.dim() - 2, i) for k in _SINGLE_KEYS}

    def add_pair_embedding(self, z: Tensor, batch: dict[str, Tensor], pair_mask: Tensor) -> Tensor:
        """``z`` plus the template pair update (Alg. 2 lines 7-9; 0 for a sample without templates)."""
        n_templ = batch["template_aatype"].shape[-2]
        template_mask = batch["template_mask"].to(z.dtype)
        has_templates = (template_mask.sum(-1) > 0).to(z.dtype)[..., None, None, None]
        inplace = self.inplace and not torch.is_grad_enabled()
        if self.templates == "batched":
            t = torch.stack(
                [self.embed_one(self._single(batch, pair_mask, i), pair_mask, z.dtype) for i in range(n_templ)], dim=-4
            )  # [*, N_templ, N_res, N_res, c_t]
            update = self.pointwise_attention(z, t, template_mask) * has_templates
            return z.add_(update) if inplace else z + update
        pwa = self.pointwise_attention
        park = self.offload != "none" and inplace and offload_active(z.device)
        q = pwa.queries(z)
        parked_z = Parked(z) if park else None
        state = None
        for i in loop_range(0, n_templ):
            idle = [Parked(x) for x in (q, *(state or ()))] if park else []  # not read by the pair stack
            # the estimator skips the first template's pair stack: the second one's peaks at least as
            # high (the attention state is alive besides it)
            t = self.embed_one(
                self._single(batch, pair_mask, i),
                pair_mask,
                z.dtype,
                stack=not (estimating() and i == 0 and n_templ > 1),
            )
            for p in idle:
                p.restore()
            state = pwa.fold(state, q, t, template_mask[..., i], inplace=inplace)
            del t, idle
        del q
        if parked_z is not None:
            parked_z.restore()
        if inplace:
            return pwa.output(state[0], has_templates, target=z)
        return z + pwa.output(state[0], has_templates)

    def angle_embedding(self, batch: dict[str, Tensor], dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        feats = template_angle_features(batch, dtype)  # [*, N_templ, N_res, 57]
        rows = run_split(
            self, "angles", lambda f: self.template_projection(F.relu(self.template_single_embedding(f))), feats
        )
        mask = batch["template_torsion_angles_mask"][..., 2].to(dtype)  # [*, N_templ, N_res]
        return rows, mask
