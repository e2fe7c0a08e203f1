"""Peak-memory measurement: :func:`track_peak`.

On CUDA the numbers come from the caching allocator (``torch.cuda.max_memory_allocated``): bytes of
live tensor blocks, rounded by the allocator, excluding its cached-but-free memory.

On CPU (and under :class:`torch._subclasses.fake_tensor.FakeTensorMode`, where
:func:`alphafold_mem.planner.estimate_peak` uses the same tracker) a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every ATen op after autograd. What it
counts:

* each tensor *storage* created by an op inside the context, once, with its ``nbytes``, until the
  storage is freed (a weak reference on the storage object fires); outputs that alias an input
  (views, in-place results) add nothing;
* after every op, the running total; the peak is the largest total seen. An op's inputs and its
  output are therefore counted together, as they are alive together.

What it does not count: storages that existed before the context (parameters, inputs — so the CPU
peak is the *activation* peak), allocator rounding and caching, and scratch memory internal to a
single kernel (e.g. a BLAS workspace). Composite ops are seen decomposed, so their intermediate
tensors are counted. Backward runs under the mode too (gradients and recomputed activations count).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _strided_tensors(x, out: list) -> list:
    """The strided tensors in ``x``, an op's arguments or results (tensors, scalars and lists, tuples
    and dicts of them): what ``torch.utils._pytree.tree_flatten`` gives, without its per-call cost."""
    if isinstance(x, torch.Tensor):
        if x.layout == torch.strided:
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _strided_tensors(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _strided_tensors(y, out)
    return out


@dataclasses.dataclass
class PeakMemory:
    """What :func:`track_peak` reports (bytes). ``peak`` is the peak of memory allocated inside the
    context above what was allocated when it was entered; ``baseline`` is that starting amount (CUDA:
    allocated bytes, parameters and inputs included; CPU: 0, as pre-existing storages are not seen)."""

    peak: int = 0
    baseline: int = 0
    device: str = "cpu"

    @property
    def peak_mib(self) -> float:
        return self.peak / 2**20


class StorageTracker(TorchDispatchMode):
    """Counts live bytes of tensor storages created while active; see the module docstring.

    :meth:`park` / :meth:`unpark` serve the estimator's simulated accelerator
    (:func:`alphafold_mem.memory.offload.simulated_device`): a parked storage stands for one that
    waits in host memory, so its bytes leave the device count (``live``) and enter ``host`` until it
    is unparked (counted again, like a fresh allocation) or freed."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in ``torch._disable_dynamo`` otherwise, which imports
        # torch._dynamo (~2 s CPU) at a process's first tracked op; nothing here is compiled
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.host = 0
        self.host_peak = 0
        self._refs: dict[int, weakref.ref] = {}
        self._parked: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        if self._refs.pop(key, None) is not None:
            if key in self._parked:
                self._parked.discard(key)
                self.host -= nbytes
            else:
                self.live -= nbytes

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = id(st)
        ref = self._refs.get(key)
        if ref is not None and ref() is st:
            return
        nbytes = st.nbytes()
        self._refs[key] = weakref.ref(st, lambda _r, k=key, n=nbytes: self._freed(k, n))
        self.live += nbytes

    def park(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage as host memory until :meth:`unpark` (storages from before the
        context, which are not counted, are ignored)."""
        st = t.untyped_storage()
        key = id(st)
        if key in self._refs and key not in self._parked:
            self._parked.add(key)
            self.live -= st.nbytes()
            self.host += st.nbytes()
            self.host_peak = max(self.host_peak, self.host)

    def add_host(self, nbytes: int) -> None:
        """Count ``nbytes`` more of host memory (a host allocation that never was on the device)."""
        self.host += nbytes
        self.host_peak = max(self.host_peak, self.host)

    def unpark(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage on the device again."""
        st = t.untyped_storage()
        key = id(st)
        if key in self._parked:
            self._parked.discard(key)
            self.live += st.nbytes()
            self.host -= st.nbytes()
            self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {id(t.untyped_storage()) for t in _strided_tensors((args, kwargs), [])}
        for t in _strided_tensors(out, []):
            # views and in-place results alias an input: no new storage (and a view of a tensor made
            # before the context must not be counted as new)
            if id(t.untyped_storage()) not in inputs:
                self._track(t)
        self.peak = max(self.peak, self.live)
        return out


@contextlib.contextmanager
def track_peak(device: Optional[torch.device | str] = None) -> Iterator[PeakMemory]:
    """Measure the peak memory allocated inside the ``with`` block.

    Args:
        device: ``"cuda"`` (or a CUDA device) uses the CUDA allocator's statistics; anything else
            (default: CPU) uses the storage-counting dispatch mode described in the module docstring.

    Yields:
        A :class:`PeakMemory` whose ``peak`` is filled in when the block exits.

    Example::

        with track_peak() as mem:
            model(batch)
        print(mem.peak_mib)
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    result = PeakMemory(device=str(dev))
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        result.baseline = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        try:
            yield result
        finally:
            torch.cuda.synchronize(dev)
            result.peak = torch.cuda.max_memory_allocated(dev) - result.baseline
        return
    tracker = StorageTracker()
    try:
        with tracker:
            yield result
    finally:
        result.peak = tracker.peak


__all__ = ["PeakMemory", "StorageTracker", "track_peak"]
