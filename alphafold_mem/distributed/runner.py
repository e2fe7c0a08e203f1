"""How a declared step runs under dynamic axial parallelism: read its declaration (the placements
of :mod:`alphafold_mem.memory.axes`), bring the operands into a layout the step can run in, run it
on this device's share (in chunks of the module's ``chunk_size``), and return the result in the
layout its representation keeps between steps.

For one step with declaration ``split`` (and its second axis ``split.also``):

1. The layout of every representation operand is read from its shape (:meth:`Sharding.layout`).
2. If every :class:`~alphafold_mem.memory.axes.Shard` operand is already distributed along the axis
   the split reads it by (rows or columns) -- first ``split``, then ``also`` -- and no operand the
   split needs whole is distributed, the step runs locally (pointwise steps, MSA column attention,
   the row-wise pair updates).
3. Otherwise the operands are moved to ``split``'s layout (all-to-all; e.g. MSA row attention, the
   ending-node triangle attention). A representation the split needs whole (``Replicate(rows=...)``:
   the other projection of a triangle multiplication, the right operand of the outer product mean,
   an attention bias) is never gathered whole: the step runs once per device r, on device r's piece
   of it (a broadcast), with the other operands sliced by ``also`` to the same range, and each
   result fills its part of the output. The largest transient is one piece, 1/P of the whole.
4. Inputs every device holds whole (:class:`~alphafold_mem.memory.axes.Slice`) are cut to this
   device's range; a per-residue result (output ``Slice``) is gathered so every device holds it whole;
   a representation result is moved back if its carrier operand was moved (step 3).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn as nn
from torch import Tensor

from ..memory.axes import Replicate, Shard, Slice, Split
from ..memory.chunking import Result, chunked
from . import comm
from .shard import COLS, ONE, ROWS, WHOLE, Sharding


def _need(p: Shard) -> str:
    return COLS if p.columns else ROWS


def _rows_cols(p: Shard) -> tuple[int, int]:
    return (p.dim - 1, p.dim) if p.columns else (p.dim, p.dim + 1)


class StepError(RuntimeError):
    """A declaration device sharding cannot run (names the module and step)."""


class DapRunner:
    """Runs declared steps and draws dropout masks for modules bound to it (``module.dap``)."""

    def __init__(self, sharding: Sharding):
        self.sharding = sharding

    # -- the seams the model calls -----------------------------------------------------------------
    def dropout_mask(self, x: Tensor, shape: list[int], keep_prob: float) -> Tensor:
        return self.sharding.dropout_mask(x, shape, keep_prob)

    def run(self, module: nn.Module, step: str, split: Split, fn: Callable[..., Result], args: tuple) -> Result:
        sh = self.sharding
        layouts = [self._layout(a, p) for a, p in zip(args, split.inputs)]
        for candidate in (split, split.also):
            if candidate is not None and self._runs_as_is(candidate, layouts):
                return self._finish(candidate, self._execute(module, step, candidate, fn, args, layouts), {}, args)
        moved: dict[int, tuple[str, int]] = {}
        local = self._prepare(split, args, layouts, moved)
        whole = [i for i, p in enumerate(split.inputs) if isinstance(p, Replicate) and layouts[i] in (ROWS, COLS)]
        if not whole:
            result = chunked(fn, local, split.dims, getattr(module, "chunk_size", None), out_dim=split.out_dim)
        else:
            result = self._by_pieces(module, step, split, fn, args, local, layouts, whole)
        del local
        return self._finish(split, result, moved, args)

    # -- layouts -----------------------------------------------------------------------------------
    def _layout(self, a: Any, p: Any) -> Optional[str]:
        if not isinstance(a, Tensor):
            return None
        if isinstance(p, Shard):
            rows, cols = _rows_cols(p)
            return self.sharding.layout(a, cols, rows if a.dim() >= -rows else None)
        if isinstance(p, Replicate) and p.rows is not None:
            return self.sharding.layout(a, p.rows + 1, p.rows)
        return None

    @staticmethod
    def _runs_as_is(split: Split, layouts: list[Optional[str]]) -> bool:
        for p, lay in zip(split.inputs, layouts):
            if isinstance(p, Shard) and lay is not None and lay not in (_need(p), ONE, WHOLE):
                return False
            if isinstance(p, Replicate) and lay in (ROWS, COLS):
                return False
        return True

    def _prepare(self, split: Split, args: tuple, layouts: list[Optional[str]],
                 moved: dict[int, tuple[str, int]]) -> list:
        """The operands of ``split`` on this device; ``moved[i] = (layout before, true rows)`` for
        representation operands moved to another layout."""
        sh = self.sharding
        out, cache = [], {}
        for i, (a, p, lay) in enumerate(zip(args, split.inputs, layouts)):
            if not isinstance(a, Tensor):
                out.append(a)
            elif isinstance(p, Slice):
                out.append(a if a.shape[p.dim] == 1 else sh.take(a, p.dim))
            elif isinstance(p, Shard):
                need = _need(p)
                if lay in (need, ONE):
                    out.append(a)
                elif lay == WHOLE:
                    out.append(sh.take(a, p.dim))
                else:
                    rows, cols = _rows_cols(p)
                    key = (id(a), need)
                    if key not in cache:
                        n_rows = a.shape[rows] if lay == COLS else sh.n_res
                        cache[key] = sh.to_rows(a, rows, cols) if need == ROWS else sh.to_cols(a, rows, cols, n_rows)
                        moved[i] = (lay, n_rows)
                    out.append(cache[key])
            else:
                out.append(a)
        return out

    # -- whole operands, piece by piece ----------------------------------------------------------
    def _by_pieces(self, module: nn.Module, step: str, split: Split, fn: Callable[..., Result], args: tuple,
                   local: list, layouts: list[Optional[str]], whole: list[int]) -> Result:
        sh = self.sharding
        also = split.also
        if also is None or not all(isinstance(also.inputs[i], Shard) for i in whole):
            raise StepError(f"{type(module).__qualname__}.{step}: operand(s) {whole} are needed whole and are "
                            "distributed; the declaration needs an 'also' split that slices them")
        for i in whole:  # distribute each whole operand along the axis 'also' slices it by
            p: Shard = also.inputs[i]
            if layouts[i] != _need(p):
                rows, cols = _rows_cols(p)
                local[i] = sh.to_rows(args[i], rows, cols) if _need(p) == ROWS else \
                    sh.to_cols(args[i], rows, cols, sh.n_res)
        n = sh.n_res
        chunk = getattr(module, "chunk_size", None)
        out = None
        for r in range(sh.size):
            start, valid = sh.span(n, r)
            pieces = {i: comm.broadcast(local[i], r, sh.group) for i in whole}
            if valid == 0:
                continue
            piece_args = []
            for i, (a, p) in enumerate(zip(local, also.inputs)):
                if i in pieces:
                    piece_args.append(pieces[i].narrow(p.dim, 0, valid))
                elif isinstance(a, Tensor) and isinstance(p, (Shard, Slice)) and a.shape[p.dim] != 1:
                    piece_args.append(a.narrow(p.dim, start, valid))
                else:
                    piece_args.append(a)
            res = chunked(fn, piece_args, split.dims, chunk, out_dim=split.out_dim)
            del pieces, piece_args
            results = (res,) if isinstance(res, Tensor) else tuple(res)
            if out is None:
                out = []
                for t in results:
                    shape = list(t.shape)
                    shape[also.out_dim] = n
                    out.append(t.new_empty(shape))
            for o, t in zip(out, results):
                o.narrow(also.out_dim, start, valid).copy_(t)
            del res, results
        return out[0] if len(out) == 1 else tuple(out)

    # -- results -----------------------------------------------------------------------------------
    def _finish(self, split: Split, result: Result, moved: dict[int, tuple[str, int]], args: tuple) -> Result:
        sh = self.sharding
        single = isinstance(result, Tensor)
        results = (result,) if single else tuple(result)
        place = split.output
        if isinstance(place, Slice):
            if split.axis == "msa_row":
                raise StepError("a per-residue (Slice) output must come from a residue axis, not msa_row")
            results = tuple(sh.gather(t, place.dim) for t in results)
        else:
            carrier = next((i for i, p in enumerate(split.inputs)
                            if isinstance(p, Shard) and p.columns == place.columns), None)
            if carrier is not None and carrier in moved:
                before, n_rows = moved[carrier]
                rows, cols = _rows_cols(place)
                results = tuple(sh.to_cols(t, rows, cols, n_rows) if before == COLS else sh.to_rows(t, rows, cols)
                                for t in results)
        return results[0] if single else results

    def _execute(self, module: nn.Module, step: str, split: Split, fn: Callable[..., Result], args: tuple,
                 layouts: list[Optional[str]]) -> Result:
        local = self._prepare(split, args, layouts, {})
        return chunked(fn, local, split.dims, getattr(module, "chunk_size", None), out_dim=split.out_dim)


__all__ = ["DapRunner", "StepError"]
