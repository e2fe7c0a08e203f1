"""Where the pieces of a representation live under dynamic axial parallelism, and how they move.

Layout rules (what :class:`Sharding` assumes and keeps):

* Representations ``[*, rows, cols, (channels)]`` are distributed along their **residue** axis: the
  MSA-like ones (m, the extra MSA, their projections) by columns, the pair-like ones (z, the
  template pair representation, projections and biases of them) by rows. Inside one step an
  operand may be moved to its other axis (an all-to-all) and the result is moved back.
* A distributed axis of true length n is padded to ``P * ceil(n / P)``: every device holds
  ``L = ceil(n / P)`` entries, rank r the range ``[r L, r L + L)``, the padding (zeros) at the end.
  The undistributed axis keeps its true length.
* Inputs (features, masks, per-residue tensors such as the single representation) are held whole,
  unpadded, by every device; a step takes its device's range of them (:meth:`Sharding.take`).
* The layout of a representation operand is read from its shape (:meth:`Sharding.layout`): its
  residue columns have length L exactly when they are distributed, as 2 <= L < N_res when
  N_res > P (required).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from . import comm
from .comm import Group, pad_to

#: layouts of a representation operand
ROWS, COLS, WHOLE, ONE = "rows", "cols", "whole", "one"


class Sharding:
    """The device-sharding state of one model: the group of devices sharing one protein (P of them)
    and the residue count N of the current input (set per forward; :meth:`residues`).

    Raises (from :meth:`set_residues`):
        ValueError: no more residues than devices (every device must hold at least 2 residues, so
            that a distributed axis cannot be mistaken for a broadcast one).
    """

    def __init__(self, group: Group):
        self.group = group
        self.n_res: Optional[int] = None

    @property
    def size(self) -> int:
        return self.group.size

    @property
    def rank(self) -> int:
        return self.group.rank

    def set_residues(self, n_res: int) -> None:
        if n_res <= self.size:
            raise ValueError(f"device sharding over {self.size} devices needs more residues than devices, got {n_res}")
        self.n_res = n_res

    def local(self, n: int) -> int:
        """Entries per device of a distributed axis of true length n: ``ceil(n / P)``."""
        return math.ceil(n / self.size)

    @property
    def local_res(self) -> int:
        if self.n_res is None:
            raise RuntimeError(
                "the residue count is not set: run the sharded model through its forward, or "
                "call Sharding.set_residues(n) for a single module"
            )
        return self.local(self.n_res)

    def span(self, n: int, rank: Optional[int] = None) -> tuple[int, int]:
        """``(start, valid)``: the true entries of an axis of length n on ``rank`` (default: this rank)."""
        size = self.local(n)
        start = (self.rank if rank is None else rank) * size
        return start, max(0, min(size, n - start))

    # -- layouts ---------------------------------------------------------------------------------
    def layout(self, x: Tensor, cols: int, rows: Optional[int] = None) -> str:
        """The layout of a representation operand whose residue columns are dim ``cols`` (and rows dim
        ``rows``, if it has rows): ``"cols"``, ``"rows"``, ``"whole"`` or ``"one"`` (size 1: a
        broadcast)."""
        local = self.local_res  # >= 2, as N_res > P
        c = x.shape[cols]
        r = x.shape[rows] if rows is not None else None
        if c == 1 and r in (None, 1):
            return ONE
        if c == local:
            return COLS
        if r == local:
            return ROWS
        return WHOLE

    # -- local pieces of whole tensors -----------------------------------------------------------
    def take(self, x: Tensor, dim: int) -> Tensor:
        """This device's range of ``x`` along ``dim`` (a whole, unpadded axis), zero-padded to L."""
        n = x.shape[dim]
        start, valid = self.span(n)
        size = self.local(n)
        if valid == size:
            return x.narrow(dim, start, size)
        piece = x.narrow(dim, min(start, n), valid)
        return pad_to(piece, dim, size)

    # -- moving representations ------------------------------------------------------------------
    def to_rows(self, x: Tensor, rows: int, cols: int) -> Tensor:
        """Distributed by columns ``[.., R, L_N, ..]`` -> by rows ``[.., ceil(R/P), N, ..]`` (all-to-all)."""
        return comm.all_to_all(x, rows, cols, self.group, cat_size=self.n_res)

    def to_cols(self, x: Tensor, rows: int, cols: int, n_rows: int) -> Tensor:
        """Distributed by rows ``[.., ceil(n_rows/P), N, ..]`` -> by columns ``[.., n_rows, L_N, ..]``."""
        return comm.all_to_all(x, cols, rows, self.group, cat_size=n_rows)

    def gather(self, x: Tensor, dim: int, n: Optional[int] = None) -> Tensor:
        """The whole of ``x`` along its distributed dim ``dim`` (true length n, default N_res)."""
        y = comm.all_gather(x, dim, self.group)
        return y.narrow(dim, 0, self.n_res if n is None else n)

    def gather_representation(self, x: Tensor, rows: int) -> Tensor:
        """The whole of a representation (rows dim ``rows``, residue columns after it) in any layout."""
        lay = self.layout(x, rows + 1, rows)
        if lay == COLS:
            return self.gather(x, rows + 1)
        if lay == ROWS:
            return self.gather(x, rows)
        return x

    # -- randomness --------------------------------------------------------------------------------
    def dropout_mask(self, x: Tensor, shape: list[int], keep_prob: float) -> Tensor:
        """The keep-mask (``shape``: x's shape with the shared dim 1) of a shared dropout on the
        representation update x ``[*, rows, cols, C]``: drawn at the global (unpadded) shape with the
        torch generator, which every device of the group holds in the same state, then this device's
        range taken -- so it equals the mask a single device draws."""
        lay = self.layout(x, -2, -3)
        dim = {COLS: -2, ROWS: -3}.get(lay)
        distributed = dim is not None and shape[dim] != 1
        global_shape = list(shape)
        if distributed:
            global_shape[dim] = self.n_res
        keep = torch.bernoulli(x.new_full(global_shape, keep_prob))
        return self.take(keep, dim) if distributed else keep

    def sync_random_state(self) -> None:
        """Give every device of the group device rank 0's torch generator states (CPU, and CUDA when
        in use), so that dropout masks drawn at the global shape agree. (Not counted in
        :data:`~alphafold_mem.distributed.comm.COUNTER`: a few kB per forward.)"""
        group = self.group
        if group.size == 1 or group.simulated:
            return
        nccl = dist.get_backend(group.pg) == "nccl"
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        for get, set_ in ((torch.get_rng_state, torch.set_rng_state),) + (
            ((torch.cuda.get_rng_state, torch.cuda.set_rng_state),) if cuda else ()
        ):
            state = get().clone()
            buf = state.cuda() if nccl else state
            group.wait(dist.broadcast(buf, group.global_ranks[0], group=group.pg, async_op=True))
            set_(buf.cpu())


__all__ = ["COLS", "ONE", "ROWS", "Sharding", "WHOLE"]
