"""Fake ops served from a recipe: the estimator's tracker (:class:`~.trace.PlanTracker`) runs most of
an inference trace's ops many times over with the same argument metadata (every chunk, every
policy of a table), and each run through :class:`~torch._subclasses.fake_tensor.FakeTensorMode`
costs tens of microseconds even when its own cache answers (the key it builds is the dearer part),
and much more for the ops it does not cache (composite ops, views of tensors made outside
inference mode).

Why a recipe is exact: under fake tensors an op's outputs depend only on the op and the metadata
of its arguments (no values), and on a few switches (inference mode, the default dtype). The key
of a recipe holds all of them: per tensor argument its shape, strides, offset, dtype, device,
storage bytes, ``requires_grad``, inference flag, dispatch keys and which arguments share a
storage; other arguments by type and value. A recipe says, per output tensor, whether it is an
argument itself (in-place ops), a view of an argument's storage, or a new storage, with its
geometry. It is kept only when the outputs it synthesizes were checked against the real ones when
it was made (geometry, storage, dtype, device, ``requires_grad``, inference flag, dispatch keys),
when no argument's metadata changed (no resizing op) and when nothing but fake tensors of this
mode took part (no constants, no real tensors). Recipes serve inference only (no autograd).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

#: switch (tests compare with and without)
ENABLED = True
_FAKE = torch._C._TorchDispatchModeKey.FAKE
_dks = torch._C._dispatch_key_set
MISSING = object()
_recipes: dict[tuple, Any] = {}
_funcs: dict[Any, bool] = {}
_MAX = 200_000
_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


def _eligible(func) -> bool:
    ok = _funcs.get(func)
    if ok is None:
        tags = getattr(func, "tags", ())
        builtin = isinstance(func, torch._ops.OpOverload) and func.namespace in ("aten", "prim", "prims")
        ok = builtin and not any(
            t in tags for t in (torch.Tag.inplace_view, torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)
        )
        _funcs[func] = ok
    return ok


def _value(x, mode, tensors: list, seen: dict):
    if isinstance(x, Tensor):
        if type(x) is not FakeTensor or x.fake_mode is not mode or x.constant is not None:
            raise TypeError
        if x.layout != torch.strided or x.dtype.is_complex:
            raise TypeError
        st = x.untyped_storage()
        tensors.append(x)
        return (
            x.shape,
            x.stride(),
            x.storage_offset(),
            x.dtype,
            x.fake_device,
            st.nbytes(),
            x.requires_grad,
            x.is_inference(),
            _dks(x),
            seen.setdefault(id(st), len(tensors) - 1),
        )
    if isinstance(x, (tuple, list)):
        return (type(x), tuple(_value(y, mode, tensors, seen) for y in x))
    if isinstance(x, _SCALARS):
        return (type(x), x)
    raise TypeError


def key(func, args, kwargs, mode) -> Optional[tuple]:
    """The recipe key of ``func(*args, **kwargs)`` and the argument tensors (in order), or ``None``
    when the call is not served from recipes."""
    if not ENABLED or mode is None or torch.is_grad_enabled() or not _eligible(func):
        return None
    tensors: list = []
    seen: dict = {}
    try:
        k = (
            func,
            torch.is_inference_mode_enabled(),
            torch.get_default_dtype(),
            torch._C._get_default_device(),
            _value(args, mode, tensors, seen),
            tuple((n, _value(v, mode, tensors, seen)) for n, v in kwargs.items()) if kwargs else (),
        )
    except TypeError:
        return None
    return k, tensors


def _geometry(t: Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.fake_device, t.requires_grad, t.is_inference())


def _synth(mode, recipe: tuple, tensors: list):
    """The outputs of ``recipe`` on the argument tensors ``tensors``: as FakeTensorMode makes a cached
    op's outputs (a meta tensor, on the argument's storage for a view, in a FakeTensor), with the fake
    mode unset meanwhile."""
    kind, items = recipe
    if kind == "value":
        return items
    prev = torch._C._unset_dispatch_mode(_FAKE)  # None inside the mode
    in_kernel = mode.in_kernel_invocation
    try:
        outs = []
        for item in items:
            if item[0] == "arg":
                outs.append(tensors[item[1]])
                continue
            shape, stride, offset, dtype, device, requires_grad, inference = item[2]
            with torch._C._DisableTorchDispatch(), torch._C._PreserveDispatchKeyGuard():
                with torch._C._InferenceMode(inference):
                    mode.in_kernel_invocation = True
                    torch._C._set_meta_in_tls_dispatch_include(True)
                    e = torch.empty_strided(shape, stride, dtype=dtype, device="meta", requires_grad=requires_grad)
                    if item[0] == "view":
                        e.set_(tensors[item[1]].untyped_storage(), offset, shape, stride)
                    mode.in_kernel_invocation = in_kernel
            outs.append(FakeTensor(mode, e, device))
    finally:
        mode.in_kernel_invocation = in_kernel
        if prev is not None:
            torch._C._set_dispatch_mode(prev)
    return outs[0] if kind is None else kind(outs)


def serve(func, args, kwargs, mode, call: Callable):
    """``call(func, args, kwargs)`` (the real dispatch), or its outputs synthesized from a recipe of
    ``mode``'s fake tensors; a call not seen before is run and its recipe kept."""
    found = key(func, args, kwargs, mode)
    if found is None:
        return call(func, args, kwargs)
    k, tensors = found
    recipe = _recipes.get(k, MISSING)
    if recipe is None:  # seen, not served
        return call(func, args, kwargs)
    if recipe is not MISSING:
        return _synth(mode, recipe, tensors)
    before = _metadata(tensors)
    out = call(func, args, kwargs)
    if k not in _recipes:  # (a call through the mode below has kept it)
        _record(k, mode, tensors, before, out)
    return out


