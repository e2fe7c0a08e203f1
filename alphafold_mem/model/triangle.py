"""Triangular updates of the pair representation (Jumper et al. 2021, Suppl. Alg. 11-14).

``chunk_size`` (bound by the memory policy) chunks the pair rows i: the projections and the output
of the multiplicative update, and the queries of triangle attention (whose ``[*, N_res, H, N_res,
N_res]`` logits are the largest pair transient). The bias terms shared by all rows are computed
first, themselves in row chunks. The ending-node attention works on the transposed pair
representation, so its rows are the pair columns of z; each class declares its steps, axes and
whole operands in ``memory_spec``.

Each class also has ``add_to_(target, z, pair_mask)``: ``target += update`` in place, chunk by chunk,
for inference (no autograd); see :meth:`TriangleMultiplication.add_to_` for the one pair-sized
buffer the multiplicative update needs.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterable, Optional

import torch
import torch.nn as nn
from torch import Tensor

from alphafold_mem import kernels

from ..memory.axes import WHOLE, Replicate, Shard, Slice, Split, declare, run_split
from ..memory.chunking import estimating
from ..memory.offload import host_bytes, offload_active, stream, to_host
from ..precision import autocast_dtype, fp32_region
from .primitives import Attention, LayerNorm, Linear, mask_bias


def _normalise_once(
    norm: LayerNorm, z: Tensor, chunk_size: Optional[int], per_slice: bool = False
) -> tuple[Callable[[Tensor], Tensor], Tensor]:
    """``(f, x)`` with ``f(x[rows]) == norm(z)[rows]``: unchunked, z is normalised once (``f`` is the
    identity, as in the reference); chunked (or ``per_slice``, as the in-place paths do), each slice
    normalises its own rows so no normalised copy of the whole pair representation is kept."""
    if not per_slice and (chunk_size is None or chunk_size >= z.shape[-3]):
        return (lambda x: x), norm(z)
    return norm, z


def _blockwise_matmul(a: Tensor, blocks: Iterable[Tensor]) -> Tensor:
    """``a @ cat(blocks, -2)`` with the summed index k in blocks (``a`` ``[*, C, J, k]``, blocks
    ``[*, C, k_block, N]``), rounded once as the one matmul is: each block's product is taken in
    fp32 from the operands rounded to the matmul dtype (autocast's, else a's) and the partial sums
    stay in a chunk-sized fp32 accumulator (>= fp32 for fp64), cast to the matmul dtype at the end.
    Summing bf16 partial products instead rounds once per block (offload="buffers" under bf16)."""
    device_type = a.device.type
    dtype = autocast_dtype(a) or a.dtype
    acc = torch.promote_types(dtype, torch.float32)
    x, start = None, 0
    with fp32_region(device_type):
        for block in blocks:
            n = block.shape[-2]
            part = torch.matmul(a.narrow(-1, start, n).to(dtype).to(acc), block.to(dtype).to(acc))
            x = part if x is None else x.add_(part)
            start += n
            del part  # not alive beside the next block's product (the estimator's cut computes two blocks)
    return x.to(dtype)


#: the fewest output rows (columns) per block of the in-place multiplicative update's batched product
#: (:meth:`TriangleMultiplication.add_to_`)
MATMUL_ROWS = 16

#: pointwise steps (of z, or of z and its mask) are also independent along the columns
_POINTWISE_COLUMNS = Split("column", (Shard(-2, columns=True),), output=Shard(-2, columns=True))
_POINTWISE_COLUMNS_MASKED = Split("column", (Shard(-2, columns=True), Slice(-1)), output=Shard(-2, columns=True))
#: attention rows are also independent along their query columns, given the whole rows and the bias rows
_QUERY_COLUMNS = Split("column", (Shard(-2, columns=True), WHOLE, WHOLE, Shard(-3)), output=Shard(-2, columns=True))


class TriangleMultiplication(nn.Module):
    """Triangular multiplicative update, "outgoing" (Alg. 11) or "incoming" (Alg. 12) edges.

    Outgoing: ``x_ij = sum_k a_ik * b_jk``; incoming: ``x_ij = sum_k a_kj * b_ki`` with AF2's
    left (a) / right (b) projection names, so AF2 parameters load without any swap.

    Forward: z ``[*, N_res, N_res, c_z]``, pair_mask ``[*, N_res, N_res]``. Returns the update,
    computed by :func:`alphafold_mem.kernels.triangle_multiplication` with ``impl=kernel_impl`` (memory
    policy ``kernels``) on this module's parameters: the reference's steps run as this class declares
    them (``project``, then ``outgoing`` / ``incoming``, in ``chunk_size`` rows or device shards);
    ``"triton"`` runs the fused kernel (no projection materialised, ``chunk_size`` unused).
    """

    memory_spec = declare(
        splits={
            "project": Split("pair_row", (Shard(-3), Slice(-2)), output=-3, also=_POINTWISE_COLUMNS_MASKED),
            # outgoing: output rows i read a[i, :] and the whole of b; output columns j read b[j, :]
            # and the whole of a (and z at the output positions, for the gate)
            "outgoing": Split(
                "pair_row",
                (Shard(-3), Replicate(rows=-3), Shard(-3)),
                output=-3,
                also=Split("pair_column", (WHOLE, Shard(-3), Shard(-2, columns=True)), output=Shard(-2, columns=True)),
            ),
            # incoming: output rows i read the whole of a and the columns b[:, i]; output columns j
            # read a[:, j] and the whole of b
            "incoming": Split(
                "pair_row",
                (Replicate(rows=-3), Shard(-2, columns=True), Shard(-3)),
                output=-3,
                also=Split(
                    "pair_column",
                    (Shard(-2, columns=True), WHOLE, Shard(-2, columns=True)),
                    output=Shard(-2, columns=True),
                ),
            ),
            # in place (add_to_): b alone, channel-first [*, C, N_res, N_res]; incoming: z's rows are its dim -2,
            # outgoing (summed index first, [*, C, k, j]): z's rows are its dim -1
            "project_right": Split("pair_row", (Shard(-3), Slice(-2)), output=-2),
            "project_right_columns": Split("pair_row", (Shard(-3), Slice(-2)), output=-1),
            # outgoing in place: output rows i read z rows i (for a and the gate) and the whole of b
            "outgoing_inplace": Split("pair_row", (Shard(-3), WHOLE, Slice(-2)), output=-3),
            # incoming in place: output columns j read z columns j (for a and the gate) and the whole of b
            "incoming_inplace": Split(
                "pair_column", (Shard(-2, columns=True), WHOLE, Slice(-1)), output=Shard(-2, columns=True)
            ),
        },
        seams=["kernel", "offload"],
    )
    chunk_size: Optional[int] = None
    offload: str = "none"
    kernel_impl: str = "reference"
    #: offload levels this module runs alike (it reads only ``offload == "buffers"``), for the
    #: planner's replayed calls (:mod:`alphafold_mem.planner.replay`)
    memory_equivalent = {"offload": ("none", "idle")}

    def __init__(self, c_z: int, c_hidden: int, outgoing: bool):
        super().__init__()
        self.outgoing = outgoing
        self.layer_norm_input = LayerNorm(c_z)
        self.left_projection = Linear(c_z, c_hidden)
        self.right_projection = Linear(c_z, c_hidden)
        self.left_gate = Linear(c_z, c_hidden, init="gating")
        self.right_gate = Linear(c_z, c_hidden, init="gating")
        self.center_layer_norm = LayerNorm(c_hidden)
        self.output_projection = Linear(c_hidden, c_z, init="final")
        self.gating_linear = Linear(c_z, c_z, init="gating")

    def forward(self, z: Tensor, pair_mask: Tensor) -> Tensor:
        dap = getattr(self, "dap", None)
        if dap is not None:  # device sharding in inference: no whole-size projection (distributed/product.py)
            update = dap.triangle_multiplication(self, z, pair_mask)
            if update is not None:
                return update
        return kernels.triangle_multiplication(
            z,
            pair_mask,
            self.weights(),
            self.outgoing,
            self.layer_norm_input.eps,
            self.kernel_impl,
            run_step=partial(run_split, self),
            normalise_per_part=self.chunk_size is not None and self.chunk_size < z.shape[-3],
        )

    def weights(self) -> kernels.TriangleMultiplicationWeights:
        """This module's 16 parameters, as the kernels take them."""
        return kernels.TriangleMultiplicationWeights.from_module(self)

    def _left(self, zn: Tensor, pair_mask: Tensor) -> Tensor:
        """a from normalised z rows ``[*, I, J, c_z]`` (:func:`alphafold_mem.kernels.triangle_projection`)."""
        return kernels.triangle_projection(zn, pair_mask, self.weights(), "left")

    def _right(self, zn: Tensor, pair_mask: Tensor) -> Tensor:
        """b from normalised z rows ``[*, I, J, c_z]``."""
        return kernels.triangle_projection(zn, pair_mask, self.weights(), "right")

    def _finish(self, x: Tensor, zn: Tensor) -> Tensor:
        """The update at the product's positions x ``[*, I, J, c]`` and the normalised z there
        (:func:`alphafold_mem.kernels.triangle_output`)."""
        return kernels.triangle_output(x, zn, self.weights(), self.center_layer_norm.eps)

    # -- in place (inference) --------------------------------------------------------------------------
    def add_to_(self, target: Tensor, z: Tensor, pair_mask: Tensor) -> Tensor:
        """``target += self(z, pair_mask)`` in place, block by block, for inference (``target`` may be z).

        Outgoing, output row i depends on every row of z through b (incoming: output column j on
        every row of z), so b is computed first, in row chunks, channel-first with the summed index
        k before the output index (outgoing ``[*, C, k, j]``, incoming ``[*, C, k, i]``: every
        block's product is then one batched matmul reading b as it lies). Then each block of output
        rows (incoming: columns) computes its own a and gate from its z rows (columns), takes the
        product and is added at once. That buffer is the only pair-sized tensor besides z; with
        ``offload="buffers"`` on an accelerator it is kept in host memory in blocks and streamed
        back for every block.

        Blocks are ``chunk_size`` rows, but at least :data:`MATMUL_ROWS`: the product reads all of b
        for every block, so with a few rows per block it is bound by memory traffic
        (``scripts/bench_triangle_blocks.py`` prints time and peak against the rows per block).
        Inside a block, a, the gate and the output are computed ``chunk_size`` rows at a time, so a
        block holds a, the product and the gated output (3 x rows x N_res x c) beyond the chunk's
        own transients. Under ``kernels="triton"`` (and under device sharding, whose forward
        computes it block by block) the update is added whole. Returns ``target``.
        """
        if self.kernel_impl != "reference" or getattr(self, "dap", None) is not None:
            # the fused kernel materialises no projection; under device sharding the update is computed
            # block by block (forward, distributed/product.py); either way the update is added
            return target.add_(self(z, pair_mask))
        streamed = self.offload == "buffers" and offload_active(z.device)
        outgoing = self.outgoing
        lead = tuple(range(z.dim() - 3))

        def right(zc: Tensor, mc: Tensor) -> Tensor:  # outgoing [*, C, N_res (k), J]; incoming [*, C, K, N_res (i)]
            b = self._right(self.layer_norm_input(zc), mc)  # [*, rows, N_res, C]
            b = b.permute(*lead, -1, -2, -3) if outgoing else b.movedim(-1, -3)
            return to_host(b.contiguous()) if streamed else b

        blocks_dim = -1 if outgoing else -2  # b's dim along z's rows
        b = run_split(
            self, "project_right_columns" if outgoing else "project_right", right, z, pair_mask, collect=streamed
        )  # tensor, or host blocks
        if streamed and estimating():  # the estimator's loop cut computed two blocks: the rest, as host bytes
            rest = (
                (z.shape[-3] - sum(block.shape[blocks_dim] for block in b)) * b[-1].numel() // b[-1].shape[blocks_dim]
            )
            host_bytes(rest * b[-1].element_size())
        step, rows = (
            ("outgoing_inplace", self._outgoing_rows) if outgoing else ("incoming_inplace", self._incoming_columns)
        )
        run_split(self, step, rows, z, b, pair_mask, out=target, accumulate=True, min_rows=MATMUL_ROWS)
        if streamed and estimating():
            host_bytes(-rest * b[-1].element_size())
        return target

    def _left_and_gate(self, z: Tensor, pair_mask: Tensor, columns: bool) -> tuple[Tensor, Tensor]:
        """For a block of z rows ``[*, I, N_res, c_z]`` (``columns``: z columns ``[*, N_res, J, c_z]``),
        ``chunk_size`` rows (columns) at a time: a, channel-first and contiguous with the block's
        index before the summed one (``[*, C, I, k]``; columns ``[*, C, J, k]``), and the output
        gate ``sigmoid(gating_linear(norm(z)))`` (z's shape). Contiguous, because the batched
        product then reads every channel's matrix as it lies (a strided view would be copied once
        per channel inside it)."""
        dim = -2 if columns else -3
        n = z.shape[dim]
        step = min(self.chunk_size or n, n)
        a = gate = None
        for start in range(0, n, step):
            size = min(step, n - start)
            zn = self.layer_norm_input(z.narrow(dim, start, size))
            left = self._left(zn, pair_mask.narrow(dim + 1, start, size))  # [*, rows, cols, C]
            left = left.permute(*range(left.dim() - 3), -1, -2, -3) if columns else left.movedim(-1, -3)
            g = self.gating_linear(zn).sigmoid_()  # inference only (add_to_): the fresh projection, in place
            if step == n:  # one chunk: nothing to assemble
                return left.contiguous(), g
            if a is None:
                a = left.new_empty(left.shape[:-2] + (n, left.shape[-1]))
                gate = g.new_empty(z.shape[:-1] + g.shape[-1:])
            a.narrow(-2, start, size).copy_(left)
            gate.narrow(dim, start, size).copy_(g)
            del zn, left, g
        return a, gate

    def _gate_output_(self, gate: Tensor, x: Tensor, columns: bool) -> Tensor:
        """``gate * output_projection(center_layer_norm(x))`` into ``gate``, ``chunk_size`` rows of the
        block at a time; x ``[*, C, I, N_res]`` (columns: ``[*, C, J, N_res (i)]``). With the gate's
        sigmoid taken in :meth:`_left_and_gate`, this is :func:`alphafold_mem.kernels.triangle_output`
        split around the product, so that the block's gate holds its output."""
        dim = -2 if columns else -3
        n = gate.shape[dim]
        step = min(self.chunk_size or n, n)
        for start in range(0, n, step):
            size = min(step, n - start)
            xs = x.narrow(-2, start, size)
            xs = xs.permute(*range(xs.dim() - 3), -1, -2, -3) if columns else xs.movedim(-3, -1)
            gate.narrow(dim, start, size).mul_(self.output_projection(self.center_layer_norm(xs)))
        return gate

    def _outgoing_rows(self, z: Tensor, b, pair_mask: Tensor) -> Tensor:
        """Update rows from z rows ``[*, I, N_res, c_z]``; b ``[*, C, N_res (k), N_res (j)]`` or its host "
        "blocks of j."""
        a, gate = self._left_and_gate(z, pair_mask, columns=False)  # [*, C, I, k], [*, I, N_res, c_z]
        if isinstance(b, Tensor):
            x = torch.matmul(a, b)  # [*, C, I, j]
        else:  # b's blocks are blocks of output columns j
            x = a.new_empty(a.shape[:-1] + (z.shape[-2],))
            start = 0
            for block in stream(b[:2] if estimating() else b, z.device):
                x.narrow(-1, start, block.shape[-1]).copy_(torch.matmul(a, block))
                start += block.shape[-1]
        del a
        return self._gate_output_(gate, x, columns=False)

    def _incoming_columns(self, z: Tensor, b, pair_mask: Tensor) -> Tensor:
        """Update columns from z columns ``[*, N_res, J, c_z]``; b ``[*, C, N_res (k), N_res (i)]`` or its host "
        "row blocks."""
        a, gate = self._left_and_gate(z, pair_mask, columns=True)  # [*, C, J, k], [*, N_res, J, c_z]
        if isinstance(b, Tensor):
            x = torch.matmul(a, b)  # [*, C, J, i]
        else:  # b's row blocks are blocks of the summed index k
            x = _blockwise_matmul(a, stream(b[:2] if estimating() else b, z.device))
        del a
        return self._gate_output_(gate, x, columns=True)


