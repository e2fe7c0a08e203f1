"""Template embedding (Jumper et al. 2021, Suppl. 1.7.1, Alg. 2 lines 7-13, Alg. 16-17); the template
pair stack's blocks are :class:`~alphafold_mem.model.pair_stack.PairStackUpdates` in attention-first order."""

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
from .embedders import dgram_from_positions
from .pair_stack import PairStackUpdates
from .primitives import Attention, LayerNorm, Linear, mask_bias

_N, _CA, _C = 0, 1, 2  # atom37 indices of the backbone atoms
#: the per-residue features of one template that its pair features read (in the order the
#: "pair_features" step declares them: pseudo-beta [N_res, 3], masks [N_res], aatype [N_res],
#: positions [N_res, 37, 3], atom mask [N_res, 37])
_PAIR_KEYS = ("template_pseudo_beta", "template_pseudo_beta_mask", "template_aatype",
              "template_all_atom_positions", "template_all_atom_mask")


def template_pair_features(batch: dict[str, Tensor], cfg: TemplateConfig, dtype: torch.dtype,
                           cols: Optional[dict[str, Tensor]] = None) -> Tensor:
    """The 88 template pair feature channels of one template (Suppl. 1.7.1, Table 1).

    Channels: distogram of the template pseudo-beta (39 bins 3.25-50.75 Å), pseudo-beta pair mask,
    one_hot(template_aatype, 22) of residue j and of residue i, unit vectors in the backbone frame of
    i (zero unless ``use_unit_vector``), backbone pair mask; all multiplied by the backbone pair mask.

    Args:
        batch: ``template_aatype [*, N_res]``, ``template_all_atom_positions [*, N_res, 37, 3]`` (Å),
            ``template_all_atom_mask [*, N_res, 37]``, ``template_pseudo_beta [*, N_res, 3]``,
            ``template_pseudo_beta_mask [*, N_res]`` (one template: no template dim), of the rows i.
        cols: the same features of the columns j (default: ``batch``).

    Returns:
        ``[*, N_res (i), N_res (j), 88]``.
    """
    cols = batch if cols is None else cols
    pb_i, pb_j = batch["template_pseudo_beta_mask"].to(dtype), cols["template_pseudo_beta_mask"].to(dtype)
    pb_mask_2d = pb_i[..., :, None] * pb_j[..., None, :]
    dgram = dgram_from_positions(batch["template_pseudo_beta"].to(dtype), cfg.dgram_num_bins,
                                 cfg.dgram_min_bin, cfg.dgram_max_bin, cols["template_pseudo_beta"].to(dtype))
    aa_i = F.one_hot(batch["template_aatype"].long(), 22).to(dtype)  # [*, I, 22]
    aa_j = F.one_hot(cols["template_aatype"].long(), 22).to(dtype)  # [*, J, 22]
    n_i, n_j = aa_i.shape[-2], aa_j.shape[-2]
    frames_i, bb_i = _backbone(batch, dtype)
    frames_j, bb_j = _backbone(cols, dtype)
    bb_mask_2d = bb_i[..., :, None] * bb_j[..., None, :]  # [*, I, J]
    if cfg.use_unit_vector:
        vec = frames_i.unsqueeze(-1).invert_apply(frames_j.trans[..., None, :, :])  # [*, I, J, 3]
        inv_dist = torch.rsqrt(1e-20 + (vec ** 2).sum(-1)) * bb_mask_2d
        unit = vec * inv_dist[..., None]
    else:
        unit = aa_i.new_zeros(bb_mask_2d.shape + (3,))
    feats = torch.cat([
        dgram,
        pb_mask_2d[..., None],
        aa_j[..., None, :, :].expand(*aa_j.shape[:-2], n_i, n_j, 22),
        aa_i[..., :, None, :].expand(*aa_i.shape[:-2], n_i, n_j, 22),
        unit,
        bb_mask_2d[..., None],
    ], dim=-1)  # [*, I, J, 88]
    return feats * bb_mask_2d[..., None]


def _backbone(batch: dict[str, Tensor], dtype: torch.dtype) -> tuple[Rigid, Tensor]:
    """Backbone frames (from N, Cα, C; Å) and the backbone mask ``[*, N_res]``."""
    pos = batch["template_all_atom_positions"].to(dtype)
    atom_mask = batch["template_all_atom_mask"].to(dtype)
    frames = Rigid.from_3_points(pos[..., _N, :], pos[..., _CA, :], pos[..., _C, :])
    return frames, atom_mask[..., _N] * atom_mask[..., _CA] * atom_mask[..., _C]


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
    return torch.cat([
        aatype,
        batch["template_torsion_angles_sin_cos"].to(dtype).flatten(-2),
        batch["template_alt_torsion_angles_sin_cos"].to(dtype).flatten(-2),
        batch["template_torsion_angles_mask"].to(dtype),
    ], dim=-1)


