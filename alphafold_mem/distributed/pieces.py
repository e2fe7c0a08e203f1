"""The two ways a declared step avoids whole-size buffers under device sharding
(:mod:`alphafold_mem.distributed.runner` decides which applies):

* :func:`by_pieces` -- an operand every slice needs whole (``Replicate(rows=...)``) is never gathered
  whole: the step runs once per block of ``chunk_size`` entries (default: one device's share) of
  its declared second axis (``Split.also``), on that block of the operand -- sent by the device
  holding it (a broadcast) or, when the operand is distributed along its other axis, assembled
  from every device (an all-gather of the block) -- and each result fills its part of the output.
  Under autograd every block is an activation checkpoint, so no block is kept for the backward
  pass (it is fetched again, in the same order on every device).
* :func:`pipelined` (inference, chunked steps) -- an operand the step reads along its other axis is
  moved chunk by chunk (each device receives only the chunk it is about to compute) and each
  chunk of the result is sent back at once, so neither the moved operand nor the result exists
  in the other layout as a whole. Each chunk runs in blocks of one device's share of the step's
  second axis (e.g. the queries of an attention), so its transients scale like 1/P as well.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..memory.axes import Replicate, Shard, Slice, Split
from ..memory.chunking import Result, chunked, estimating
from . import comm
from .comm import pad_to
from .shard import COLS, ONE, ROWS, WHOLE, Sharding


def carrier(split: Split) -> Optional[int]:
    """The operand whose layout the result takes: the first Shard input read along the same kind of
    axis (rows or columns) as the result carries (``None`` for a per-residue result)."""
    place = split.output
    if isinstance(place, Slice):
        return None
    return next((i for i, p in enumerate(split.inputs) if isinstance(p, Shard) and p.columns == place.columns), None)


def need(p: Shard) -> str:
    """The layout a Shard placement reads its operand in."""
    return COLS if p.columns else ROWS


def rows_cols(p: Shard) -> tuple[int, int]:
    """(rows dim, columns dim) of an operand with Shard placement ``p``."""
    return (p.dim - 1, p.dim) if p.columns else (p.dim, p.dim + 1)


def block(x: Tensor, dim: int, start: int, size: int) -> Tensor:
    """``x[start:start + size]`` along ``dim``, zero-padded past its end."""
    valid = max(0, min(size, x.shape[dim] - start))
    if valid == size:
        return x.narrow(dim, start, size)
    return pad_to(x.narrow(dim, min(start, x.shape[dim]), valid), dim, size)


def _as_tuple(res: Result) -> tuple[Tensor, ...]:
    return (res,) if isinstance(res, Tensor) else tuple(res)


# -- whole operands, block by block ------------------------------------------------------------------
def by_pieces(
    sh: Sharding,
    split: Split,
    fn: Callable[..., Result],
    local: list,
    layouts: list,
    whole: list[int],
    chunk: Optional[int],
    into: Optional[Result] = None,
    accumulate: bool = False,
) -> Result:
    """Run ``split`` with its distributed whole operands ``whole`` block by block (module docstring).
    ``local``: the operands prepared for ``split``; ``layouts``: their layouts on entry. ``into``:
    existing tensor(s) of the result's shape (an in-place residual update, no operand aliasing
    them): each block's result is written (``accumulate``: added) there, so no result buffer
    exists; returns ``into`` then (a result of another shape is built and delivered)."""
    also = split.also
    targets = _as_targets(into)
    direct = False
    n, length = sh.n_res, sh.local_res
    size_max = min(chunk or length, length)
    grad = torch.is_grad_enabled()
    out: Optional[list[Tensor]] = None
    blocks = [(r, s0) for r in range(sh.size) for s0 in range(0, length, size_max)]
    if estimating():  # the memory estimator: a block of this device's share and one of another's
        blocks = [(0, 0), (1, 0)]
    for r, s0 in blocks:
        start_r, valid_r = sh.span(n, r)
        size = min(size_max, length - s0)
        valid = max(0, min(size, valid_r - s0))
        if not valid:  # the same blocks are empty on every device
            continue
        held = [local[i] for i in whole]
        run = functools.partial(_piece, sh, split, fn, local, layouts, whole, chunk, r, s0, size, valid, start_r)
        res = checkpoint(run, *held, use_reentrant=False) if grad else run(*held)
        results = _as_tuple(res)
        if out is None:
            shapes = []
            for t in results:
                shape = list(t.shape)
                shape[also.out_dim] = n
                shapes.append(torch.Size(shape))
            out, direct = _outputs(targets, results, shapes)
        for o, t in zip(out, results):
            _put(o.narrow(also.out_dim, start_r + s0, valid), t, accumulate and direct)
        del res, results
    return _finish_into(into, targets, out, direct, accumulate)


def _piece(
    sh: Sharding,
    split: Split,
    fn: Callable[..., Result],
    local: list,
    layouts: list,
    whole: list[int],
    chunk: Optional[int],
    r: int,
    s0: int,
    size: int,
    valid: int,
    start: int,
    *held: Tensor,
) -> Result:
    """One block: fetch block ``[s0, s0 + size)`` of device r's share of every whole operand (``held``,
    the local shares), cut the other operands to the same range, run the step."""
    also = split.also
    fetched = {
        i: _fetch(sh, t, also.inputs[i], layouts[i], r, s0, size).narrow(also.inputs[i].dim, 0, valid)
        for i, t in zip(whole, held)
    }
    args = []
    for i, (a, p) in enumerate(zip(local, also.inputs)):
        if i in fetched:
            args.append(fetched[i])
        elif isinstance(a, Tensor) and isinstance(p, (Shard, Slice)) and a.shape[p.dim] != 1:
            args.append(a.narrow(p.dim, start + s0, valid))
        else:
            args.append(a)
    return chunked(fn, args, split.dims, chunk, out_dim=split.out_dim)


def _fetch(sh: Sharding, w: Tensor, p: Shard, layout: str, r: int, s0: int, size: int) -> Tensor:
    """Block ``[s0, s0 + size)`` of device r's share, along dim ``p.dim`` of the whole operand w."""
    d = p.dim
    if layout == need(p):  # w is distributed along d: device r holds the block
        return comm.broadcast(w.narrow(d, s0, size).contiguous(), r, sh.group)
    other = d - 1 if p.columns else d + 1  # w is distributed along its other axis: assemble the block
    piece = block(w, d, r * sh.local_res + s0, size)
    return sh.gather(piece, other)


