"""The AlphaFold2 monomer network with recycling (Jumper et al. 2021, Suppl. Alg. 2).

This is the only file that wires the modules together. Forwards take data only: memory behaviour
(chunking, checkpointing, kernels, precision) is bound to the modules from outside by
:func:`alphafold_mem.bind`; the model-level seams are ``precision`` (the one autocast
is entered here, around the whole recycling loop), ``inplace`` (inference: the pair representation
is built in the storage of the recycled one, the MSA representation in one buffer with the
template rows) and ``offload`` (inference on an accelerator: the recycled state waits in host
memory between iterations).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from .. import precision as _precision
from ..config import ModelConfig
from ..geometry import all_atom, residue_constants
from ..memory.axes import declare
from ..memory.offload import Parked, offload_active
from .embedders import ExtraMsaEmbedder, InputEmbedder, InputEmbedderMultimer, RecyclingEmbedder
from .evoformer import EvoformerStack, ExtraMsaStack
from .features import MonomerFeatures, MultimerFeatures
from .heads import AuxiliaryHeads
from .structure_module import StructureModule
from .template import TemplateEmbedding
from .template_multimer import TemplateEmbeddingMultimer

#: Our output name -> OpenFold's, where they differ. (Layouts differ too: our ``sm_frames`` are 4x4
#: matrices, OpenFold's quaternion + translation.)
OPENFOLD_OUTPUT_NAMES = {"ptm": "ptm_score", "pae_logits": "tm_logits"}

#: Outputs shaped like a representation, by the dim of their rows (their columns follow): device
#: sharding leaves them distributed unless asked to gather them.
REPRESENTATION_OUTPUTS = {
    "pair": -3,
    "msa": -3,
    "distogram_logits": -3,
    "masked_msa_logits": -3,
    "pae_logits": -3,
    "predicted_aligned_error": -2,
}

_CA = residue_constants.atom_order["CA"]  # atom37 index


class AlphaFold(nn.Module):
    """AlphaFold2 monomer (Suppl. Alg. 2): embedders, templates, extra-MSA stack, Evoformer,
    structure module and auxiliary heads, with recycling.

    Args:
        config: a :class:`alphafold_mem.config.ModelConfig` (see :func:`alphafold_mem.model_config`).

    Memory attributes (set by :func:`alphafold_mem.bind`): ``precision`` (``"fp32"``,
    ``"bf16"`` or ``"bf16-full"``, see :mod:`alphafold_mem.precision`), ``offload`` (see
    :data:`alphafold_mem.memory.offload.OFFLOAD_LEVELS`) and ``inplace`` (bool).
    """

    memory_spec = declare(seams=["precision", "offload", "inplace"], outputs=REPRESENTATION_OUTPUTS)
    precision: str = "fp32"
    offload: str = "none"
    inplace: bool = False

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = c = config
        ie = c.input_embedder
        # where AF2-Multimer differs, its own classes (chosen here, from the config)
        self.features = MultimerFeatures if c.multimer else MonomerFeatures
        if c.multimer:
            self.input_embedder = InputEmbedderMultimer(
                ie.tf_dim, ie.msa_dim, c.c_m, c.c_z, ie.relpos_k, ie.max_relative_chain
            )
        else:
            self.input_embedder = InputEmbedder(ie.tf_dim, ie.msa_dim, c.c_m, c.c_z, ie.relpos_k)
        r = c.recycling
        self.recycling_embedder = RecyclingEmbedder(c.c_m, c.c_z, r.num_bins, r.min_bin, r.max_bin)
        template = TemplateEmbeddingMultimer if c.multimer else TemplateEmbedding
        self.template_embedding = template(c.template, c.c_m, c.c_z, c.c_t) if c.template.enabled else None
        self.extra_msa_embedder = ExtraMsaEmbedder(c.c_e)
        self.extra_msa_stack = ExtraMsaStack(c.c_e, c.c_z, c.extra_msa)
        self.evoformer = EvoformerStack(c.c_m, c.c_z, c.c_s, c.evoformer)
        self.structure_module = StructureModule(c.c_s, c.c_z, c.structure_module, multimer=c.multimer)
        self.aux_heads = AuxiliaryHeads(c.c_m, c.c_z, c.c_s, c.heads)

    # ------------------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Tensor], recycle_dim: Optional[int] = None) -> dict[str, Tensor]:
        """Run the network with recycling.

        Args:
            batch: AF2 feature dict (names as in AF2/OpenFold), each with an optional leading batch
                dim: ``aatype [*, N_res]`` (int, 0-20), ``residue_index [*, N_res]``, ``seq_mask
                [*, N_res]``, ``target_feat [*, N_res, 22]``, ``msa_feat [*, N_seq, N_res, 49]``,
                ``msa_mask [*, N_seq, N_res]``, ``extra_msa [*, N_extra, N_res]`` (int, 0-21),
                ``extra_msa_mask``, ``extra_has_deletion``, ``extra_deletion_value [*, N_extra, N_res]``
                and, when templates are enabled, ``template_*`` (see :mod:`alphafold_mem.model.template`).
                Optional: ``atom37_atom_exists [*, N_res, 37]`` (derived from aatype if absent).
                Keys the model does not use are ignored.
            recycle_dim: ``None``: every iteration reads the same features and the number of
                iterations is ``config.num_recycles + 1`` (at most, with early stopping). An int
                (OpenFold's convention is -1):
                every feature carries a recycling dim there; iteration i reads ``feature[..., i]``
                and the number of iterations is its size.

        Returns:
            ``final_atom_positions [*, N_res, 37, 3]`` (Å), ``final_atom_mask [*, N_res, 37]``,
            ``final_atom14_positions [*, N_res, 14, 3]``, ``plddt [*, N_res]`` (0-100),
            ``lddt_logits``, ``distogram_logits [*, N_res, N_res, 64]``, ``masked_msa_logits
            [*, N_seq, N_res, 23]``, ``experimentally_resolved_logits [*, N_res, 37]``, ``single
            [*, N_res, c_s]``, ``pair [*, N_res, N_res, c_z]``, ``msa [*, N_seq, N_res, c_m]``, the
            per-layer structure-module outputs ``sm_frames [L, *, N_res, 4, 4]``, ``sm_sidechain_frames``,
            ``sm_positions``, ``sm_angles``, ``sm_unnormalized_angles``, ``sm_states``, ``sm_single``,
            ``num_recycles`` (iterations run: fewer than asked when ``config.recycle_early_stop_tolerance``
            > 0 stopped recycling early, AF2 v2.3; then also ``recycle_ca_change``, the last Cα distance
            change in Å, :func:`ca_distance_change`), and for PAE presets ``predicted_aligned_error
            [*, N_res, N_res]`` (Å), ``max_predicted_aligned_error``, ``pae_logits`` and ``ptm [*]``
            (OpenFold calls these ``tm_logits`` and ``ptm_score``).

        Raises:
            KeyError: a required feature is missing (the message names it).
        """
        keys = list(self.features.required)
        if self.template_embedding is not None:
            keys += list(self.features.template_keys)
        missing = [k for k in keys if k not in batch]
        if missing:
            raise KeyError(f"AlphaFold.forward: missing features {missing}")
        if "atom37_atom_exists" in batch:
            keys.append("atom37_atom_exists")
        feats = {k: batch[k] for k in keys}

        aatype_ndim = feats["aatype"].dim() - (1 if recycle_dim is not None else 0)
        unbatched = aatype_ndim == 1
        if unbatched:
            feats = {k: v.unsqueeze(0) for k, v in feats.items()}
        if recycle_dim is not None:
            rdim = recycle_dim if recycle_dim < 0 else recycle_dim + (1 if unbatched else 0)
            num_iters = feats["aatype"].shape[rdim]
        else:
            num_iters = self.config.num_recycles + 1

        dtype = next(self.parameters()).dtype
        prev: list[Tensor] = []
        parked: list[Parked] = []
        grad_enabled = torch.is_grad_enabled()
        outputs: dict[str, Tensor] = {}
        tolerance = float(self.config.recycle_early_stop_tolerance)
        change = None  # the last Ca distance change measured (early stopping only)
        i, last = 0, num_iters == 1
        with _precision.autocast(self.precision, feats["aatype"].device.type):
            while True:
                it = feats if recycle_dim is None else {k: v.select(rdim, i) for k, v in feats.items()}
                it = {k: v.to(dtype) if v.is_floating_point() else v for k, v in it.items()}
                outputs.clear()  # the previous iteration's outputs are not kept alive during this one
                # Gradients flow only through the last iteration (Suppl. 1.10).
                for p in parked:  # the recycled state, back from host memory
                    p.restore()
                ca_in = None
                if tolerance > 0 and not last:  # the Ca positions this iteration recycles (zeros at first)
                    ca_in = prev[2][..., _CA, :].float().clone() if prev else None
                with torch.set_grad_enabled(grad_enabled and last):
                    outputs, prev = self.iteration(it, prev)
                if last:
                    break
                i += 1
                last = i == num_iters - 1
                if tolerance > 0:  # AF2 v2.3: the next iteration is the last once the change is within tolerance
                    ca_out = prev[2][..., _CA, :].float()
                    change = ca_distance_change(ca_in if ca_in is not None else torch.zeros_like(ca_out), ca_out, it)
                    last = last or change <= tolerance
                parked = [Parked(t) for t in prev] if self._offloading(prev[1]) else []
        outputs["num_recycles"] = torch.tensor(i + 1)
        if change is not None:
            outputs["recycle_ca_change"] = torch.tensor(change)
        if unbatched:
            outputs = {k: _unbatch(k, v) for k, v in outputs.items()}
        return outputs

    def _offloading(self, x: Tensor) -> bool:
        return self.offload != "none" and not torch.is_grad_enabled() and offload_active(x.device)

    # ------------------------------------------------------------------------------------------
    def iteration(self, batch: dict[str, Tensor], prev: list[Tensor]):
        """One pass through the network (Suppl. Alg. 2 lines 5-24) on features with a batch dim.

        Args:
            batch: features with a batch dim.
            prev: the recycled state ``[m[0], z, final_atom_positions]`` of the previous iteration,
                or an empty list for the first. The list is emptied once embedded, so the caller
                holds no reference to the previous state while this iteration runs.

        Returns the outputs and the recycled state ``[m[0], z, final_atom_positions]`` (detached).

        Order (the same function as Alg. 2): the pair representation is embedded (recycled z and
        positions, then target features and relative positions), updated by the templates and the
        extra-MSA stack; the MSA representation is built only then, right before the Evoformer,
        because nothing earlier reads it. Under ``inplace`` without autograd (inference) z is built
        in the storage of the recycled z, and every pair-sized step runs in row chunks.
        """
        aatype = batch["aatype"].long()
        seq_mask = batch["seq_mask"]
        n_seq = batch["msa_feat"].shape[-3]
        device_type = aatype.device.type
        rep_dtype = _precision.representation_dtype(self.precision, seq_mask.dtype)
        msa_dtype = _precision.representation_dtype(self.precision, seq_mask.dtype, stream="msa")
        # the masks in the streams' dtype (0/1 are exact), so that a masked update does not promote
        # a bf16 stream back to fp32
        pair_mask = (seq_mask[..., :, None] * seq_mask[..., None, :]).to(rep_dtype)  # [*, N_res, N_res]
        fast = self.inplace and not torch.is_grad_enabled()
        b, n = aatype.shape
        positions = self.input_embedder.positions(batch)  # what the relative encoding reads
        asym_id = self.features.asym_id(batch)
        m0_prev, z_prev, x_prev = prev if prev else (None, None, None)
        prev.clear()
        if x_prev is None:
            x_prev = seq_mask.new_zeros(b, n, 37, 3)
        pb, _ = all_atom.pseudo_beta(aatype, x_prev, x_prev.new_ones(x_prev.shape[:-1]))
        del x_prev

        # -- the pair representation (Alg. 2 lines 5, 6 (z part), 7-9, 14-16)
        def embed():  # the embedders' context: an fp32 island under "bf16"
            return _precision.embedder_region(self.precision, device_type)

        if fast:
            with embed():
                if z_prev is None:  # zeros: normalised row by row from a broadcast view, nothing allocated
                    zeros = seq_mask.new_zeros(()).to(rep_dtype).expand(b, n, n, self.config.c_z)
                    z = self.recycling_embedder.pair_update(zeros, pb, out=pb.new_empty(zeros.shape, dtype=rep_dtype))
                else:  # the recycled z becomes the new one
                    z = self.recycling_embedder.pair_update(z_prev, pb, out=z_prev)
                del z_prev
                self.input_embedder.add_pair_(z, batch["target_feat"], positions)
        else:
            with embed():
                m, z = self.input_embedder(batch["target_feat"], positions, batch["msa_feat"])
                if z_prev is None:  # zeros as a broadcastable [*, 1, 1, c_z] (the same values, no N_res^2 buffer)
                    z_prev = z.new_zeros(b, 1, 1, self.config.c_z).to(rep_dtype)
                z_update = self.recycling_embedder.pair_update(z_prev, pb)
            del z_prev
            z = z.to(rep_dtype)
            if (
                torch.is_grad_enabled()
                or torch.result_type(z, z_update) != z.dtype
                or all_atom.broadcast_shapes(z.shape, z_update.shape) != z.shape
            ):
                z = z + z_update
            else:  # inference: the same sum in z's own (fresh) buffer; under DAP, where the in-place
                # embedding is off, a third pair-sized tensor would otherwise set the peak
                z = z.add_(z_update)
            del z_update
        if self.template_embedding is not None:
            z = self.template_embedding.add_pair_embedding(z, batch, pair_mask)
        with embed():
            e = self.extra_msa_embedder(batch["extra_msa"], *self.features.extra_deletions(batch))
        z = self.extra_msa_stack(e.to(msa_dtype), z, batch["extra_msa_mask"].to(msa_dtype), pair_mask)
        del e  # the extra-MSA representation is not needed again

        # -- the MSA representation (Alg. 2 lines 5, 6 (m part), 10-13), then the Evoformer
        with embed():
            m0_update = self.recycling_embedder.prev_msa_first_row_norm(
                m0_prev if m0_prev is not None else seq_mask.new_zeros(b, 1, self.config.c_m).to(msa_dtype)
            )
        del m0_prev
        rows = None
        msa_mask = batch["msa_mask"].to(msa_dtype)
        if self.template_embedding is not None and self.config.template.embed_angles:
            rows, rows_mask = self.template_embedding.angle_embedding(batch, msa_dtype)
            msa_mask = torch.cat([msa_mask, rows_mask.to(msa_dtype)], dim=-2)
        if fast:
            m = pb.new_empty((b, n_seq + (0 if rows is None else rows.shape[-3]), n, self.config.c_m), dtype=msa_dtype)
            with embed():
                self.input_embedder.msa(batch["target_feat"], batch["msa_feat"], out=m[..., :n_seq, :, :])
            m[..., 0, :, :].add_(m0_update)
            if rows is not None:
                m[..., n_seq:, :, :].copy_(rows)
        else:
            m = m.to(msa_dtype)
            m = torch.cat([(m[..., 0, :, :] + m0_update).unsqueeze(-3), m[..., 1:, :, :]], dim=-3)
            if rows is not None:
                m = torch.cat([m, rows.to(m.dtype)], dim=-3)
        del m0_update, rows
        m, z, s = self.evoformer(m, z, msa_mask, pair_mask)

        sm = self.structure_module(s, z, aatype, seq_mask)
        atom14 = sm["positions"][-1]  # [*, N_res, 14, 3]
        if "atom37_atom_exists" in batch:
            atom37_exists = batch["atom37_atom_exists"]
        else:
            atom37_exists = all_atom.make_atom14_masks(aatype)["atom37_atom_exists"].to(atom14.dtype)
        atom37 = all_atom.atom14_to_atom37(atom14, aatype) * atom37_exists[..., None]

        m = m[..., :n_seq, :, :]
        out = {
            "final_atom_positions": atom37,
            "final_atom_mask": atom37_exists,
            "final_atom14_positions": atom14,
            "single": s,
            "pair": z,
            "msa": m,
            **{f"sm_{k}": v for k, v in sm.items()},
        }
        out.update(self.aux_heads(m, z, s, sm["single"], seq_mask, asym_id))
        # m[0] copied: a view would keep the whole MSA representation alive into the next iteration
        return out, [m[..., 0, :, :].detach().clone(), z.detach(), atom37.detach()]


def ca_distance_change(ca_before: Tensor, ca_after: Tensor, batch: dict[str, Tensor]) -> float:
    """AF2 v2.3's recycling early-stop measure (``recycle_cond`` in ``modules.py``, after AF2Complex):
    the root mean square, over residue pairs of ``seq_mask``, of the change of the Cα-Cα distance
    matrix between two iterations, in Å (the largest over a batch).

    Args:
        ca_before: Cα positions ``[*, N_res, 3]`` (Å) recycled into an iteration.
        ca_after: Cα positions ``[*, N_res, 3]`` (Å) out of the same iteration.
        batch: features with ``seq_mask [*, N_res]``.
    """

    def distances(x: Tensor) -> Tensor:  # [*, N_res, N_res], exact differences (no matmul identity)
        return torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")

    mask = batch["seq_mask"].float()
    pair_mask = mask[..., :, None] * mask[..., None, :]
    sq = (distances(ca_before) - distances(ca_after)).square() * pair_mask
    mean = sq.sum(dim=(-1, -2)) / pair_mask.sum(dim=(-1, -2)).clamp(min=1e-10)
    return float(torch.sqrt(mean + 1e-8).max())


def _unbatch(key: str, value: Tensor) -> Tensor:
    """Remove the batch dim added for unbatched input (structure-module outputs carry it second)."""
    if value.dim() == 0:
        return value
    if key.startswith("sm_") and key != "sm_single":
        return value.squeeze(1)
    return value.squeeze(0)


__all__ = ["AlphaFold", "OPENFOLD_OUTPUT_NAMES", "REPRESENTATION_OUTPUTS", "ca_distance_change"]
