"""The collectives of device sharding, each an :class:`torch.autograd.Function` whose backward is
the adjoint of its forward, so that gradients through sharded computations are exact:

=========================  ====================================  ==================================
function                   forward                               backward (adjoint)
=========================  ====================================  ==================================
:func:`all_to_all`         split dim a into P pieces, piece q    the reverse all-to-all (b -> a):
                           to rank q; concatenate what arrives   rows -> columns <-> columns -> rows
                           along dim b
:func:`all_gather`         concatenate every rank's shard        reduce-scatter (sum) along the dim
:func:`reduce_scatter`     sum over ranks, keep this rank's      all-gather
                           piece
:func:`broadcast`          rank ``src``'s tensor on every rank   reduce (sum) to ``src``
=========================  ====================================  ==================================

Every call runs on :class:`Group` (a process group with its timeout): it waits for the collective
with that timeout, so a rank whose peers died raises instead of hanging. Every call adds the bytes
this rank receives (logical volume: what arrives from other ranks, not what it already holds) to
:data:`COUNTER`, by operation and phase (forward; recompute: a forward collective re-run by
activation checkpointing during the backward pass; backward: an adjoint), which ``scripts/bench_dap.py`` reads
per block.

Sources: the all-to-all / gather pairs of FastFold's dynamic axial parallelism (Cheng et al. 2022,
"FastFold: Reducing AlphaFold Training Time from 11 Days to 67 Hours"); Megatron-LM's conjugate
collectives (Shoeybi et al. 2019).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import defaultdict
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from ..memory.chunking import estimating


@dataclasses.dataclass(frozen=True)
class Group:
    """A process group of device sharding: ``pg``, this process's ``rank`` in it, its ``size`` P, the
    ``global_ranks`` of its members and the ``timeout`` of every collective.

    ``simulated`` (``pg`` None): one rank of a group of P that does not exist -- every collective
    allocates and counts exactly what it would, and communicates nothing (its received values are
    uninitialised). The memory planner runs the model so under FakeTensorMode
    (:func:`simulated_group`).
    """

    pg: Any
    rank: int
    size: int
    global_ranks: tuple[int, ...]
    timeout: datetime.timedelta = datetime.timedelta(seconds=300)
    simulated: bool = False

    def wait(self, work: Any) -> None:
        """Wait for an async collective, at most ``timeout`` (raises on timeout or a failed peer)."""
        work.wait(self.timeout)


def simulated_group(size: int, rank: int = 0) -> Group:
    """Rank ``rank`` of a simulated group of ``size`` (see :class:`Group`)."""
    return Group(pg=None, rank=rank, size=size, global_ranks=tuple(range(size)), simulated=True)


class CommCounter:
    """Bytes received by this rank, by ``(operation, phase)``; ``phase`` is ``"forward"``,
    ``"recompute"`` or ``"backward"``."""

    def __init__(self) -> None:
        self.bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)

    def reset(self) -> None:
        self.bytes.clear()
        self.calls.clear()

    def add(self, op: str, phase: str, nbytes: int) -> None:
        self.bytes[(op, phase)] += int(nbytes)
        self.calls[(op, phase)] += 1

    def total(self, phase: Optional[str] = None) -> int:
        """Bytes received in ``phase`` (``None``: all phases)."""
        return sum(b for (_, p), b in self.bytes.items() if phase is None or p == phase)


#: The per-process counter every collective of this module adds to.
COUNTER = CommCounter()


def _phase(adjoint: bool = False) -> str:
    """``"backward"`` for an adjoint; for a forward collective ``"recompute"`` when it runs inside the
    backward pass (activation checkpointing), else ``"forward"``."""
    if adjoint:
        return "backward"
    return "recompute" if torch._C._current_graph_task_id() != -1 else "forward"


#: all-to-alls exchange a tensor in this many slices along a dim they do not move (its channels),
#: so that the send and receive buffers hold a fraction of it at a time
EXCHANGE_SLICES = 8


def _all_to_all(
    x: Tensor, split_dim: int, cat_dim: int, cat_size: Optional[int], group: Group, adjoint: bool = False
) -> Tensor:
    """Pad ``split_dim`` to a multiple of P, exchange, and keep the first ``cat_size`` entries of
    ``cat_dim`` (default all); in :data:`EXCHANGE_SLICES` slices along the last dim when it is free."""
    p = group.size
    split_dim, cat_dim = split_dim % x.dim(), cat_dim % x.dim()
    piece = -(-x.shape[split_dim] // p)  # ceil
    total = p * x.shape[cat_dim]
    cat_size = total if cat_size is None else cat_size
    if not total - p < cat_size <= total:  # the padding a piece of ceil(cat_size / P) entries needs
        raise ValueError(f"all_to_all: cannot keep {cat_size} of {p} pieces of {x.shape[cat_dim]} entries")
    shape = list(x.shape)
    shape[split_dim], shape[cat_dim] = piece, cat_size
    out = x.new_empty(shape)
    free = x.dim() - 1
    width = x.shape[free] if free not in (split_dim, cat_dim) else None
    step = width if width is None or width < EXCHANGE_SLICES else -(-width // EXCHANGE_SLICES)
    slices = range(0, width or 1, step or 1)
    cut = estimating()  # the memory estimator: two slices (later ones repeat the second's buffers)
    for c0 in slices[:2] if cut else slices:
        xs = x if width is None else x.narrow(free, c0, min(step, width - c0))
        xs = pad_to(xs, split_dim, p * piece)
        if cut:  # the P send and P receive buffers as one allocation each, and no copies out of them
            _estimated_exchange(xs.chunk(p, dim=split_dim)[0], p, adjoint)
            del xs
            continue
        send = [c.contiguous() for c in xs.chunk(p, dim=split_dim)]
        received = [torch.empty_like(send[0]) for _ in range(p)]
        if not group.simulated:
            group.wait(dist.all_to_all(received, send, group=group.pg, async_op=True))
        del send, xs
        COUNTER.add("all_to_all", _phase(adjoint), (p - 1) * received[0].nbytes)
        target = out if width is None else out.narrow(free, c0, min(step, width - c0))
        length = received[0].shape[cat_dim]
        for q, t in enumerate(received):
            valid = min(length, cat_size - q * length)
            if valid > 0:
                target.narrow(cat_dim, q * length, valid).copy_(t.narrow(cat_dim, 0, valid))
        del received, t  # the loop variable holds the last piece otherwise
    return out


def _estimated_exchange(piece: Tensor, p: int, adjoint: bool) -> None:
    """The memory of one slice of :func:`_all_to_all` for the estimator (fake tensors): the P send
    pieces (copies only when a piece is not contiguous, as ``contiguous()`` makes them) and the P
    received pieces, each set as one allocation of the same bytes, alive together and freed
    together, as in the exchange; the copies into the output allocate nothing and are skipped."""
    shape = (p, *piece.shape)
    send = None if piece.is_contiguous() else piece.new_empty(shape)
    received = piece.new_empty(shape)
    COUNTER.add("all_to_all", _phase(adjoint), (p - 1) * received[0].nbytes)
    del send, received


def exchange(send: list[Tensor], group: Group) -> list[Tensor]:
    """Inference only (no autograd): send ``send[q]`` to rank q and return what every rank sent to
    this one (rank order); the pieces may differ between destinations but have one shape."""
    received = [torch.empty_like(send[0]) for _ in range(group.size)]
    if not group.simulated:
        group.wait(dist.all_to_all(received, [t.contiguous() for t in send], group=group.pg, async_op=True))
    COUNTER.add("all_to_all", _phase(), (group.size - 1) * received[0].nbytes)
    return received


def pad_to(x: Tensor, dim: int, size: int) -> Tensor:
    """``x`` zero-padded at the end of ``dim`` to ``size`` (``x`` itself when it has that size)."""
    have = x.shape[dim]
    if have == size:
        return x
    if have > size:
        raise ValueError(f"pad_to: dim {dim} has {have} > {size} entries")
    shape = list(x.shape)
    shape[dim] = size - have
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _all_gather(x: Tensor, dim: int, group: Group, adjoint: bool = False) -> Tensor:
    x = x.contiguous()
    received = [torch.empty_like(x) for _ in range(group.size)]
    if not group.simulated:
        group.wait(dist.all_gather(received, x, group=group.pg, async_op=True))
    COUNTER.add("all_gather", _phase(adjoint), (group.size - 1) * x.nbytes)
    return torch.cat(received, dim=dim)


def _reduce_scatter(x: Tensor, dim: int, group: Group, adjoint: bool = False) -> Tensor:
    p = group.size
    if x.shape[dim] % p:
        raise ValueError(f"reduce_scatter: dim {dim} of size {x.shape[dim]} does not split into {p}")
    pieces = [c.contiguous() for c in x.chunk(p, dim=dim)]
    out = torch.empty_like(pieces[0])
    if not group.simulated:
        group.wait(dist.reduce_scatter(out, pieces, group=group.pg, async_op=True))
    COUNTER.add("reduce_scatter", _phase(adjoint), (p - 1) * out.nbytes)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, split_dim: int, cat_dim: int, cat_size: Optional[int], group: Group) -> Tensor:
        ctx.split_dim, ctx.cat_dim, ctx.split_size, ctx.group = split_dim, cat_dim, x.shape[split_dim], group
        return _all_to_all(x, split_dim, cat_dim, cat_size, group)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return (
            _all_to_all(grad, ctx.cat_dim, ctx.split_dim, ctx.split_size, ctx.group, adjoint=True),
            None,
            None,
            None,
            None,
        )


def _adjoint_pair(op: Callable, adjoint: Callable) -> type:
    """An autograd function ``op(x, dim, group)`` whose backward is ``adjoint`` (all-gather <->
    reduce-scatter)."""

    class _Collective(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: Tensor, dim: int, group: Group) -> Tensor:
            ctx.dim, ctx.group = dim, group
            return op(x, dim, group)

        @staticmethod
        def backward(ctx, grad: Tensor):
            return adjoint(grad, ctx.dim, ctx.group, adjoint=True), None, None

    return _Collective


_AllGather = _adjoint_pair(_all_gather, _reduce_scatter)
_ReduceScatter = _adjoint_pair(_reduce_scatter, _all_gather)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, src: int, group: Group) -> Tensor:
        ctx.src, ctx.group = src, group
        if group.rank == src:
            buf = x.contiguous()
            if not group.simulated:
                group.wait(dist.broadcast(buf, group.global_ranks[src], group=group.pg, async_op=True))
            return buf.view_as(buf)
        buf = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if not group.simulated:
            group.wait(dist.broadcast(buf, group.global_ranks[src], group=group.pg, async_op=True))
        COUNTER.add("broadcast", _phase(), buf.nbytes)
        return buf

    @staticmethod
    def backward(ctx, grad: Tensor):
        group, src = ctx.group, ctx.src
        total = grad.contiguous().clone()
        if not group.simulated:
            group.wait(dist.reduce(total, group.global_ranks[src], op=dist.ReduceOp.SUM, group=group.pg, async_op=True))
        if group.rank == src:
            COUNTER.add("reduce", _phase(True), (group.size - 1) * total.nbytes)
            return total, None, None
        return None, None, None


def all_to_all(x: Tensor, split_dim: int, cat_dim: int, group: Group, cat_size: Optional[int] = None) -> Tensor:
    """Split ``x`` along ``split_dim`` into P equal pieces (zero-padding that dim to a multiple of P),
    send piece q to rank q, and concatenate the P pieces received (rank order) along ``cat_dim``,
    keeping its first ``cat_size`` entries (default: all). ``[.., A, B, ..]`` distributed along B
    becomes distributed along A. Backward: the reverse all-to-all (padding and cut swapped).

    The exchange runs in slices of the last dim when the exchange does not move it, so its buffers
    are a fraction of ``x`` (:data:`EXCHANGE_SLICES`)."""
    return x if group.size == 1 else _AllToAll.apply(x, split_dim, cat_dim, cat_size, group)


def all_gather(x: Tensor, dim: int, group: Group) -> Tensor:
    """Every rank's ``x`` (same shape) concatenated along ``dim``, in rank order. Backward:
    reduce-scatter (the sum over ranks of each rank's piece of the gradient)."""
    return x if group.size == 1 else _AllGather.apply(x, dim, group)


def reduce_scatter(x: Tensor, dim: int, group: Group) -> Tensor:
    """The sum over ranks of ``x``, split along ``dim`` into P pieces; this rank keeps its piece.
    Backward: all-gather."""
    return x if group.size == 1 else _ReduceScatter.apply(x, dim, group)


def broadcast(x: Tensor, src: int, group: Group) -> Tensor:
    """Rank ``src``'s ``x`` on every rank (every rank passes a tensor of the same shape and dtype;
    only ``src``'s values are read). Backward: the gradients of all ranks summed on ``src`` (zero on
    the others)."""
    return x if group.size == 1 else _Broadcast.apply(x, src, group)


__all__ = [
    "COUNTER",
    "CommCounter",
    "EXCHANGE_SLICES",
    "Group",
    "all_gather",
    "all_to_all",
    "broadcast",
    "exchange",
    "pad_to",
    "reduce_scatter",
    "simulated_group",
]