# -- moved operands, chunk by chunk (inference) ------------------------------------------------------
def pipelined(
    sh: Sharding,
    split: Split,
    fn: Callable[..., Result],
    args: tuple,
    layouts: list,
    chunk: int,
    into: Optional[Result] = None,
    accumulate: bool = False,
) -> Result:
    """Run ``split`` (its Shard operands that are in the other layout moved chunk by chunk) with no
    autograd; whole operands must be small (they are gathered whole). The result comes back in
    the layout its carrier operand had (see :func:`carrier`). ``chunk``: rows of the moved layout per
    chunk (the runner passes 1/P of the module's chunk size: a moved chunk spans the whole other axis).

    ``into``: this device's share(s) of an existing representation in the carrier's layout (an
    in-place residual update of the policy); each chunk's result is written (``accumulate``: added)
    there as it comes back, so no share-sized result buffer exists. Safe when ``into`` aliases the
    moved carrier: chunk ``c`` comes back to exactly the positions chunk ``c`` was read from, after
    they were read (the exchange that read them has returned), and no later chunk reads them.
    When the result does not come back into the carrier's layout, or the shapes differ, the result
    is built as without ``into`` and then delivered into it. Returns ``into`` when given."""

    moved = [
        i
        for i, (a, p, lay) in enumerate(zip(args, split.inputs, layouts))
        if isinstance(p, Shard) and lay not in (None, need(p), ONE, WHOLE)
    ]
    first = moved[0]
    p0 = split.inputs[first]
    r0, _ = rows_cols(p0)
    rows_true = args[first].shape[r0] if need(p0) == ROWS else sh.n_res
    length = sh.local(rows_true) if need(p0) == ROWS else sh.local_res
    prepared = []
    for i, (a, p, lay) in enumerate(zip(args, split.inputs, layouts)):
        if isinstance(p, Replicate) and lay in (ROWS, COLS):
            a = sh.gather_representation(a, p.rows)
        elif isinstance(a, Tensor) and isinstance(p, (Slice, Shard)) and lay in (None, WHOLE) and a.shape[p.dim] != 1:
            a = sh.take(a, p.dim)
        prepared.append(a)
    back = carrier(split)
    back = back if back in moved else None
    targets = _as_targets(into)
    direct = False  # results written straight into ``targets``
    true_back = (
        args[back].shape[rows_cols(split.inputs[back])[0]] if back is not None and layouts[back] == COLS else sh.n_res
    )
    out: Optional[list[Tensor]] = None
    starts = range(0, length, chunk)
    for c0 in starts[:2] if estimating() else starts:
        cs = min(chunk, length - c0)
        cache: dict[int, Tensor] = {}
        chunk_args = []
        for i, (a, p) in enumerate(zip(prepared, split.inputs)):
            if i in moved:
                if id(a) not in cache:
                    cache[id(a)] = _moved_chunk(sh, a, p, c0, cs, length)
                chunk_args.append(cache[id(a)])
            elif isinstance(a, Tensor) and isinstance(p, (Shard, Slice)) and a.shape[p.dim] != 1:
                chunk_args.append(a.narrow(p.dim, c0, cs))
            else:
                chunk_args.append(a)
        if split.also is not None:  # the chunk's work in blocks of a device's share of the second axis
            res = chunked(fn, chunk_args, split.also.dims, sh.local_res, out_dim=split.also.out_dim)
        else:
            res = fn(*chunk_args)
        results = _as_tuple(res)
        del cache, chunk_args, res
        if back is None:
            if out is None:
                out = [_empty_like_along(t, split.out_dim, length) for t in results]
            for o, t in zip(out, results):
                o.narrow(split.out_dim, c0, cs).copy_(t)
        else:
            ro, co = rows_cols(split.output)
            if out is None:
                out, direct = _outputs(
                    targets, results, [_result_shape(sh, t, ro, co, layouts[back], true_back) for t in results]
                )
            for o, t in zip(out, results):
                _send_back(sh, t, o, ro, co, layouts[back], c0, cs, length, true_back, accumulate and direct)
        del results
    if isinstance(split.output, Slice):
        out = [sh.gather(o, split.output.dim) for o in out]
    return _finish_into(into, targets, out, direct, accumulate)


