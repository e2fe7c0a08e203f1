"""The one chunking helper (AF2 Suppl. 1.11.8).

Chunking trades a loop for memory: an op that is independent along one axis (MSA rows, pair rows,
residue columns) runs on slices of that axis, so its transient (attention logits, the outer
product, the transition's 4x hidden layer) exists for one slice at a time. :func:`chunked` is the
only place in the package that slices and reassembles. Model modules do not call it with dims of
their own: they run a step declared in their ``memory_spec`` through
:func:`alphafold_mem.memory.axes.run_split`, which reads the dims from the declaration and the chunk
size the memory policy bound to the module (``None``: one call on the whole tensors, exactly the
reference computation).

With ``accumulate=True`` each slice's result is added into an existing tensor (``out``) as soon as
it is computed: a residual update in place, without an update-sized buffer (inference only).

The memory estimator runs the model under :func:`first_chunk_only`: every regular loop of the
package (the chunk loop here, the query/key loops of the low-memory attention, the template loop,
the streamed buffers) then runs only its first two iterations (:func:`loop_range`), because every
later iteration repeats the memory profile of the second one.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional, Sequence, Union

import torch
from torch import Tensor

Result = Union[Tensor, tuple[Tensor, ...]]

_state = threading.local()


@contextlib.contextmanager
def first_chunk_only() -> Iterator[None]:
    """For the memory estimator only (under FakeTensorMode, without autograd): every regular loop
    that uses :func:`loop_range` or :func:`estimating` (the chunk loop of :func:`chunked`, the
    query/key loops of :func:`alphafold_mem.kernels.low_memory_attention.low_memory_attention`, the template
    loop, streamed buffers) runs just its first two iterations and leaves the rest of its (fake)
    output unwritten. The second iteration is the first one that runs with every buffer of the
    loop allocated, and every later one repeats its memory profile, so the predicted peak is
    unchanged and the estimate no longer scales with the number of iterations."""
    with thread_setting(_state, "first_only", True):
        yield


@contextlib.contextmanager
def traced_chains(count: Optional[int]) -> Iterator[None]:
    """For the memory estimator only: the number of chains of the complex it traces (under
    FakeTensorMode ``asym_id`` has no values), read by :func:`chain_count`."""
    with thread_setting(_state, "chains", count):
        yield


def chain_count(asym_id: Tensor) -> Optional[int]:
    """The number of chains of ``asym_id`` ``[*, N_res]`` (1, 2, ...; 0 is padding): its largest value,
    or under the estimator the count :func:`traced_chains` gave (``None`` when it gave none: the
    per-chain outputs are then left out of the trace, their bytes are O(N_res x chains))."""
    if getattr(_state, "chains", None) is not None:
        return _state.chains
    if estimating() or isinstance(asym_id, torch._subclasses.fake_tensor.FakeTensor):
        return None
    return int(asym_id.max()) if asym_id.numel() else 0


@contextlib.contextmanager
def thread_setting(namespace: threading.local, name: str, value) -> Iterator[None]:
    """``namespace.name = value`` inside the ``with`` block (this thread), restored after."""
    previous = getattr(namespace, name, None)
    setattr(namespace, name, value)
    try:
        yield
    finally:
        setattr(namespace, name, previous)


def estimating() -> bool:
    """Whether the estimator's loop cut (:func:`first_chunk_only`) is active for the current code:
    inside the context and without autograd (a training estimate runs every iteration). Other
    regular loops (device sharding's blocks and chunks) read it to run only their first two
    iterations, whose memory profile every later one repeats."""
    return getattr(_state, "first_only", False) and not torch.is_grad_enabled()


def loop_range(start: int, stop: int, step: int = 1) -> range:
    """``range(start, stop, step)``, cut to its first two items while :func:`estimating`."""
    r = range(start, stop, step)
    return r[:2] if estimating() else r


def chunked(
    fn: Callable[..., Result],
    args: Sequence,
    dims: Sequence[Optional[int]],
    chunk_size: Optional[int],
    out_dim: int = -3,
    out: Optional[Result] = None,
    accumulate: bool = False,
    collect: bool = False,
) -> Union[Result, list]:
    """Apply ``fn`` to slices of ``args`` along one axis and assemble the results.

    Args:
        fn: ``fn(*slices) -> Tensor`` or a tuple of tensors; it must be independent along the axis.
        args: the arguments of ``fn`` (tensors, or anything else, passed through unchanged). The
            same tensor given twice with the same dim is sliced once: ``fn`` sees one object.
        dims: for each arg, the (negative) dim that carries the chunked axis, or ``None`` to pass the
            arg whole. A tensor whose size along its dim is 1 (a broadcast) is passed whole.
        chunk_size: slice length; ``None``, or a length >= the axis length, calls ``fn(*args)`` once:
            the reference computation, bit for bit.
        out_dim: the (negative) dim of each result that carries the axis.
        out: optional existing result(s) to write into; by default they are allocated from the first
            chunk's result, so no concatenation copy is made.
        accumulate: add each slice's result into ``out`` (which is then required) instead of
            writing it: a residual update in place. A slice of an arg may alias the slice of ``out``
            it produces (it is read before it is written), but no whole arg may alias ``out``.
        collect: return the list of the slices' results, in order, instead of assembling them (e.g.
            blocks of a buffer kept in host memory).

    Returns:
        The result(s) of ``fn`` over the whole axis (``out`` when given). Inside
        :func:`first_chunk_only` (the memory estimator, no autograd) only the first two slices are
        computed and the rest of the output is left unwritten.

    Raises:
        ValueError: ``dims`` and ``args`` differ in length, no tensor arg has a dim named in
            ``dims``, the args disagree on the axis length, ``chunk_size < 1``, or ``accumulate``
            without ``out``.
    """
    if len(dims) != len(args):
        raise ValueError(f"chunked: {len(args)} args but {len(dims)} dims")
    carried = [(a, d) for a, d in zip(args, dims) if d is not None and isinstance(a, Tensor)]
    if not carried:
        raise ValueError("chunked: no tensor argument carries the chunked axis")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if accumulate and out is None:
        raise ValueError("chunked: accumulate=True needs out")
    sizes = {a.shape[d] for a, d in carried if a.shape[d] != 1}
    if len(sizes) > 1:
        raise ValueError(f"chunked: args disagree on the chunked axis length: {sorted(sizes)}")
    n = sizes.pop() if sizes else 1
    if chunk_size is None or chunk_size >= n:
        res = fn(*args)
        if collect:
            return [res]
        if out is None:
            return res
        for o, r in zip(_tuple(out), _tuple(res)):
            o.add_(r) if accumulate else o.copy_(r)
        return out
    collected = []
    for start in loop_range(0, n, chunk_size):
        size = min(chunk_size, n - start)
        views: dict[tuple[int, int], Tensor] = {}  # an arg passed twice (queries and keys) is sliced once
        sliced = [
            views.setdefault((id(a), d), a.narrow(d, start, size))
            if d is not None and isinstance(a, Tensor) and a.shape[d] != 1
            else a
            for a, d in zip(args, dims)
        ]
        res = fn(*sliced)
        if collect:
            collected.append(res)
            continue
        single = isinstance(res, Tensor)
        results = _tuple(res)
        if out is None:
            shapes = [list(r.shape) for r in results]
            for s in shapes:
                s[out_dim] = n
            out = tuple(r.new_empty(s) for r, s in zip(results, shapes))
            out = out[0] if single else out
        for o, r in zip(_tuple(out), results):
            target = o.narrow(out_dim, start, size)
            target.add_(r) if accumulate else target.copy_(r)
        del res, results, sliced
    return collected if collect else out


def _tuple(x: Result) -> tuple[Tensor, ...]:
    return (x,) if isinstance(x, Tensor) else tuple(x)


__all__ = ["Result", "chunked", "estimating", "first_chunk_only", "loop_range"]
