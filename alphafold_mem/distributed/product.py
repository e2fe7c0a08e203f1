"""The triangle multiplication under device sharding, for inference (no autograd), holding the pair
representation's share and one update-sized output, with no whole-size projection.

Shapes: z ``[*, L, N, c_z]`` is distributed by rows (this device holds rows ``[r L, r L + L)``,
zero-padded past N); pair_mask ``[*, N, N]`` is held whole; the update returned has z's shape and
layout. ``C`` is the module's hidden width (``c_hidden_mul``). P devices, ``L = ceil(N / P)``.

The generic path (:func:`alphafold_mem.distributed.pieces.by_pieces` for the declared ``outgoing``
/ ``incoming`` steps) materialises both gated projections a, b ``[*, L, N, C]`` and, for the
incoming edges, b moved to columns ``[*, N, L, C]`` beside the output: five share-sized tensors.
At N_res 30,000 over 8 devices in bf16 one share is 30000 * 3750 * 128 * 2 B = 28.8 GB, which puts
the per-device peak at ~154 GB. Here the projections are computed from z block by block instead:

* outgoing, ``x_ij = sum_k a_ik b_jk``: the rows j of b live with the device holding rows j of z.
  Every device's share of b is computed by its holder in :data:`PRODUCT_BLOCKS` row blocks
  ``[*, C, R, N]`` and broadcast (:func:`~alphafold_mem.distributed.comm.broadcast`); every device
  multiplies it with a of its own rows, recomputed from z in row chunks of ``chunk_size`` (``[*,
  C, I, N]``), and finishes that block of output columns at once (the sum over k is complete). One
  matmul per output entry sums all of k, as on one device.
* incoming, ``x_ij = sum_k a_kj b_ki``: k runs over the rows of z, so each device holds the terms of
  its own k. For chunk ``[c0, c0 + cs)`` of every device's output rows (``P cs`` rows i in all,
  ``cs = ceil(L / (PRODUCT_BLOCKS P))``) each device computes the partial sums over its k,
  ``[P, cs, *, N, C]``, from b of those columns and a in column blocks of ``R / 2`` (recomputed
  per chunk), and a reduce-scatter (:func:`~alphafold_mem.distributed.comm.reduce_scatter`) leaves each
  device the full sums of its ``cs`` rows, which it finishes at once.

Memory per device: z, the update, plus one block ``R = ceil(L / PRODUCT_BLOCKS)`` rows of b
(outgoing) or the ``P cs`` partial rows (incoming), each about a quarter of a share, and chunk-sized
transients. Cost: a (a projection and a gate, ``4 c_z C`` flops per entry) is recomputed once per
block (outgoing) or chunk (incoming), which adds ``2 c_z / R`` (incoming ``2 c_z / (P cs)``) to the
product's flops: about 27 % at N_res 30,000 over 8 devices (R = 938, P cs = 944).
Communication per device and multiplication: outgoing about ``(P - 1) L N C`` elements received
(as the generic path; blocks of padding rows only are not sent), incoming ``(P - 1) L N C`` (the
reduce-scatter of every chunk); :func:`alphafold_mem.planner.dap.product_comm_elements`.

Summation order: outgoing sums k in one matmul; incoming adds P partial sums (one per device, in
the representation's dtype, e.g. bf16 under ``bf16-full``), so results equal one device's up to
rounding (``tests/test_dap_product.py``, fp32).

Source: the k-blocked ("reduce over the summed index") product is the usual way to distribute a
matrix product whose contraction index is the distributed one (e.g. Megatron-LM's row-parallel
linear layer, Shoeybi et al. 2019); the broadcast of row blocks is the SUMMA-style one.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from ..memory.chunking import estimating
from . import comm
from .pieces import block
from .shard import ROWS, Sharding

#: a device's share of the broadcast operand (outgoing) is sent in this many row blocks, and the
#: incoming partial sums of one step cover this fraction of a share, so the largest transient is
#: about 1 / PRODUCT_BLOCKS of a share of z
PRODUCT_BLOCKS = 4


def _cut(r: range) -> range:
    """The estimator's loop cut: the first two iterations (:func:`~alphafold_mem.memory.chunking.estimating`)."""
    return r[:2] if estimating() else r


def applies(sh: Sharding, z: Tensor) -> bool:
    """Whether :func:`triangle_multiplication` can run: no autograd and z distributed by rows."""
    return not torch.is_grad_enabled() and sh.layout(z, -2, -3) == ROWS


def _local_mask(sh: Sharding, pair_mask: Tensor) -> Tensor:
    """This device's rows of the whole mask ``[*, N, N]`` -> ``[*, L, N]`` (zero-padded)."""
    return pair_mask if pair_mask.shape[-2] == 1 else sh.take(pair_mask, -2)


def triangle_multiplication(sh: Sharding, module: nn.Module, z: Tensor, pair_mask: Tensor) -> Tensor:
    """The update of ``module`` (a :class:`~alphafold_mem.model.triangle.TriangleMultiplication`) on
    this device's rows: z ``[*, L, N, c_z]`` by rows, pair_mask ``[*, N, N]`` whole; returns
    ``[*, L, N, c_z]`` by rows (module docstring). Inference only (call :func:`applies` first)."""
    mask = _local_mask(sh, pair_mask)
    if module.outgoing:
        return _outgoing(sh, module, z, mask)
    return _incoming(sh, module, z, mask)