def _moved_chunk(sh: Sharding, a: Tensor, p: Shard, c0: int, cs: int, length: int) -> Tensor:
    """Chunk ``[c0, c0 + cs)`` of this device's share of ``a`` in the layout ``p`` reads it in."""
    rows, cols = rows_cols(p)
    if need(p) == ROWS:  # a is distributed by columns: every device sends its columns of my rows
        send = [block(a, rows, q * length + c0, cs) for q in range(sh.size)]
        return torch.cat(comm.exchange(send, sh.group), dim=cols).narrow(cols, 0, sh.n_res)
    send = [block(a, cols, q * length + c0, cs) for q in range(sh.size)]  # by rows: their rows of my columns
    return torch.cat(comm.exchange(send, sh.group), dim=rows).narrow(rows, 0, sh.n_res)


def _empty_like_along(t: Tensor, dim: int, size: int) -> Tensor:
    shape = list(t.shape)
    shape[dim] = size
    return t.new_empty(shape)


def _result_shape(sh: Sharding, t: Tensor, ro: int, co: int, layout: str, true_rows: int) -> torch.Size:
    """The shape of the whole result, back in ``layout``, of which ``t`` is one chunk's."""
    shape = list(t.shape)
    if layout == COLS:  # back to distributed columns: [rows (true), L]
        shape[ro], shape[co] = true_rows, sh.local_res
    else:  # back to distributed rows: [L, N]
        shape[ro], shape[co] = sh.local_res, sh.n_res
    return torch.Size(shape)


def _send_back(
    sh: Sharding,
    t: Tensor,
    out: Tensor,
    ro: int,
    co: int,
    layout: str,
    c0: int,
    cs: int,
    length: int,
    true_rows: int,
    accumulate: bool = False,
) -> None:
    """Send a result chunk computed in the moved layout to the devices that hold it in ``layout``
    (written into ``out``, or added with ``accumulate``; the memory estimator skips these writes into
    existing buffers, which allocate nothing)."""
    local = sh.local_res
    if layout == COLS:  # t: my rows [c0, c0 + cs) x all columns -> device q gets its columns
        received = comm.exchange([block(t, co, q * local, local) for q in range(sh.size)], sh.group)
        for q, piece in enumerate(() if estimating() else received):
            valid = max(0, min(cs, true_rows - (q * length + c0)))
            if valid:
                _put(out.narrow(ro, q * length + c0, valid), piece.narrow(ro, 0, valid), accumulate)
        return
    received = comm.exchange([block(t, ro, q * local, local) for q in range(sh.size)], sh.group)
    for q, piece in enumerate(() if estimating() else received):  # t: all rows x my columns -> their rows
        valid = max(0, min(cs, sh.n_res - (q * length + c0)))
        if valid:
            _put(out.narrow(co, q * length + c0, valid), piece.narrow(co, 0, valid), accumulate)


def _put(dst: Tensor, src: Tensor, accumulate: bool) -> None:
    dst.add_(src) if accumulate else dst.copy_(src)


def _as_targets(into: Optional[Result]) -> Optional[list[Tensor]]:
    return None if into is None else ([into] if isinstance(into, Tensor) else list(into))


def _outputs(
    targets: Optional[list[Tensor]], results: tuple[Tensor, ...], shapes: list[torch.Size]
) -> tuple[list[Tensor], bool]:
    """The tensors the results are written into: ``targets`` when they have the whole result's
    shapes and dtypes (``direct``), else new buffers; returns ``(outputs, direct)``."""
    direct = targets is not None and all(
        d.shape == sz and d.dtype == t.dtype for d, sz, t in zip(targets, shapes, results)
    )
    return (list(targets) if direct else [t.new_empty(sz) for t, sz in zip(results, shapes)]), direct


def _finish_into(
    into: Optional[Result], targets: Optional[list[Tensor]], out: list[Tensor], direct: bool, accumulate: bool
) -> Result:
    """The result: ``out`` without ``into``; else ``into``, after delivering ``out`` into it when the
    results were built apart (``direct`` False)."""
    if targets is None:
        return out[0] if len(out) == 1 else tuple(out)
    if not direct:
        for d, o in zip(targets, out):
            _put(d, o, accumulate)
    return into


__all__ = ["block", "by_pieces", "need", "pipelined", "rows_cols"]