class PlanFakeMode(FakeTensorMode):
    """The estimator's fake mode: ops dispatched inside it (those of composite ops' decompositions
    included) are served from recipes (module docstring). Switch its own cache off where recipes
    serve (``cache_enabled``): it would only repeat the work."""

    def dispatch(self, func, types, args=(), kwargs=None):
        return serve(func, args, kwargs or {}, self, lambda f, a, k: FakeTensorMode.dispatch(self, f, types, a, k))


def _record(k: tuple, mode, tensors: list, before: list, out) -> None:
    """Keep the recipe of a call with key ``k`` that returned ``out`` (``before``: the argument tensors'
    metadata before the call), or mark the key as not served (module docstring)."""
    if len(_recipes) >= _MAX:
        _recipes.clear()
    _recipes[k] = None
    if _metadata(tensors) != before:
        return  # an argument was resized or restrided
    if isinstance(out, (torch.device, torch.dtype)):
        _recipes[k] = ("value", out)
        return
    if isinstance(out, Tensor):
        kind, outs = None, [out]
    elif type(out) in (tuple, list) and out and all(isinstance(t, Tensor) for t in out):
        kind, outs = type(out), list(out)
    else:
        return
    storages = {}
    for i, t in enumerate(tensors):
        storages.setdefault(id(t.untyped_storage()), i)
    items, fresh = [], set()
    for o in outs:
        if type(o) is not FakeTensor or o.fake_mode is not mode or o.constant is not None or o.layout != torch.strided:
            return
        same = next((i for i, t in enumerate(tensors) if t is o), None)
        if same is not None:
            items.append(("arg", same))
            continue
        st = o.untyped_storage()
        if id(st) in storages:
            items.append(("view", storages[id(st)], _geometry(o)))
        elif id(st) not in fresh and o.storage_offset() == 0:
            fresh.add(id(st))
            items.append(("new", None, _geometry(o)))
        else:
            return
    recipe = (kind, tuple(items))
    try:
        synth = _synth(mode, recipe, tensors)
    except Exception:
        return
    synth = [synth] if kind is None else list(synth)
    for o, s, item in zip(outs, synth, items):
        if item[0] == "arg":
            continue
        if _geometry(s) != _geometry(o) or _dks(s) != _dks(o) or type(s) is not type(o):
            return
        if s.untyped_storage().nbytes() != o.untyped_storage().nbytes():
            return
        if item[0] == "view" and s.untyped_storage() is not o.untyped_storage():
            return
    _recipes[k] = recipe


def _metadata(tensors: list) -> list:
    """The argument tensors' metadata that :func:`record` checks for changes."""
    return [_geometry(t) + (t.untyped_storage().nbytes(),) for t in tensors]


def forget() -> None:
    """Drop every recipe."""
    _recipes.clear()


__all__ = ["ENABLED", "PlanFakeMode", "forget", "key", "serve"]