class TemplatePointwiseAttention(nn.Module):
    """Attention of each pair position over the templates (Suppl. Alg. 17), no gating.

    Forward: z ``[*, N_res, N_res, c_z]``, t ``[*, N_templ, N_res, N_res, c_t]``,
    template_mask ``[*, N_templ]``. Returns ``[*, N_res, N_res, c_z]``. ``chunk_size`` (memory
    policy) chunks the pair rows i.
    """

    memory_spec = declare(splits={"rows": Split("pair_row", (Shard(-3), Shard(-3), WHOLE), output=-3)})
    chunk_size: Optional[int] = None

    def __init__(self, c_z: int, c_t: int, c_hidden: int, num_heads: int, inf: float = 1e5):
        super().__init__()
        self.inf = inf
        self.attention = Attention(c_z, c_t, c_hidden, num_heads, gating=False)

    def forward(self, z: Tensor, t: Tensor, template_mask: Tensor) -> Tensor:
        bias = mask_bias(template_mask, self.inf)[..., None, None, None, None, :]  # [*, 1, 1, 1, 1, N_templ]
        return run_split(self, "rows", self._rows, z, t, bias)

    def _rows(self, z: Tensor, t: Tensor, bias: Tensor) -> Tensor:
        t = t.movedim(-4, -2)  # [*, I, N_res, N_templ, c_t]
        out = self.attention(z[..., None, :], t, [bias])  # [*, I, N_res, 1, c_z]
        return out.squeeze(-2)


class TemplateEmbedding(nn.Module):
    """Template pair embedding (Alg. 2 lines 7-9, Alg. 16-17) and template angle embedding
    (Alg. 2 lines 10-13).

    ``pair_embedding`` returns the update to z ``[*, N_res, N_res, c_z]``; ``angle_embedding`` returns
    the extra MSA rows ``[*, N_templ, N_res, c_m]`` and their mask ``[*, N_templ, N_res]``.
    """

    # one template's pair features: rows i read the per-residue template features at i and at every j;
    # the angle rows: residue columns read their own features
    memory_spec = declare(stack="template", splits={
        "pair_features": Split("pair_row", (Slice(-2), WHOLE, Slice(-1), WHOLE, Slice(-1), WHOLE, Slice(-3), WHOLE,
                                            Slice(-2), WHOLE), output=-3),
        "angles": Split("msa_column", (Slice(-2),), output=Shard(-2, columns=True)),
    })
    checkpoint_every: int = 0
    chunk_size: Optional[int] = None

    def __init__(self, cfg: TemplateConfig, c_m: int, c_z: int, c_t: int):
        super().__init__()
        self.cfg = cfg
        ps = cfg.pair_stack
        self.embedding2d = Linear(cfg.pair_in_dim, c_t)
        self.blocks = nn.ModuleList([
            PairStackUpdates(c_t, ps.c_hidden_tri_mul, ps.c_hidden_tri_att, ps.num_heads_tri_att, ps.transition_n,
                             ps.dropout_rate, attention_first=True)
            for _ in range(ps.num_blocks)])
        self.output_layer_norm = LayerNorm(c_t)
        self.pointwise_attention = TemplatePointwiseAttention(c_z, c_t, cfg.pointwise_c_hidden, cfg.pointwise_num_heads)
        if cfg.embed_angles:
            self.template_single_embedding = Linear(cfg.angle_feat_dim, c_m, init="relu")
            self.template_projection = Linear(c_m, c_m, init="relu")

    def embed_one(self, single: dict[str, Tensor], pair_mask: Tensor, dtype: torch.dtype) -> Tensor:
        """One template through the pair stack: ``[*, N_res, N_res, c_t]``. The features (distogram,
        frames) are computed in at least fp32 (a geometry fp32 island, also under bf16 autocast)."""
        feature_dtype = torch.promote_types(dtype, torch.float32)

        def embed(*args: Tensor) -> Tensor:  # rows' then columns' features, by name, alternating
            rows, cols = dict(zip(_PAIR_KEYS, args[0::2])), dict(zip(_PAIR_KEYS, args[1::2]))
            return self.embedding2d(template_pair_features(rows, self.cfg, feature_dtype, cols))

        args = [single[k] for k in _PAIR_KEYS for _ in range(2)]
        t = run_split(self, "pair_features", embed, *args)
        t = run_blocks(self, t, pair_mask)
        return self.output_layer_norm(t)

    def pair_embedding(self, batch: dict[str, Tensor], z: Tensor, pair_mask: Tensor) -> Tensor:
        n_templ = batch["template_aatype"].shape[-2]
        ts = []
        for i in range(n_templ):
            single = {k: batch[k].select(pair_mask.dim() - 2, i) for k in _PAIR_KEYS}
            ts.append(self.embed_one(single, pair_mask, z.dtype))
        t = torch.stack(ts, dim=-4)  # [*, N_templ, N_res, N_res, c_t]
        template_mask = batch["template_mask"].to(z.dtype)
        out = self.pointwise_attention(z, t, template_mask)
        has_templates = (template_mask.sum(-1) > 0).to(z.dtype)[..., None, None, None]
        return out * has_templates

    def angle_embedding(self, batch: dict[str, Tensor], dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        feats = template_angle_features(batch, dtype)  # [*, N_templ, N_res, 57]
        rows = run_split(self, "angles", lambda f: self.template_projection(F.relu(self.template_single_embedding(f))),
                         feats)
        mask = batch["template_torsion_angles_mask"][..., 2].to(dtype)  # [*, N_templ, N_res]
        return rows, mask
