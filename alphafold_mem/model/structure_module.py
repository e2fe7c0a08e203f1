"""Structure module (Jumper et al. 2021, Suppl. 1.8, Alg. 20-24).

Frames inside the module are kept in nanometres (AF2's ``position_scale`` = 10 converts to Å at the
outputs); every output position and translation is in Å. One set of weights is shared by all
``num_layers`` iterations (8 in AF2). The module and its geometry are an fp32 island: autocast is off
inside (:func:`alphafold_mem.precision.fp32_region`) and the inputs are cast to fp32.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..config import StructureModuleConfig
from ..geometry import all_atom
from ..geometry.rigid import Rigid
from ..memory.axes import WHOLE, Shard, Slice, Split, declare, exempt, run_split
from ..memory.chunking import estimating
from ..precision import fp32_island, fp32_region
from .primitives import LayerNorm, Linear


class InvariantPointAttention(nn.Module):
    """Invariant point attention (Suppl. Alg. 22).

    Forward: s ``[*, N_res, c_s]``, z ``[*, N_res, N_res, c_z]``, frames (Rigid ``[*, N_res]``, nm),
    mask ``[*, N_res]``, pair_norm: ``None`` if z is already normalised, else the LayerNorm to apply
    to every chunk of z rows. Returns ``[*, N_res, c_s]``. The output is invariant to a global rigid
    motion applied to all frames.

    ``chunk_size`` (memory policy) chunks the queries i: the pair bias, logits ``[*, H, I, N_res]``,
    squared point distances ``[*, I, N_res, H, P_q]`` and the pair-weighted output exist for one
    chunk of rows at a time (and, with ``pair_norm``, the normalised fp32 rows of z).
    """

    # rows i read the queries q_i (scalar and points, flattened), z rows i and the mask of i; keys,
    # values, their points and the whole mask every chunk reads whole. The result is per residue:
    # under device sharding every device holds it whole.
    memory_spec = declare(
        splits={
            "queries": Split(
                "pair_row",
                (Slice(-2), Slice(-2), Shard(-3), Slice(-1), WHOLE, WHOLE, WHOLE, WHOLE, WHOLE),
                output=Slice(-2),
            )
        }
    )
    chunk_size: Optional[int] = None

    def __init__(
        self,
        c_s: int,
        c_z: int,
        c_hidden: int,
        num_heads: int,
        num_qk_points: int,
        num_v_points: int,
        inf: float = 1e5,
        eps: float = 1e-8,
    ):
        super().__init__()
        self.c, self.h, self.pq, self.pv = c_hidden, num_heads, num_qk_points, num_v_points
        self.inf, self.eps = inf, eps
        h = num_heads
        self.q_scalar = Linear(c_s, h * c_hidden)
        self.kv_scalar = Linear(c_s, 2 * h * c_hidden)
        self.q_point_local = Linear(c_s, 3 * h * num_qk_points)
        self.kv_point_local = Linear(c_s, 3 * h * (num_qk_points + num_v_points))
        # softplus^-1(1): the point weights start at 1 (Suppl. 1.8.2)
        self.trainable_point_weights = nn.Parameter(torch.full((h,), math.log(math.e - 1.0)))
        self.attention_2d = Linear(c_z, h)
        concat = h * (c_z + c_hidden + 4 * num_v_points)
        self.output_projection = Linear(concat, c_s, init="final")

    def _points(self, linear: Linear, s: Tensor, frames: Rigid, n_points: int) -> Tensor:
        """Project to ``[*, N_res, H, P, 3]`` local points (x|y|z blocks, heads slower) then to global."""
        p = linear(s).unflatten(-1, (3, self.h, n_points))  # [*, N_res, 3, H, P]
        p = p.movedim(-3, -1)  # [*, N_res, H, P, 3]
        return frames[..., None, None].apply(p)

    def project(self, s: Tensor, frames: Rigid) -> tuple[Tensor, ...]:
        """Scalar queries, keys, values ``[*, N_res, H, C]`` and global query, key and value points
        ``[*, N_res, H, Pq|Pv, 3]`` (Alg. 22 lines 1-3)."""
        h, c = self.h, self.c
        q = self.q_scalar(s).unflatten(-1, (h, c))  # [*, N_res, H, C]
        k, v = self.kv_scalar(s).unflatten(-1, (h, 2 * c)).split(c, dim=-1)  # 2 x [*, N_res, H, C]
        q_pts = self._points(self.q_point_local, s, frames, self.pq)  # [*, N_res, H, Pq, 3]
        kv_pts = self._points(self.kv_point_local, s, frames, self.pq + self.pv)
        k_pts, v_pts = kv_pts.split([self.pq, self.pv], dim=-2)  # [*, N_res, H, Pq|Pv, 3]
        return q, k, v, q_pts, k_pts, v_pts

    def forward(self, s: Tensor, z: Tensor, frames: Rigid, mask: Tensor, pair_norm=None) -> Tensor:
        h, c = self.h, self.c
        q, k, v, q_pts, k_pts, v_pts = self.project(s, frames)
        gamma = F.softplus(self.trainable_point_weights) * math.sqrt(1.0 / (3 * self.pq * 9.0 / 2))  # [H]

        def rows(q_i, qp_i, z_i, mask_i, k, v, k_pts, v_pts, mask):  # one chunk of query rows i
            q_i, qp_i = q_i.unflatten(-1, (h, c)), qp_i.unflatten(-1, (h, self.pq, 3))
            z_i = z_i if pair_norm is None else pair_norm(z_i)
            logits = torch.einsum("...ihc,...jhc->...hij", q_i * math.sqrt(1.0 / (3 * c)), k)  # [*, H, I, N_res]
            d2 = ((qp_i[..., :, None, :, :, :] - k_pts[..., None, :, :, :, :]) ** 2).sum(-1)  # [*, I, J, H, Pq]
            logits = logits - 0.5 * (d2 * gamma[:, None]).sum(-1).movedim(-1, -3)  # [*, H, I, J]
            del d2
            logits = logits + math.sqrt(1.0 / 3) * self.attention_2d(z_i).movedim(-1, -3)
            mask_2d = mask_i[..., :, None] * mask[..., None, :]
            logits = logits - self.inf * (1.0 - mask_2d[..., None, :, :])
            a = torch.softmax(logits, dim=-1)  # [*, H, I, N_res]
            o = torch.einsum("...hij,...jhc->...ihc", a, v)  # [*, I, H, C]
            o_pt = torch.einsum("...hij,...jhpx->...ihpx", a, v_pts)  # [*, I, H, Pv, 3] global
            o_pair = torch.einsum("...hij,...ijc->...ihc", a, z_i)  # [*, I, H, c_z]
            return o.flatten(-2), o_pt.flatten(-3), o_pair.flatten(-2)

        o, o_pt, o_pair = run_split(
            self, "queries", rows, q.flatten(-2), q_pts.flatten(-3), z, mask, k, v, k_pts, v_pts, mask
        )
        o_pt = frames[..., None, None].invert_apply(o_pt.unflatten(-1, (h, self.pv, 3)))  # local
        o_norm = torch.sqrt(self.eps + (o_pt**2).sum(-1))  # [*, N_res, H, Pv]
        feats = [o, *[o_pt[..., i].flatten(-2) for i in range(3)], o_norm.flatten(-2), o_pair]
        return self.output_projection(torch.cat(feats, dim=-1))


class InvariantPointAttentionMultimer(InvariantPointAttention):
    """Invariant point attention of AF2-Multimer (Evans et al. 2021; AF2 ``folding_multimer``): the
    same attention (Suppl. Alg. 22) with separate bias-free scalar projections
    (``q/k/v_scalar_projection``) and separate point projections whose outputs are laid out per
    head, ``[H, x|y|z, P]`` (the monomer splits x|y|z across all heads first).

    Forward and memory behaviour as :class:`InvariantPointAttention`.
    """

    memory_spec = InvariantPointAttention.memory_spec
    chunk_size: Optional[int] = None

    def __init__(self, c_s: int, c_z: int, c_hidden: int, num_heads: int, num_qk_points: int, num_v_points: int):
        nn.Module.__init__(self)
        self.c, self.h, self.pq, self.pv = c_hidden, num_heads, num_qk_points, num_v_points
        self.inf, self.eps = 1e5, 1e-8
        h = num_heads
        self.q_scalar_projection = Linear(c_s, h * c_hidden, bias=False)
        self.k_scalar_projection = Linear(c_s, h * c_hidden, bias=False)
        self.v_scalar_projection = Linear(c_s, h * c_hidden, bias=False)
        self.q_point_projection = Linear(c_s, h * 3 * num_qk_points)
        self.k_point_projection = Linear(c_s, h * 3 * num_qk_points)
        self.v_point_projection = Linear(c_s, h * 3 * num_v_points)
        self.trainable_point_weights = nn.Parameter(torch.full((h,), math.log(math.e - 1.0)))
        self.attention_2d = Linear(c_z, h)
        concat = h * (c_z + c_hidden + 4 * num_v_points)
        self.output_projection = Linear(concat, c_s, init="final")

    def _points(self, linear: Linear, s: Tensor, frames: Rigid, n_points: int) -> Tensor:
        """Project to ``[*, N_res, H, P, 3]`` local points (per head: x|y|z blocks) then to global."""
        p = linear(s).unflatten(-1, (self.h, 3, n_points)).transpose(-1, -2)  # [*, N_res, H, P, 3]
        return frames[..., None, None].apply(p)

    def project(self, s: Tensor, frames: Rigid) -> tuple[Tensor, ...]:
        h, c = self.h, self.c
        q, k, v = (
            lin(s).unflatten(-1, (h, c))
            for lin in (self.q_scalar_projection, self.k_scalar_projection, self.v_scalar_projection)
        )
        q_pts = self._points(self.q_point_projection, s, frames, self.pq)
        k_pts = self._points(self.k_point_projection, s, frames, self.pq)
        v_pts = self._points(self.v_point_projection, s, frames, self.pv)
        return q, k, v, q_pts, k_pts, v_pts


class AngleResnet(nn.Module):
    """Torsion-angle prediction (Suppl. Alg. 20 lines 11-14): a small residual network on the
    current and the initial single representation, 7 angles as unnormalised (sin, cos).

    Forward: s, s_initial ``[*, N_res, c_s]``. Returns unnormalised and normalised angles
    ``[*, N_res, 7, 2]``.
    """

    memory_spec = exempt("per residue: [*, N_res, c_resnet] activations only")

    def __init__(self, c_s: int, c_resnet: int, num_blocks: int, num_angles: int, eps: float = 1e-12):
        super().__init__()
        self.num_angles, self.eps = num_angles, eps
        self.input_projection = Linear(c_s, c_resnet)
        self.input_projection_1 = Linear(c_s, c_resnet)
        self.resblocks = nn.ModuleList(
            [
                nn.ModuleDict(
                    {
                        "linear_1": Linear(c_resnet, c_resnet, init="relu"),
                        "linear_2": Linear(c_resnet, c_resnet, init="final"),
                    }
                )
                for _ in range(num_blocks)
            ]
        )
        self.unnormalized_angles = Linear(c_resnet, 2 * num_angles)

    def forward(self, s: Tensor, s_initial: Tensor) -> tuple[Tensor, Tensor]:
        a = self.input_projection(F.relu(s)) + self.input_projection_1(F.relu(s_initial))
        for block in self.resblocks:
            a = a + block["linear_2"](F.relu(block["linear_1"](F.relu(a))))
        raw = self.unnormalized_angles(F.relu(a)).unflatten(-1, (self.num_angles, 2))  # [*, N_res, 7, 2]
        norm = torch.sqrt(torch.clamp((raw**2).sum(-1, keepdim=True), min=self.eps))
        return raw, raw / norm


class StructureModule(nn.Module):
    """The structure module (Suppl. Alg. 20) with shared weights across its iterations;
    ``multimer=True``: AF2-Multimer's invariant point attention (:class:`InvariantPointAttentionMultimer`;
    its backbone update ``quat_rigid`` is the same quaternion-and-translation update, and its frames
    are in units of ``cfg.position_scale`` = 20 Å).

    Forward: s ``[*, N_res, c_s]`` (Evoformer single), z ``[*, N_res, N_res, c_z]``, aatype
    ``[*, N_res]``, mask (seq_mask) ``[*, N_res]``.

    Returns a dict with, per iteration L (stacked on a leading layer dim):
    ``frames`` ``[L, *, N_res, 4, 4]`` (Å), ``sidechain_frames`` ``[L, *, N_res, 8, 4, 4]`` (Å),
    ``unnormalized_angles`` / ``angles`` ``[L, *, N_res, 7, 2]``, ``positions`` ``[L, *, N_res, 14, 3]``
    (atom14, Å), ``states`` ``[L, *, N_res, c_s]``; and ``single`` ``[*, N_res, c_s]`` (the final state).
    """

    memory_spec = exempt(
        "per-residue layers around invariant point attention (whose declaration covers the "
        "pair-sized part: with a chunk size it also normalises z in fp32 one chunk of rows at a time)"
    )

    def __init__(self, c_s: int, c_z: int, cfg: StructureModuleConfig, multimer: bool = False):
        super().__init__()
        self.cfg = cfg
        self.single_layer_norm = LayerNorm(c_s)
        self.initial_projection = Linear(c_s, c_s)
        self.pair_layer_norm = LayerNorm(c_z)
        ipa = InvariantPointAttentionMultimer if multimer else InvariantPointAttention
        self.invariant_point_attention = ipa(
            c_s, c_z, cfg.c_ipa, cfg.num_heads_ipa, cfg.num_qk_points, cfg.num_v_points
        )
        self.attention_layer_norm = LayerNorm(c_s)
        self.transition = nn.ModuleList(
            [Linear(c_s, c_s, init="relu"), Linear(c_s, c_s, init="relu"), Linear(c_s, c_s, init="final")]
        )
        self.transition_layer_norm = LayerNorm(c_s)
        self.affine_update = Linear(c_s, 6, init="final")
        self.rigid_sidechain = AngleResnet(c_s, cfg.c_resnet, cfg.num_resnet_blocks, cfg.num_angles)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, s: Tensor, z: Tensor, aatype: Tensor, mask: Tensor) -> dict[str, Tensor]:
        with fp32_region(s.device.type):
            return self._forward(fp32_island(s), z, aatype, fp32_island(mask))

    def _forward(self, s: Tensor, z: Tensor, aatype: Tensor, mask: Tensor) -> dict[str, Tensor]:
        pair_norm = lambda zc: self.pair_layer_norm(fp32_island(zc))  # noqa: E731
        if self.invariant_point_attention.chunk_size is None:  # the reference: z normalised once
            z, pair_norm = pair_norm(z), None
        s_initial = self.single_layer_norm(s)  # AF2: the angle resnet sees the normed input
        s = self.initial_projection(s_initial)
        frames = Rigid.identity(tuple(s.shape[:-1]), dtype=s.dtype, device=s.device)
        outs: dict[str, list[Tensor]] = {
            k: [] for k in ("frames", "sidechain_frames", "unnormalized_angles", "angles", "positions", "states")
        }
        last = self.cfg.num_layers - 1
        for layer in range(self.cfg.num_layers):
            if estimating() and layer < last:  # the estimator's cut: the last layer peaks highest (it
                # holds every earlier layer's outputs besides its own transients): only their outputs
                self._estimated_outputs(outs, s)
                continue
            s = s + self.invariant_point_attention(s, z, frames, mask, pair_norm)
            s = self.attention_layer_norm(self.dropout(s))
            t = F.relu(self.transition[0](s))
            t = F.relu(self.transition[1](t))
            s = self.transition_layer_norm(self.dropout(s + self.transition[2](t)))
            frames = frames.compose_q_update_vec(self.affine_update(s))
            raw, angles = self.rigid_sidechain(s, s_initial)
            frames_a = frames.scale_translation(self.cfg.position_scale)  # Å
            sc_frames = all_atom.torsion_angles_to_frames(frames_a, angles, aatype)  # [*, N_res, 8]
            positions = all_atom.frames_to_atom14_positions(sc_frames, aatype)  # [*, N_res, 14, 3]
            outs["frames"].append(frames_a.to_tensor_4x4())
            outs["sidechain_frames"].append(sc_frames.to_tensor_4x4())
            outs["unnormalized_angles"].append(raw)
            outs["angles"].append(angles)
            outs["positions"].append(positions)
            outs["states"].append(s)
            frames = frames.stop_rot_gradient()
        result = {k: torch.stack(v) for k, v in outs.items()}
        result["single"] = s
        return result

    @staticmethod
    def _estimated_outputs(outs: dict[str, list[Tensor]], s: Tensor) -> None:
        """For the memory estimator: one skipped layer's outputs, allocated with their shapes."""
        n = tuple(s.shape[:-1])
        shapes = {
            "frames": n + (4, 4),
            "sidechain_frames": n + (8, 4, 4),
            "unnormalized_angles": n + (7, 2),
            "angles": n + (7, 2),
            "positions": n + (14, 3),
            "states": tuple(s.shape),
        }
        for k, shape in shapes.items():
            outs[k].append(s.new_empty(shape))
