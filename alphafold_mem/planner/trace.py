"""The estimator's storage tracker (:class:`PlanTracker`): the counting of
:class:`~alphafold_mem.memory.tracking.StorageTracker` with three additions for the planner.

* a cheaper dispatch: ops that return no tensor (``prim.device``, sizes) return at once, the
  inputs are collected without a general tree flatten, and without autograd ``narrow`` and ``unflatten`` run
  as the equal ``as_strided`` view (one fake op instead of a chain of decomposed views); the
  count is the base tracker's (ops such as ``to``, ``contiguous`` or ``flatten``, which alias or
  copy, are told apart by storage as there); in inference an op whose arguments' metadata were
  seen before is served from a recipe, not run through the fake mode (:mod:`.opcache`).
* a limit: with ``limit`` set, the trace stops (:class:`OverLimit`) at the first op after which the
  running device total (or a corrected block peak, below) exceeds it. The peak is at least that
  total, so "does not fit" is decided exactly; the total seen is a lower bound of the peak.
* a per-stack correction (:meth:`watch_stack`): the estimator runs a stack of Evoformer-type blocks
  with one block, where the real stack's second block peaks higher when the blocks do not update in
  place: the caller still holds the stack's inputs while the second block runs
  (:func:`alphafold_mem.memory.checkpoint.run_blocks` passes block j's outputs to block j + 1 and
  keeps the original arguments). Block two starts with what block one left allocated (its new
  outputs) on top of block one's start and then allocates and frees what block one did, so its peak
  is block one's peak plus that growth; block three starts where block two did (block one's
  outputs are dropped when block two's replace them), and so does every later block.
  :attr:`corrected_peak` is the largest of the traced peak and each watched block's peak plus its
  growth (no growth in place: the outputs are the inputs).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor

from ..memory.tracking import StorageTracker
from . import opcache

_FAKE = torch._C._TorchDispatchModeKey.FAKE
_DEVICE = torch.ops.prim.device.default


class OverLimit(BaseException):
    """Raised inside a trace when the running device total passes :attr:`PlanTracker.limit`
    (a ``BaseException``: no ``except Exception`` in model code can swallow it)."""

    def __init__(self, total: int):
        super().__init__(total)
        self.total = total


def _storages(obj: Any, into: list) -> None:
    if isinstance(obj, Tensor):
        into.append(obj)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _storages(x, into)
    elif isinstance(obj, dict):
        for x in obj.values():
            _storages(x, into)


_NARROW = torch.ops.aten.narrow.default
_AS_STRIDED = torch.ops.aten.as_strided.default


def _narrow_view(x: Tensor, dim: int, start: int, length: int) -> tuple:
    """The arguments of ``as_strided`` giving the view ``x.narrow(dim, start, length)`` (the same
    storage, sizes, strides and offset; fake tensors trace it in one op, not three)."""
    dim %= x.dim()
    if start < 0:
        start += x.shape[dim]
    size = list(x.shape)
    size[dim] = length
    return x, size, x.stride(), x.storage_offset() + start * x.stride(dim)


def _unflatten_view(x: Tensor, dim: int, sizes) -> tuple:
    """The arguments of ``as_strided`` giving the view ``x.unflatten(dim, sizes)``."""
    dim %= x.dim()
    sizes = list(sizes)
    if -1 in sizes:
        known = 1
        for n in sizes:
            known *= n if n != -1 else 1
        sizes[sizes.index(-1)] = x.shape[dim] // known
    strides, step = [], x.stride(dim)
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    shape = [*x.shape[:dim], *sizes, *x.shape[dim + 1 :]]
    return x, shape, [*x.stride()[:dim], *reversed(strides), *x.stride()[dim + 1 :]], x.storage_offset()


_VIEWS = {_NARROW: _narrow_view, torch.ops.aten.unflatten.int: _unflatten_view}


def _call(func, args, kwargs):
    return func(*args, **(kwargs or {}))


class PlanTracker(StorageTracker):
    """:class:`StorageTracker` with a limit, a cheaper dispatch and the per-stack correction (module
    docstring). ``limit``: device bytes (activations only, as the tracker counts them) past which the
    trace stops with :class:`OverLimit`; ``None``: no limit."""

    def __init__(self, limit: Optional[int] = None) -> None:
        super().__init__()
        self.limit = limit
        self.corrected_peak = 0
        self._segment: Optional[int] = None  # the peak since the watched block began
        self.frames: list = []  # module calls being recorded (:mod:`.replay`)
        self._unparking = False

    def _check(self) -> None:
        if self.live > self.peak:
            self.peak = self.live
            if self.limit is not None and self.live > self.limit:
                raise OverLimit(self.live)
        if self._segment is not None and self.live > self._segment:
            self._segment = self.live
        for f in self.frames:
            if self.live - f.live0 > f.top:
                f.top = self.live - f.live0
                f.steps.append((f.top, self._unparking))

    def replay_steps(self, live0: int, steps: tuple, top: int, ops: int) -> None:
        """Replay a recorded call's new maxima of the total (relative to ``live0``, the total at the
        call), as :meth:`_check` saw them: the peak, the limit, the watched segment and the calls
        being recorded around it see the same points in the same order."""
        for rel, via_unpark in steps:
            live = live0 + rel
            if via_unpark:
                self.peak = max(self.peak, live)
            elif live > self.peak:
                self.peak = live
                if self.limit is not None and live > self.limit:
                    raise OverLimit(live)
        if self._segment is not None:
            self._segment = max(self._segment, live0 + top)
        for f in self.frames:
            f.ops += ops
            for rel, via_unpark in steps:
                if live0 + rel - f.live0 > f.top:
                    f.top = live0 + rel - f.live0
                    f.steps.append((f.top, via_unpark))

    def _track(self, t: Tensor) -> None:
        if not self.frames:
            return super()._track(t)
        st = t.untyped_storage()
        key = id(st)
        ref = self._refs.get(key)
        known = ref is not None and ref() is st
        super()._track(t)
        if not known:
            for f in self.frames:
                f.new.add(key)

    def _freed(self, key: int, nbytes: int) -> None:
        for f in self.frames:
            if key not in f.new:
                f.dirty = True
        super()._freed(key, nbytes)

    def _touch(self, t: Tensor) -> None:
        """A storage parked or unparked: a recorded call may only move its own or its arguments'."""
        key = id(t.untyped_storage())
        for f in self.frames:
            if key not in f.new and key not in f.args:
                f.dirty = True

    def _host_moved(self) -> None:
        for f in self.frames:
            f.host_top = max(f.host_top, self.host - f.host0)

    def park(self, t: Tensor) -> None:
        self._touch(t)
        super().park(t)
        self._host_moved()

    def add_host(self, nbytes: int) -> None:
        super().add_host(nbytes)
        self._host_moved()

    def unpark(self, t: Tensor) -> None:
        self._touch(t)
        super().unpark(t)
        self._unparking = True
        try:
            self._check()
        finally:
            self._unparking = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _DEVICE and len(args) == 1 and type(args[0]) is FakeTensor:
            return args[0].fake_device  # what the fake mode and fake tensors answer
        if func in _VIEWS and not kwargs and not torch.is_grad_enabled():
            func, args = _AS_STRIDED, _VIEWS[func](*args)
        out = opcache.serve(func, args, kwargs, torch._C._get_dispatch_mode(_FAKE), _call)
        if isinstance(out, Tensor):
            outs = (out,)
        elif isinstance(out, (tuple, list)):
            outs = [t for t in out if isinstance(t, Tensor)]
        else:
            return out  # no tensor (prim.device, sizes, scalars)
        if not outs:
            return out
        for f in self.frames:
            f.ops += 1
        ins: list[Tensor] = []
        _storages(args, ins)
        if kwargs:
            _storages(kwargs, ins)
        inputs = {id(t.untyped_storage()) for t in ins if t.layout == torch.strided}
        for t in outs:
            # views and in-place results alias an input: no new storage (and a view of a tensor made
            # before the context must not be counted as new)
            if t.layout == torch.strided and id(t.untyped_storage()) not in inputs:
                self._track(t)
        self._check()
        return out

    def watch_stack(self, block: nn.Module) -> list:
        """Hooks on the first block of a stack for the per-stack correction (module docstring);
        returns the hook handles (remove them after the trace)."""
        state: dict[str, Any] = {}

        def pre(module, args):
            state["previous"], state["start"] = self._segment, self.live
            self._segment = self.live

        def post(module, args, output):
            segment, growth = self._segment, self.live - state["start"]
            previous = state["previous"]
            self._segment = None if previous is None else max(previous, segment)
            self.corrected_peak = max(self.corrected_peak, segment + max(growth, 0))
            if self.limit is not None and self.corrected_peak > self.limit:
                raise OverLimit(self.corrected_peak)

        return [block.register_forward_pre_hook(pre), block.register_forward_hook(post)]


__all__ = ["OverLimit", "PlanTracker"]
