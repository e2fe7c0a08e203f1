"""Input, relative-position, recycling and extra-MSA embedders (Jumper et al. 2021, Suppl. Alg. 3-5, 32).

Each embedder declares its output as a step (``memory_spec``): the MSA embeddings along residue
columns, the pair embeddings along pair rows. Chunking then bounds their transients (the
relative-position one-hot, the distogram), and device sharding makes every device embed only its
own columns / rows from the inputs, which all devices hold whole.

The one-hot inputs (relative positions, extra-MSA tokens) are embedded by looking up the columns
of the linear layer's weight instead of multiplying a one-hot tensor (the same numbers; the one-hot
of the relative positions alone would be ``[*, N_res, N_res, 65]`` int64). The pair-sized parts
run in row chunks (``chunk_size``, memory policy) and, for inference, write into an existing
buffer: the pair representation is built in the storage of the recycled one.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..memory.axes import WHOLE, Shard, Slice, Split, declare, run_split
from .primitives import LayerNorm, Linear


def dgram_from_positions(
    x: Tensor, num_bins: int, min_bin: float, max_bin: float, y: Optional[Tensor] = None
) -> Tensor:
    """One-hot distogram of pairwise distances (Suppl. Alg. 32 line 1; template features 1.7.1).

    Args:
        x: positions of the rows i ``[*, N, 3]`` in Å.
        num_bins: number of bins: ``num_bins`` lower edges evenly spaced from ``min_bin`` to
            ``max_bin``; the last bin is open-ended.
        min_bin: the first lower edge (Å).
        max_bin: the last lower edge (Å).
        y: positions of the columns j ``[*, M, 3]`` in Å (default: x).

    Returns:
        ``[*, N, M, num_bins]`` (dtype of x).
    """
    y = x if y is None else y
    lower = torch.linspace(min_bin, max_bin, num_bins, device=x.device, dtype=x.dtype) ** 2
    upper = torch.cat([lower[1:], lower.new_tensor([1e8])])
    d2 = ((x[..., :, None, :] - y[..., None, :, :]) ** 2).sum(-1, keepdim=True)  # [*, N, M, 1]
    return ((d2 > lower) & (d2 < upper)).to(x.dtype)


def _compute_dtype(linear: Linear, device_type: str) -> torch.dtype:
    """The dtype ``linear`` computes in here: autocast's, or its weight's."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return linear.weight.dtype


def one_hot_linear(linear: Linear, index: Tensor) -> Tensor:
    """``linear(one_hot(index, linear.in_features))`` by looking up weight columns: ``[*, c_out]``.
    Under autocast the weight and bias are rounded first, as the autocast matmul rounds them."""
    dtype = _compute_dtype(linear, index.device.type)
    return F.embedding(index.long(), linear.weight.t().to(dtype)) + linear.bias.to(dtype)