class TriangleAttention(nn.Module):
    """Triangle self-attention around the starting (Alg. 13) or ending (Alg. 14) node.

    Starting node: for each row i, ``z_ij`` attends over ``z_ik`` with bias ``b_jk``. The ending
    node is the same computation on the transposed pair representation.

    Forward: z ``[*, N_res, N_res, c_z]``, pair_mask ``[*, N_res, N_res]``. Returns the update.
    """

    # dims of the oriented input: z for the starting node, z^T (rows = pair columns of z) for the
    # ending node. Rows read their own rows (queries and keys), their mask rows and the whole bias
    # [*, N_res (q), N_res (k), H]; query columns q read the whole rows as keys and the bias rows q.
    memory_spec = declare(
        splits={
            "starting_bias": Split("pair_row", (Shard(-3),), output=-3, also=_POINTWISE_COLUMNS),
            "starting_rows": Split(
                "pair_row", (Shard(-3), Shard(-3), Slice(-2), Replicate(rows=-3)), output=-3, also=_QUERY_COLUMNS
            ),
            "ending_bias": Split("pair_column", (Shard(-3),), output=-3, also=_POINTWISE_COLUMNS),
            "ending_rows": Split(
                "pair_column", (Shard(-3), Shard(-3), Slice(-2), Replicate(rows=-3)), output=-3, also=_QUERY_COLUMNS
            ),
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c_z: int, c_hidden: int, num_heads: int, starting: bool, inf: float = 1e9):
        super().__init__()
        self.starting, self.inf = starting, inf
        self.query_norm = LayerNorm(c_z)
        self.feat_2d_weights = Linear(c_z, num_heads, bias=False, init="default")
        self.attention = Attention(c_z, c_z, c_hidden, num_heads)

    def forward(self, z: Tensor, pair_mask: Tensor) -> Tensor:
        return self._run(z, pair_mask, None)

    def add_to_(self, target: Tensor, z: Tensor, pair_mask: Tensor) -> Tensor:
        """``target += self(z, pair_mask)`` in place, chunk by chunk (inference; ``target`` may be z:
        each chunk of rows, or of columns for the ending node, reads only its own rows of z besides
        the triangle bias, which is computed first). Returns ``target``."""
        self._run(z, pair_mask, target)
        return target

    def _run(self, z: Tensor, pair_mask: Tensor, target: Optional[Tensor]) -> Tensor:
        if not self.starting:
            z, pair_mask = z.transpose(-2, -3), pair_mask.transpose(-1, -2)
            target = None if target is None else target.transpose(-2, -3)
        node = "starting" if self.starting else "ending"
        norm, z = _normalise_once(self.query_norm, z, self.chunk_size, per_slice=target is not None)
        tri_bias = run_split(self, f"{node}_bias", lambda zc: self.feat_2d_weights(norm(zc)), z)  # [*, N_res, N_res, H]

        def rows(zq: Tensor, zkv: Tensor, mask_c: Tensor, bias: Tensor) -> Tensor:
            # queries [*, I, Q, c_z], keys [*, I, N_res, c_z], key mask [*, I, N_res], bias rows [*, Q, N_res, H]
            q = norm(zq)
            kv = q if zkv is zq else norm(zkv)
            key_bias = mask_bias(mask_c, self.inf)[..., :, None, None, :]  # [*, I, 1, 1, N_res]
            return self.attention(q, kv, [key_bias, bias.movedim(-1, -3).unsqueeze(-4)])

        if target is not None:
            return run_split(self, f"{node}_rows", rows, z, z, pair_mask, tri_bias, out=target, accumulate=True)
        out = run_split(self, f"{node}_rows", rows, z, z, pair_mask, tri_bias)
        return out if self.starting else out.transpose(-2, -3)
