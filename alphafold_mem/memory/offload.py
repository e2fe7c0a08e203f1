"""Host offload: a tensor not needed for a while waits in host memory, and a buffer too large for
the device lives there and is streamed back in blocks.

Two mechanisms:

* :class:`Parked` moves a tensor's *storage* to host memory in place: the device storage is
  resized to zero (freed at once, whoever else holds the tensor or a view of it) and refilled by
  :meth:`Parked.restore`. Callers need not drop references, and views stay valid.
* :func:`to_host` copies a freshly computed block to host memory; :func:`stream` fetches such blocks
  back one after the other (at most two on the device at a time).

On CPU the host *is* the device: everything here is a no-op and :func:`offload_active` is false,
so a CPU run's peak is unchanged by offload. The memory estimator runs on CPU under FakeTensorMode
but predicts an accelerator's peak: inside :func:`simulated_device` the same calls move storages
between the :class:`~alphafold_mem.memory.tracking.StorageTracker`'s device and host counts, as the
copies would move the bytes.

``MemoryPolicy.offload`` says what is moved (:data:`OFFLOAD_LEVELS`); modules read it through the
``offload`` seam.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterable, Iterator, Optional

import torch
from torch import Tensor

from .chunking import thread_setting
from .tracking import StorageTracker

#: ``MemoryPolicy.offload`` values, from none to most.
OFFLOAD_LEVELS = {
    "none": "nothing leaves the device",
    "idle": "representations wait in host memory while unused: the MSA representation during the template and "
    "extra-MSA stacks and during every block's pair updates, the extra-MSA representation during its "
    "pair updates, the pair representation and the template accumulators during the template pair "
    "stack, the recycled state between iterations",
    "buffers": "'idle', and the pair-sized buffer of the in-place triangle multiplication (its second "
    "projection) lives in host memory and is streamed back in row blocks",
}

_sim = threading.local()


@contextlib.contextmanager
def simulated_device(tracker: StorageTracker) -> Iterator[None]:
    """For the estimator: CPU (fake) tensors stand for accelerator tensors, and the functions of
    this module move their bytes between ``tracker``'s device and host counts."""
    with thread_setting(_sim, "tracker", tracker):
        yield


def _tracker() -> Optional[StorageTracker]:
    return getattr(_sim, "tracker", None)


def offload_active(device: torch.device) -> bool:
    """Whether moving a tensor of ``device`` to host memory frees device memory: an accelerator, or
    the estimator's simulated one."""
    return device.type != "cpu" or _tracker() is not None


def _bytes_of(x: Tensor) -> Tensor:
    """A uint8 tensor over the whole storage of ``x``."""
    st = x.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=x.device).set_(st, 0, (st.nbytes(),))


class Parked:
    """``x``'s storage in host memory until :meth:`restore` (on CPU without the simulation: nothing
    moves). While parked, ``x`` and its views must not be used (their storage is empty).

    Args:
        x: the tensor to park (its whole storage is moved, whatever part of it ``x`` views).
        force: move the storage even on CPU (tests exercise the accelerator path this way).
    """

    def __init__(self, x: Tensor, force: bool = False):
        self.tensor = x
        self.host: Optional[Tensor] = None
        if x.device.type != "cpu" or force:
            data = _bytes_of(x)
            self.host = torch.empty(data.shape, dtype=torch.uint8, device="cpu")
            self.host.copy_(data)
            del data
            x.untyped_storage().resize_(0)
        elif _tracker() is not None:
            _tracker().park(x)

    def restore(self) -> Tensor:
        """Refill the storage (a device allocation of its size) and return the tensor."""
        x = self.tensor
        if self.host is not None:
            x.untyped_storage().resize_(self.host.numel())
            _bytes_of(x).copy_(self.host)
            self.host = None
        elif _tracker() is not None:
            _tracker().unpark(x)
        return x


def to_host(x: Tensor) -> Tensor:
    """A host copy of ``x`` (on CPU: ``x`` itself, counted as host memory by the simulation). The
    caller drops its reference to ``x``."""
    if x.device.type != "cpu":
        return x.to("cpu")
    if _tracker() is not None:
        _tracker().park(x)
    return x


def host_bytes(nbytes: int) -> None:
    """For the estimator's loop cut: ``nbytes`` written straight to host memory by blocks that the
    cut does not compute (they never occupy the device at once, so nothing is allocated here);
    negative when they are freed."""
    if _tracker() is not None:
        _tracker().add_host(nbytes)


def stream(blocks: Iterable[Tensor], device: torch.device) -> Iterator[Tensor]:
    """Yield each host block (from :func:`to_host`) on ``device``, one after the other. The previous
    block goes only after the next one is fetched (a caller's loop variable still holds it), so at
    most two blocks are on the device at a time; the caller must keep no other reference."""
    previous = None
    try:
        for block in blocks:
            if device.type != "cpu":
                current = block.to(device)
            else:
                current = block
                if _tracker() is not None:
                    _tracker().unpark(block)
            if previous is not None:
                _dropped(previous)
            previous = current
            yield current
            del current
    finally:
        if previous is not None:
            _dropped(previous)


def _dropped(x: Tensor) -> None:
    """A fetched block goes away: on an accelerator its copy is freed with its last reference; the
    simulation counts the block as host memory again."""
    if x.device.type == "cpu" and _tracker() is not None:
        _tracker().park(x)


__all__ = ["OFFLOAD_LEVELS", "Parked", "host_bytes", "offload_active", "simulated_device", "stream", "to_host"]