def _outgoing(sh: Sharding, module: nn.Module, z: Tensor, mask: Tensor) -> Tensor:
    n, length = sh.n_res, sh.local_res
    rows = max(1, math.ceil(length / PRODUCT_BLOCKS))
    ichunk = min(module.chunk_size or length, length)
    c = module.right_projection.weight.shape[0]
    norm = module.layer_norm_input
    out: Optional[Tensor] = None
    blocks = [(q, s0) for q in range(sh.size) for s0 in range(0, length, rows)]
    if estimating():  # a block of this device's share and one of another's
        blocks = [(0, 0), (1, 0)]
    for q, s0 in blocks:
        size = min(rows, length - s0)
        j0 = q * length + s0
        valid = max(0, min(size, n - j0))
        if not valid:  # the same blocks are empty on every device
            continue
        if q == sh.rank:  # b of these rows, channel-first [*, C, R, N]
            b = module._right(norm(z.narrow(-3, s0, size)), mask.narrow(-2, s0, size) if mask.shape[-2] != 1 else mask)
            b = b.movedim(-1, -3).contiguous()
        else:  # only the shape is read: a storage-free stand-in
            b = z.new_empty(()).expand(*z.shape[:-3], c, size, n)
        b = comm.broadcast(b, q, sh.group).narrow(-2, 0, valid)
        for i0 in _cut(range(0, length, ichunk)):
            isz = min(ichunk, length - i0)
            zn = norm(z.narrow(-3, i0, isz))  # [*, I, N, c_z]
            mi = mask.narrow(-2, i0, isz) if mask.shape[-2] != 1 else mask
            a = (
                module._left(zn, mi).movedim(-1, -3).contiguous()
            )  # [*, C, I, N (k)]: contiguous, see TriangleMultiplication._left_and_gate
            x = torch.matmul(a, b.transpose(-1, -2))  # [*, C, I, J]
            del a
            upd = module._finish(x.movedim(-3, -1), zn.narrow(-2, j0, valid))  # [*, I, J, c_z]
            del x, zn
            if out is None:
                out = upd.new_empty(z.shape[:-1] + upd.shape[-1:])
            out.narrow(-3, i0, isz).narrow(-2, j0, valid).copy_(upd)
            del upd
        del b
    return out


def _incoming(sh: Sharding, module: nn.Module, z: Tensor, mask: Tensor) -> Tensor:
    p, n, length = sh.size, sh.n_res, sh.local_res
    rows = max(1, math.ceil(length / (2 * PRODUCT_BLOCKS)))  # columns of a per block: [*, L, R/2, c_z] (fp32 norm)
    cs_max = max(1, math.ceil(length / (PRODUCT_BLOCKS * p)))
    norm = module.layer_norm_input
    batch = z.shape[:-3]
    nb = len(batch)
    c = module.right_projection.weight.shape[0]
    out: Optional[Tensor] = None
    for c0 in _cut(range(0, length, cs_max)):
        cs = min(cs_max, length - c0)
        # b[k, i] for my k (rows) and the chunk's columns i of every device: [*, L, P cs, c_z] -> [*, C, P cs, L]
        zc = torch.cat([block(z, -2, q * length + c0, cs) for q in range(p)], dim=-2)
        mc = (
            torch.cat([block(mask, -1, q * length + c0, cs) for q in range(p)], dim=-1) if mask.shape[-1] != 1 else mask
        )
        b = module._right(norm(zc), mc).movedim(-1, -3).transpose(-1, -2)
        del zc, mc
        partial = None
        for j0 in _cut(range(0, n, rows)):
            jsz = min(rows, n - j0)
            mj = mask.narrow(-1, j0, jsz) if mask.shape[-1] != 1 else mask
            a = (
                module._left(norm(z.narrow(-2, j0, jsz)), mj).movedim(-1, -3).contiguous()
            )  # [*, C, L (k), J] (as above)
            part = torch.matmul(b, a)  # [*, C, P cs, J]: the sums over my k
            del a
            if partial is None:  # [P, cs, *, N, C]: device q's rows first, as the reduce-scatter splits them
                partial = part.new_empty((p, cs) + batch + (n, c))
            dims = (nb + 1, nb + 2) + tuple(range(nb)) + (nb + 3, nb)
            partial.narrow(-2, j0, jsz).copy_(part.unflatten(-2, (p, cs)).permute(*dims))
            del part
        del b
        x = comm.reduce_scatter(partial, 0, sh.group)[0]  # [cs, *, N, C]: my rows, summed over every k
        del partial
        x = x.movedim(0, -3)  # [*, cs, N, C]
        upd = module._finish(x, norm(z.narrow(-3, c0, cs)))  # [*, cs, N, c_z]
        del x
        if out is None:
            out = upd.new_empty(z.shape[:-1] + upd.shape[-1:])
        out.narrow(-3, c0, cs).copy_(upd)
        del upd
    return out


__all__ = ["PRODUCT_BLOCKS", "applies", "triangle_multiplication"]
