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
3. Otherwise the operands read along their other axis are moved (all-to-all; MSA row attention,
   the ending-node triangle attention, the incoming triangle multiplication): in inference with a
   chunk size chunk by chunk (:func:`~alphafold_mem.distributed.pieces.pipelined`), else whole. A
   representation the split needs whole (``Replicate(rows=...)``: the other projection of a triangle
   multiplication, the right operand of the outer product mean, an attention bias) is never
   gathered whole: the step runs block by block of it (:func:`~alphafold_mem.distributed.pieces.by_pieces`),
   except in the chunk-by-chunk mode, where only small ones (a quarter of the moved operand or less,
   e.g. the attention biases of H channels) are gathered.
4. Inputs every device holds whole (:class:`~alphafold_mem.memory.axes.Slice`) are cut to this
   device's range; a per-residue result (output ``Slice``) is gathered so every device holds it whole;
   a representation result is moved back if its carrier operand was moved.

In inference the triangle multiplication does not run its declared ``outgoing`` / ``incoming``
steps here: :meth:`DapRunner.triangle_multiplication` computes its projections block by block
(:mod:`alphafold_mem.distributed.product`). A step whose result goes into an existing share
(``run_split(..., out=...)``, an in-place update of the policy) and that runs on the shares as they
are writes it there chunk by chunk (:meth:`DapRunner.run_into`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn as nn
from torch import Tensor

from ..memory.axes import Replicate, Shard, Slice, Split
from ..memory.chunking import Result, chunked
from . import product
from .pieces import by_pieces, carrier, need, pipelined, rows_cols
from .shard import COLS, ONE, ROWS, WHOLE, Sharding

#: chunk-by-chunk moving is used when every whole operand is at most this fraction of a moved one
SMALL_WHOLE = 0.25


class StepError(RuntimeError):
    """A declaration device sharding cannot run (names the module and step)."""


def _moving(split: Split, layouts: list) -> list[int]:
    """Indices of the Shard operands held in the other layout than the split reads them by."""
    return [
        i
        for i, (p, lay) in enumerate(zip(split.inputs, layouts))
        if isinstance(p, Shard) and lay not in (None, need(p), ONE, WHOLE)
    ]


def _whole(split: Split, layouts: list) -> list[int]:
    """Indices of the operands the split needs whole that are distributed."""
    return [
        i for i, (p, lay) in enumerate(zip(split.inputs, layouts)) if isinstance(p, Replicate) and lay in (ROWS, COLS)
    ]


def _storages(out: Result) -> set[int]:
    """Ids of the storages of ``out`` (a tensor or a tuple of them)."""
    return {id(o.untyped_storage()) for o in ((out,) if isinstance(out, Tensor) else out)}


class DapRunner:
    """Runs declared steps and draws dropout masks for modules bound to it (``module.dap``)."""

    def __init__(self, sharding: Sharding):
        self.sharding = sharding

    def dropout_mask(self, x: Tensor, shape: list[int], keep_prob: float) -> Tensor:
        return self.sharding.dropout_mask(x, shape, keep_prob)

    def run(self, module: nn.Module, step: str, split: Split, fn: Callable[..., Result], args: tuple) -> Result:
        sh = self.sharding
        chunk = getattr(module, "chunk_size", None)
        layouts = [self._layout(a, p) for a, p in zip(args, split.inputs)]
        as_is = self._as_is(split, args, layouts)
        if as_is is not None:
            candidate, local, by = as_is
            return self._finish(candidate, chunked(fn, local, by.dims, self._per_device(chunk), out_dim=by.out_dim), {})
        if self._pipelines(split, args, layouts, chunk):
            return pipelined(sh, split, fn, args, layouts, self._per_device(chunk))
        whole = _whole(split, layouts)
        if whole and (split.also is None or not all(isinstance(split.also.inputs[i], Shard) for i in whole)):
            raise StepError(
                f"{type(module).__qualname__}.{step}: operand(s) {whole} are needed whole and are "
                "distributed; the declaration needs an 'also' split that slices them"
            )
        moved: dict[int, tuple[str, int]] = {}
        local = self._prepare(split, args, layouts, moved)
        if whole:
            result = by_pieces(sh, split, fn, local, layouts, whole, chunk)
        else:
            result = chunked(fn, local, split.dims, chunk, out_dim=split.out_dim)
        del local
        return self._finish(split, result, moved)

    def run_into(
        self,
        module: nn.Module,
        step: str,
        split: Split,
        fn: Callable[..., Result],
        args: tuple,
        out: Result,
        accumulate: bool,
    ) -> bool:
        """Run ``split`` writing (``accumulate``: adding) its result into ``out`` slice by slice, as one
        device does, when it runs on the shares as they are and its result is a representation in
        their layout (``out`` is then this device's share); returns whether it did. Otherwise
        (a per-residue result, operands moved whole) nothing runs: the caller runs :meth:`run` and
        delivers the whole result. Without this an in-place residual update of the policy (e.g. the
        template update added into z) would first build a whole share-sized result. A step whose
        operands are moved chunk by chunk (inference, :func:`~alphafold_mem.distributed.pieces.pipelined`)
        gets each chunk's result back into ``out`` when only its carrier aliases ``out``."""
        if isinstance(split.output, Slice):
            return False
        chunk = getattr(module, "chunk_size", None)
        layouts = [self._layout(a, p) for a, p in zip(args, split.inputs)]
        as_is = self._as_is(split, args, layouts)
        if as_is is not None:
            _, local, by = as_is
            chunked(fn, local, by.dims, self._per_device(chunk), out_dim=by.out_dim, out=out, accumulate=accumulate)
            return True
        if self._pipelines(split, args, layouts, chunk):
            if not self._only_carrier_aliases(split, args, layouts, out):
                return False
            # operands moved chunk by chunk: each chunk's result comes back into out
            pipelined(self.sharding, split, fn, args, layouts, self._per_device(chunk), into=out, accumulate=accumulate)
            return True
        whole, written = _whole(split, layouts), _storages(out)
        if (
            whole
            and not _moving(split, layouts)
            and split.also is not None
            and all(isinstance(split.also.inputs[i], Shard) for i in whole)
            and not any(isinstance(a, Tensor) and id(a.untyped_storage()) in written for a in args)
        ):
            # whole operands block by block (e.g. the outer product mean's b): blocks written into out
            local = self._prepare(split, args, layouts, {})
            by_pieces(self.sharding, split, fn, local, layouts, whole, chunk, into=out, accumulate=accumulate)
            return True
        return False

    @staticmethod
    def _only_carrier_aliases(split: Split, args: tuple, layouts: list, out: Result) -> bool:
        """Whether the step's result comes back into its carrier's layout (moved chunk by chunk) and
        the only operand sharing storage with ``out`` (if any) is that carrier (its chunk is read
        before the same positions are written back)."""
        written = _storages(out)
        back = carrier(split)
        if back is None or layouts[back] in (None, need(split.inputs[back]), ONE, WHOLE):
            return False
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and id(a.untyped_storage()) in written:
                # the carrier itself, or the same tensor read again in the same placement (keys = queries)
                if not (a is args[back] and split.inputs[i] == split.inputs[back]):
                    return False
        return True

    def _pipelines(self, split: Split, args: tuple, layouts: list, chunk: Optional[int]) -> bool:
        """Whether :meth:`run` would run ``split`` chunk by chunk with moved operands
        (:func:`~alphafold_mem.distributed.pieces.pipelined`)."""
        moving = _moving(split, layouts)
        return bool(
            chunk and moving and not torch.is_grad_enabled() and self._small(args, _whole(split, layouts), moving)
        )

    def _as_is(self, split: Split, args: tuple, layouts: list) -> Optional[tuple[Split, list, Split]]:
        """``(candidate, operands, split to chunk by)`` when ``split`` (or its ``also``) runs on the
        shares as they are, else None. A pointwise step (no whole operand) can be chunked along its
        first axis on any share: the share's rows are the long axis of an MSA distributed by columns."""
        for candidate in (split, split.also):
            if candidate is not None and self._runs_as_is(candidate, layouts):
                return candidate, self._prepare(candidate, args, layouts, {}), (split if not split.whole else candidate)
        return None

    def _per_device(self, chunk: Optional[int]) -> Optional[int]:
        """The chunk size of a step run on the shares as they are: 1/P of the module's (rounded up).
        A chunk along a distributed axis spans the whole other axis, so the module's chunk size
        would keep one device's transients whatever P; 1/P of it keeps them ~1/P."""
        return None if chunk is None else max(1, -(-chunk // self.sharding.size))

    def triangle_multiplication(self, module: nn.Module, z: Tensor, pair_mask: Tensor) -> Optional[Tensor]:
        """The update of a triangle multiplication in inference, projections computed block by block
        (:mod:`alphafold_mem.distributed.product`; z ``[*, L, N_res, c_z]`` by rows, pair_mask
        ``[*, N_res, N_res]`` whole); ``None`` when that path does not apply (autograd, or z not
        distributed by rows): then the module runs its declared steps."""
        if not product.applies(self.sharding, z):
            return None
        return product.triangle_multiplication(self.sharding, module, z, pair_mask)

    # -- layouts -----------------------------------------------------------------------------------
    def _layout(self, a: Any, p: Any) -> Optional[str]:
        if not isinstance(a, Tensor):
            return None
        if isinstance(p, Shard):
            rows, cols = rows_cols(p)
            return self.sharding.layout(a, cols, rows if a.dim() >= -rows else None)
        if isinstance(p, Replicate) and p.rows is not None:
            return self.sharding.layout(a, p.rows + 1, p.rows)
        return None

    @staticmethod
    def _runs_as_is(split: Split, layouts: list[Optional[str]]) -> bool:
        for p, lay in zip(split.inputs, layouts):
            if isinstance(p, Shard) and lay is not None and lay not in (need(p), ONE, WHOLE):
                return False
            if isinstance(p, Replicate) and lay in (ROWS, COLS):
                return False
        return True

    def _small(self, args: tuple, whole: list[int], moving: list[int]) -> bool:
        """Whether every distributed whole operand, gathered (P times its share), is at most
        :data:`SMALL_WHOLE` of the largest operand to move."""
        moved = max(args[i].numel() for i in moving)
        return all(args[i].numel() * self.sharding.size <= SMALL_WHOLE * moved for i in whole)

    def _prepare(
        self, split: Split, args: tuple, layouts: list[Optional[str]], moved: dict[int, tuple[str, int]]
    ) -> list:
        """The operands of ``split`` on this device; ``moved[i] = (layout before, true rows)`` for
        representation operands moved to their other layout."""
        sh = self.sharding
        out, cache = [], {}
        for i, (a, p, lay) in enumerate(zip(args, split.inputs, layouts)):
            if not isinstance(a, Tensor) or not isinstance(p, (Shard, Slice)):
                out.append(a)
            elif isinstance(p, Slice):
                out.append(a if a.shape[p.dim] == 1 else sh.take(a, p.dim))
            elif lay in (need(p), ONE):
                out.append(a)
            elif lay == WHOLE:
                out.append(sh.take(a, p.dim))
            else:
                rows, cols = rows_cols(p)
                key = (id(a), need(p))
                if key not in cache:
                    n_rows = a.shape[rows] if lay == COLS else sh.n_res
                    cache[key] = sh.to_rows(a, rows, cols) if need(p) == ROWS else sh.to_cols(a, rows, cols, n_rows)
                    moved[i] = (lay, n_rows)
                out.append(cache[key])
        return out

    def _finish(self, split: Split, result: Result, moved: dict[int, tuple[str, int]]) -> Result:
        sh = self.sharding
        single = isinstance(result, Tensor)
        results = (result,) if single else tuple(result)
        place = split.output
        if isinstance(place, Slice):
            if split.axis == "msa_row":
                raise StepError("a per-residue (Slice) output must come from a residue axis, not msa_row")
            results = tuple(sh.gather(t, place.dim) for t in results)
        else:
            back = carrier(split)
            if back is not None and back in moved:
                before, n_rows = moved[back]
                rows, cols = rows_cols(place)
                results = tuple(
                    sh.to_cols(t, rows, cols, n_rows) if before == COLS else sh.to_rows(t, rows, cols) for t in results
                )
        return results[0] if single else results


__all__ = ["DapRunner", "StepError", "carrier"]