class InputEmbedder(nn.Module):
    """Embeds target_feat and msa_feat into m and z, with relative position encoding (Alg. 3-4).

    Forward: target_feat ``[*, N_res, tf_dim]``, positions ``[*, N_res, K]`` (:meth:`positions`
    of the feature dict: here ``residue_index`` alone, K = 1), msa_feat ``[*, N_seq, N_res,
    msa_dim]``. Returns m ``[*, N_seq, N_res, c_m]`` and z ``[*, N_res, N_res, c_z]``.
    :meth:`msa` and :meth:`add_pair_` are the two halves for inference: m written into a given
    buffer, z added into an existing pair buffer, in chunks.
    """

    memory_spec = declare(
        splits={
            # m[s, i] reads msa_feat[s, i] and target_feat[i]
            "msa": Split("msa_column", (Slice(-2), Slice(-2)), output=Shard(-2, columns=True)),
            # z[i, j] reads target_feat and the positions at i and at j
            "pair": Split("pair_row", (Slice(-2), WHOLE, Slice(-2), WHOLE), output=-3),
            # in place (inference): m in MSA row chunks; rows i of z += left_i + right_j + relpos_ij
            "msa_rows": Split("msa_row", (Slice(-3), WHOLE), output=-3),
            "pair_add": Split("pair_row", (Slice(-2), Slice(-2), WHOLE, WHOLE), output=-3),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, tf_dim: int, msa_dim: int, c_m: int, c_z: int, relpos_k: int):
        super().__init__()
        self.relpos_k = relpos_k
        self.preprocess_1d = Linear(tf_dim, c_m)
        self.preprocess_msa = Linear(msa_dim, c_m)
        self.left_single = Linear(tf_dim, c_z)
        self.right_single = Linear(tf_dim, c_z)
        self._relpos_linear(c_z)

    def _relpos_linear(self, c_z: int) -> None:
        self.pair_activations = Linear(2 * self.relpos_k + 1, c_z)  # AF2 name: pair_activiations

    @staticmethod
    def positions(batch: dict[str, Tensor]) -> Tensor:
        """What the relative position encoding reads, per residue: ``[*, N_res, 1]`` (residue_index)."""
        return batch["residue_index"][..., None]

    def relpos(self, positions: Tensor, rows: Optional[Tensor] = None) -> Tensor:
        """Alg. 4: one_hot(clip(r_i - r_j, -k, k) + k) projected to c_z, ``[*, N_i, N_res, c_z]``
        (rows i: ``rows`` positions, default all; positions as :meth:`positions` gives them)."""
        rows = positions if rows is None else rows
        d = rows[..., :, None, 0] - positions[..., None, :, 0]  # [*, N_i, N_res]
        return one_hot_linear(self.pair_activations, torch.clamp(d, -self.relpos_k, self.relpos_k) + self.relpos_k)

    def forward(self, target_feat: Tensor, positions: Tensor, msa_feat: Tensor) -> tuple[Tensor, Tensor]:
        m = run_split(self, "msa", self._msa, msa_feat, target_feat)  # [*, N_seq, N_res, c_m]
        z = run_split(self, "pair", self._pair, target_feat, target_feat, positions, positions)
        return m, z  # z: [*, N_res, N_res, c_z]

    def _msa(self, msa_feat: Tensor, target_feat: Tensor) -> Tensor:
        return self.preprocess_msa(msa_feat) + self.preprocess_1d(target_feat)[..., None, :, :]

    def _pair(self, tf_i: Tensor, tf_j: Tensor, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        z = self.left_single(tf_i)[..., :, None, :] + self.right_single(tf_j)[..., None, :, :]
        return z + self.relpos(pos_j, rows=pos_i)

    def msa(self, target_feat: Tensor, msa_feat: Tensor, out: Tensor) -> Tensor:
        """m written into ``out`` ``[*, N_seq, N_res, c_m]`` in chunks of MSA rows (inference)."""
        tf_m = self.preprocess_1d(target_feat)[..., None, :, :]
        return run_split(self, "msa_rows", lambda f, t: self.preprocess_msa(f) + t, msa_feat, tf_m, out=out)

    def add_pair_(self, z: Tensor, target_feat: Tensor, positions: Tensor) -> Tensor:
        """``z += `` the pair embedding (left_i + right_j + relpos_ij), row chunk by row chunk (inference)."""
        right = self.right_single(target_feat)[..., None, :, :]  # [*, 1, N_res, c_z]

        def rows(tf_i: Tensor, pos_i: Tensor, pos: Tensor, right_: Tensor) -> Tensor:
            return (self.left_single(tf_i)[..., :, None, :] + right_) + self.relpos(pos, rows=pos_i)

        return run_split(self, "pair_add", rows, target_feat, positions, positions, right, out=z, accumulate=True)


class InputEmbedderMultimer(InputEmbedder):
    """The input embedder of AF2-Multimer (Evans et al. 2021, Suppl. 2.2; AF2 ``modules_multimer``
    ``_relative_encoding``): the monomer's embedder with the chain-relative position encoding.

    Relative encoding of residues i, j (``position_activations``, ``2k + 2 + 1 + 2c + 2`` inputs
    for ``relpos_k`` = k, ``max_relative_chain`` = c): one_hot(d, 2k + 2) with d = clip(r_i - r_j + k,
    0, 2k) within a chain (same ``asym_id``) and 2k + 1 across chains; the same-entity bit; and
    one_hot(e, 2c + 2) with e = clip(sym_i - sym_j + c, 0, 2c) within an entity and 2c + 1 across
    entities. Computed by looking up weight columns (no one-hot tensor).

    Positions (:meth:`positions`): ``[*, N_res, 4]`` = residue_index, asym_id, entity_id, sym_id.
    """

    memory_spec = InputEmbedder.memory_spec
    chunk_size: Optional[int] = None

    def __init__(self, tf_dim: int, msa_dim: int, c_m: int, c_z: int, relpos_k: int, max_relative_chain: int):
        self.max_relative_chain = max_relative_chain
        super().__init__(tf_dim, msa_dim, c_m, c_z, relpos_k)

    def _relpos_linear(self, c_z: int) -> None:
        n_in = 2 * self.relpos_k + 2 + 1 + 2 * self.max_relative_chain + 2
        self.position_activations = Linear(n_in, c_z)  # AF2: ~_relative_encoding/position_activations

    @staticmethod
    def positions(batch: dict[str, Tensor]) -> Tensor:
        """``[*, N_res, 4]``: residue_index, asym_id, entity_id, sym_id (int64)."""
        keys = ("residue_index", "asym_id", "entity_id", "sym_id")
        return torch.stack([batch[k].long() for k in keys], dim=-1)

    def relpos(self, positions: Tensor, rows: Optional[Tensor] = None) -> Tensor:
        rows = positions if rows is None else rows
        k, c = self.relpos_k, self.max_relative_chain
        ri, asym, entity, sym = (rows[..., :, None, q] for q in range(4))  # [*, N_i, 1]
        rj, asym_j, entity_j, sym_j = (positions[..., None, :, q] for q in range(4))  # [*, 1, N_res]
        same_chain = asym == asym_j
        same_entity = entity == entity_j  # [*, N_i, N_res]
        offset = torch.where(same_chain, torch.clamp(ri - rj + k, 0, 2 * k), 2 * k + 1)
        chain = torch.where(same_entity, torch.clamp(sym - sym_j + c, 0, 2 * c), 2 * c + 1)
        lin = self.position_activations
        dtype = _compute_dtype(lin, positions.device.type)
        w = lin.weight.t().to(dtype)  # [n_in, c_z]
        n_off = 2 * k + 2
        out = F.embedding(offset, w[:n_off]) + F.embedding(chain, w[n_off + 1 :])
        return out + same_entity.to(dtype)[..., None] * w[n_off] + lin.bias.to(dtype)


class RecyclingEmbedder(nn.Module):
    """Embeds the previous iteration's m[0], z and pseudo-beta positions (Suppl. Alg. 32).

    Forward: m0_prev ``[*, N_res, c_m]``, z_prev ``[*, N_res, N_res, c_z]``, x_prev (pseudo-beta
    positions) ``[*, N_res, 3]`` in Å. Returns the updates for m[0] and z. :meth:`pair_update` is
    the pair part in row chunks (inference: written into a given buffer, which may be z_prev).
    """

    memory_spec = declare(
        splits={
            # z_update[i, j] reads z_prev[i, j] and the positions of i and j
            "pair": Split("pair_row", (Shard(-3), Slice(-2), WHOLE), output=-3),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_m: int, c_z: int, num_bins: int, min_bin: float, max_bin: float):
        super().__init__()
        self.num_bins, self.min_bin, self.max_bin = num_bins, min_bin, max_bin
        self.prev_pos_linear = Linear(num_bins, c_z)
        self.prev_msa_first_row_norm = LayerNorm(c_m)
        self.prev_pair_norm = LayerNorm(c_z)

    def forward(self, m0_prev: Tensor, z_prev: Tensor, x_prev: Tensor) -> tuple[Tensor, Tensor]:
        return self.prev_msa_first_row_norm(m0_prev), self.pair_update(z_prev, x_prev)

    def pair_update(self, z_prev: Tensor, x_prev: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """The update of z ``[*, N_res, N_res, c_z]`` (z_prev may be a broadcastable ``[*, 1, 1, c_z]``
        of zeros); with ``out``, written into it chunk by chunk (``out`` may be ``z_prev``: each chunk
        reads its own rows)."""

        def rows(z_rows: Tensor, x_rows: Tensor, x: Tensor) -> Tensor:
            dgram = dgram_from_positions(x_rows, self.num_bins, self.min_bin, self.max_bin, y=x)
            return self.prev_pos_linear(dgram) + self.prev_pair_norm(z_rows)

        return run_split(self, "pair", rows, z_prev, x_prev, x_prev, out=out)


class ExtraMsaEmbedder(nn.Module):
    """Embeds the extra MSA (Suppl. Alg. 2 line 14): [one_hot(extra_msa, 23), has_deletion,
    deletion_value] (25 channels) -> c_e, by weight lookup (no one-hot tensor), in row chunks.

    Forward: extra_msa ``[*, N_extra, N_res]`` (int, 0-21), extra_has_deletion and
    extra_deletion_value ``[*, N_extra, N_res]``. Returns ``[*, N_extra, N_res, c_e]``.
    """

    memory_spec = declare(
        splits={"columns": Split("msa_column", (Slice(-1), Slice(-1), Slice(-1)), output=Shard(-2, columns=True))}
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_e: int, num_classes: int = 23):
        super().__init__()
        self.num_classes = num_classes
        self.extra_msa_activations = Linear(num_classes + 2, c_e)

    def forward(self, extra_msa: Tensor, extra_has_deletion: Tensor, extra_deletion_value: Tensor) -> Tensor:
        return run_split(self, "columns", self._rows, extra_msa, extra_has_deletion, extra_deletion_value)

    def _rows(self, extra_msa: Tensor, has_deletion: Tensor, deletion_value: Tensor) -> Tensor:
        lin = self.extra_msa_activations
        dtype = _compute_dtype(lin, extra_msa.device.type)
        acc = torch.promote_types(dtype, torch.float32)
        w = lin.weight.to(dtype).to(acc)  # rounded as the autocast matmul rounds them, summed in >= fp32
        n = self.num_classes
        out = F.embedding(extra_msa.long(), w[:, :n].t())  # [*, S, N_res, c_e]
        out.add_(has_deletion.to(dtype).to(acc)[..., None] * w[:, n])
        out.add_(deletion_value.to(dtype).to(acc)[..., None] * w[:, n + 1])
        return out.add_(lin.bias.to(dtype).to(acc)).to(dtype)
