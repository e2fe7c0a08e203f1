"""Replayed module calls: a module call the estimator has traced once is not traced again when it
recurs with the same arguments, it is replayed from what the :class:`~.trace.PlanTracker` recorded.

Why it is exact: under FakeTensorMode a module call's effect on the storage count depends only on
its code, its bound attributes (the policy's seams, chunk size), the ambient switches (autograd,
autocast, the estimator's loop cut, the traced chain count, the simulated device) and the metadata
of its arguments (shapes, strides, dtypes, which arguments share a storage, which storages the
tracker counts or has parked): fake tensors carry no values. All of that is the key of a
recording. A recording keeps, relative to the running total at the call, every new maximum of the
total (:meth:`PlanTracker._check` points, in order, so a limit stops a replay where it stopped the
trace) and of the host count, and the outputs: each a view of a new storage (its bytes), of an
argument, or an argument itself.

A recording is kept only when its effect is that and nothing more, checked when it is made: no
storage from before the call freed, parked or left parked inside it (host count back where it was),
every new storage still alive referenced by an output, no output on a storage the call neither made
nor received. Modules whose replay could skip other code are never replayed: those with forward
hooks below them (the tracker's per-stack correction, device sharding), an instance ``forward``
(checkpointing), a device-sharding runner, or running with autograd (training).
A module class may name attribute values it runs alike (``memory_equivalent``, e.g. offload levels
it does not tell apart): they key alike. :func:`install` wraps a model's eligible modules for one
trace; ``tests/test_planner_replay.py`` compares replayed estimates with estimates traced without
replay.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Optional

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..memory import chunking, offload

#: switch (tests compare with and without)
ENABLED = True
#: calls that ran fewer tracked ops than this are not worth a recording
MIN_OPS = 6
_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.Size)
_memo: dict[tuple, "Recording"] = {}
_states: dict[tuple, int] = {}  # module states, numbered (a key holds the number)
_small: set[tuple] = set()
_MEMO_SIZE = 20000


class Unkeyable(Exception):
    """An argument or attribute that cannot be part of a key: the call runs unrecorded."""


@dataclasses.dataclass(eq=False)
class Frame:
    """One call being recorded: the totals at its start and what the tracker saw since."""

    live0: int
    host0: int
    parked0: frozenset
    args: set  # storages of the arguments
    top: int = 0  # largest total seen, relative to live0
    steps: list = dataclasses.field(default_factory=list)  # (relative total, via unpark) new maxima
    host_top: int = 0
    new: set = dataclasses.field(default_factory=set)  # storages counted during the call
    ops: int = 0
    dirty: bool = False


@dataclasses.dataclass(frozen=True)
class Recording:
    steps: tuple
    top: int
    host_top: int
    ops: int
    storages: tuple  # (nbytes, dtype) of each new storage the outputs use
    leaves: tuple  # per output leaf: ("new", i, size, stride, offset) / ("arg", j, ...) / ("same", j) / ("value", v)
    spec: Any


def _plain(v):
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_plain(x) for x in v))
    raise Unkeyable(type(v).__name__)


def fingerprint(module: nn.Module) -> Optional[tuple]:
    """The bound state of ``module``'s subtree (public attributes of every submodule), or ``None`` when
    the module must not be replayed (hooks below it, an instance ``forward``, a sharding runner)."""
    items = []
    for name, m in module.named_modules():
        same = getattr(type(m), "memory_equivalent", {})  # attribute -> values the module runs alike
        if "forward" in m.__dict__ or getattr(m, "dap", None) is not None:
            return None
        if m is not module and (m._forward_hooks or m._forward_pre_hooks):
            return None
        for k, v in m.__dict__.items():
            if k.startswith("_"):
                continue
            if isinstance(v, Tensor):  # state the key cannot hold
                return None
            if v in same.get(k, ()):
                v = same[k][0]
            try:
                v = _plain(v)
            except Unkeyable:
                try:
                    hash(v)
                except TypeError:
                    v = ("id", type(v).__name__, id(v))
            items.append((name, k, v))
    return tuple(items)


def _context(tracker) -> tuple:
    return (
        torch.is_inference_mode_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        chunking.estimating(),
        getattr(chunking._state, "chains", None),  # the traced complex's chain count (heads read it)
        offload._tracker() is tracker,
    )


def _arg_key(leaves: list, tracker) -> tuple:
    first: dict[int, int] = {}
    key = []
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor):
            if x.layout != torch.strided or x.requires_grad:
                raise Unkeyable("tensor")
            st = x.untyped_storage()
            sid = id(st)
            ref = tracker._refs.get(sid)
            counted = ref is not None and ref() is st
            key.append(
                (
                    tuple(x.shape),
                    x.stride(),
                    x.storage_offset(),
                    x.dtype,
                    st.nbytes(),
                    counted,
                    sid in tracker._parked,
                    first.setdefault(sid, i),
                )
            )
        else:
            key.append(("v", _plain(x)))
    return tuple(key)


def _finish(frame: Frame, tracker, arg_leaves: list, out) -> Optional[Recording]:
    """The recording of a call that returned ``out``, or ``None`` when its effect is more than the
    recording can replay (module docstring)."""
    if frame.dirty or tracker.host != frame.host0 or (tracker._parked - frame.new) != (frame.parked0 - frame.new):
        return None
    leaves, spec = tree_flatten(out)
    arg_storage = {}
    for j, a in enumerate(arg_leaves):
        if isinstance(a, Tensor):
            arg_storage.setdefault(id(a.untyped_storage()), j)
    storages: dict[int, int] = {}
    sizes: list = []
    desc = []
    for leaf in leaves:
        if not isinstance(leaf, Tensor):
            try:
                desc.append(("value", _plain(leaf) if not isinstance(leaf, (tuple, list)) else leaf))
            except Unkeyable:
                return None
            continue
        same = next((j for j, a in enumerate(arg_leaves) if a is leaf), None)
        if same is not None:
            desc.append(("same", same))
            continue
        if leaf.layout != torch.strided or leaf.requires_grad:
            return None
        st = leaf.untyped_storage()
        sid = id(st)
        geometry = (tuple(leaf.shape), leaf.stride(), leaf.storage_offset())
        if sid in frame.new and sid in tracker._refs and sid not in tracker._parked:
            if sid not in storages:
                if st.nbytes() % leaf.element_size():
                    return None
                storages[sid] = len(sizes)
                sizes.append((st.nbytes(), leaf.dtype))
            if sizes[storages[sid]][1] != leaf.dtype:
                return None
            desc.append(("new", storages[sid], *geometry))
        elif sid in arg_storage and arg_leaves[arg_storage[sid]].dtype == leaf.dtype:
            desc.append(("arg", arg_storage[sid], *geometry))
        else:
            return None
    alive_new = {k for k in frame.new if k in tracker._refs}
    if alive_new != set(storages) or tracker.live - frame.live0 != sum(n for n, _ in sizes):
        return None
    return Recording(tuple(frame.steps), frame.top, frame.host_top, frame.ops, tuple(sizes), tuple(desc), spec)


def _replay(rec: Recording, tracker, arg_leaves: list):
    live0, host0 = tracker.live, tracker.host
    tracker.replay_steps(live0, rec.steps, rec.top, rec.ops)
    if rec.host_top:
        tracker.host_peak = max(tracker.host_peak, host0 + rec.host_top)
        for f in tracker.frames:
            f.host_top = max(f.host_top, host0 + rec.host_top - f.host0)
    device = next((a.device for a in arg_leaves if isinstance(a, Tensor)), torch.device("cpu"))
    bases = [torch.empty((n // d.itemsize,), dtype=d, device=device) for n, d in rec.storages]
    leaves = []
    for d in rec.leaves:
        if d[0] == "value":
            leaves.append(d[1])
        elif d[0] == "same":
            leaves.append(arg_leaves[d[1]])
        else:
            base = bases[d[1]] if d[0] == "new" else arg_leaves[d[1]]
            leaves.append(base.as_strided(d[2], d[3], d[4]))
    return tree_unflatten(leaves, rec.spec)


class _Replayed:
    """The instance ``forward`` :func:`install` gives a module for one trace."""

    def __init__(self, module: nn.Module, tracker, state: tuple):
        self.forward = type(module).forward.__get__(module)
        self.module, self.tracker, self.state = module, tracker, state

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tracker = self.tracker
        if torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        arg_leaves, _ = tree_flatten((args, kwargs))
        try:
            key = (self.state, _context(tracker), _arg_key(arg_leaves, tracker))
        except Unkeyable:
            return self.forward(*args, **kwargs)
        if key in _small:
            return self.forward(*args, **kwargs)
        rec = _memo.get(key)
        if rec is not None:
            return _replay(rec, tracker, arg_leaves)
        storages = {id(a.untyped_storage()) for a in arg_leaves if isinstance(a, Tensor)}
        frame = Frame(tracker.live, tracker.host, frozenset(tracker._parked), storages)
        tracker.frames.append(frame)
        try:
            out = self.forward(*args, **kwargs)
        finally:
            del tracker.frames[next(i for i, f in enumerate(tracker.frames) if f is frame)]
        if frame.ops < MIN_OPS:
            _small.add(key)
        else:
            rec = _finish(frame, tracker, arg_leaves, out)
            if rec is not None:
                if len(_memo) >= _MEMO_SIZE:
                    _memo.clear()
                    _small.clear()
                _memo[key] = rec
        return out


@contextlib.contextmanager
def install(model: nn.Module, tracker) -> Iterator[None]:
    """Inside the ``with`` block, every eligible module of ``model`` below the root is replayed when a
    call recurs (module docstring); nothing is installed when :data:`ENABLED` is false or
    ``tracker`` does not record (not a :class:`~.trace.PlanTracker`)."""
    wrapped = []
    if ENABLED and hasattr(tracker, "frames"):  # a tracker that records (PlanTracker)
        for m in model.modules():
            if m is model:
                continue
            state = fingerprint(m)
            if state is not None:
                wrapped.append(m)
                number = _states.setdefault((id(m), type(m).__qualname__, state), len(_states))
                m.__dict__["forward"] = _Replayed(m, tracker, number)
    try:
        yield
    finally:
        for m in wrapped:
            m.__dict__.pop("forward", None)


def forget() -> None:
    """Drop every recording."""
    _memo.clear()
    _small.clear()
    _states.clear()


__all__ = ["ENABLED", "Frame", "Recording", "fingerprint", "forget", "install"]
