"""Can the Triton kernels run here? One check, used by the dispatch in :mod:`kernels`.

Triton kernels run either compiled on a CUDA device, or in Triton's CPU interpreter when the
environment variable ``TRITON_INTERPRET=1`` is set before the kernel modules are imported
(``@triton.jit`` picks the interpreter at decoration time). Importing this module never imports
Triton and never probes a device; the check runs only when a Triton kernel is requested.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, NamedTuple, Optional

import torch


class KernelUnavailableError(RuntimeError):
    """A requested kernel implementation cannot run here (no Triton, no GPU and no interpreter)."""


def interpreter_enabled() -> bool:
    """True when Triton will run ``@triton.jit`` functions in its CPU interpreter.

    Reads Triton's own knob (``TRITON_INTERPRET``), so it agrees with what ``triton.jit`` decides.
    Requires Triton to be importable.
    """
    import triton  # optional: only called where triton imports

    return bool(triton.knobs.runtime.interpret)


def _interpreter_consistent() -> bool:
    """False when triton.language was imported with the interpreter off (then it cannot interpret)."""
    try:
        # optional: triton, and its internals may move
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction  # optional, as above
    except Exception:  # internals moved: cannot tell, assume fine
        return True
    return isinstance(getattr(tl, "zeros", None), InterpretedFunction)


def triton_unavailable_reason() -> Optional[str]:
    """Why ``impl="triton"`` cannot run here, or ``None`` when it can."""
    try:
        import triton  # noqa: F401 - optional: the check itself
    except Exception as exc:  # ImportError, or a broken install raising anything else
        return f"the 'triton' package cannot be imported ({type(exc).__name__}: {exc})"
    if interpreter_enabled():
        if not _interpreter_consistent():
            return (
                "triton was imported before TRITON_INTERPRET=1 was set, so its language functions "
                "were built for a GPU and cannot be interpreted; set TRITON_INTERPRET=1 before "
                "anything imports triton (e.g. at the top of tests/conftest.py)"
            )
        return None
    if not torch.cuda.is_available():
        return (
            "no CUDA device is visible and Triton's interpreter is off; set TRITON_INTERPRET=1 "
            "before importing triton to run the kernels on CPU (slow, for tests only)"
        )
    return None


def is_fake(*tensors) -> bool:
    """True when every tensor is a FakeTensor (shapes only, as in the memory planner's trace): the
    Triton launchers then allocate what they would allocate and launch nothing."""
    try:
        from torch._subclasses.fake_tensor import FakeTensor  # torch internals: may move
    except ImportError:  # pragma: no cover - torch internals moved
        return False
    return bool(tensors) and all(isinstance(t, FakeTensor) for t in tensors)


def persistent_programs(device, n_tiles: int, per_sm: int = 4) -> int:
    """Number of programs of a persistent kernel (each loops over tiles and keeps fp32 partial sums
    in registers): ``per_sm`` per streaming multiprocessor on CUDA, at most 4 elsewhere (the
    interpreter runs programs one after another), never more than the tiles, at least 1."""
    if getattr(device, "type", str(device)) == "cuda" and torch.cuda.is_available():
        cap = per_sm * torch.cuda.get_device_properties(device).multi_processor_count
    else:
        cap = 4
    return max(1, min(n_tiles, cap))


def require_triton(op: str, *tensors) -> None:
    """Raise :class:`KernelUnavailableError` if the Triton kernel for ``op`` cannot run here.

    For fake tensors (memory planning: nothing is launched) only an importable Triton is required."""
    if is_fake(*tensors):
        try:
            import triton  # noqa: F401

            return
        except Exception as exc:  # noqa: BLE001
            raise KernelUnavailableError(
                f"impl='triton' was requested for {op} but the 'triton' package "
                f"cannot be imported ({type(exc).__name__}: {exc})"
            ) from exc
    reason = triton_unavailable_reason()
    if reason is not None:
        raise KernelUnavailableError(
            f"impl='triton' was requested for {op} but Triton cannot run here: {reason}. "
            f"Use impl='reference' instead (there is no automatic fallback)."
        )


# -- the one launch point, the launch recorder and the target architecture -------------------------

_target_arch: list = []  # stack of architectures set by target_arch()
_recorders: list = []  # stack of (list that launches are appended to, whether they also run)


class Launch(NamedTuple):
    """One kernel launch as a launcher made it: the ``@triton.jit`` kernel, grid, arguments."""

    kernel: Any
    grid: tuple
    args: tuple
    kwargs: dict

    @property
    def name(self) -> str:
        fn = getattr(self.kernel, "fn", self.kernel)
        return getattr(fn, "__name__", repr(fn))


def launch(kernel, grid: tuple, *args, **kwargs) -> None:
    """Launch ``kernel[grid](*args, **kwargs)``: the only place the fused_* launchers launch.

    Inside :func:`recording` the launch is appended to the recorder (and runs only with its
    ``also_run``); for fake tensors (the memory planner's trace) nothing is launched."""
    if _recorders:
        launches, also_run = _recorders[-1]
        launches.append(Launch(kernel, tuple(grid), args, kwargs))
        if not also_run:
            return
    if is_fake(*(a for a in args if isinstance(a, torch.Tensor))):
        return
    kernel[grid](*args, **kwargs)


@contextlib.contextmanager
def recording(also_run: bool = False) -> Iterator[list]:
    """Record the launches made inside the block (a list of :class:`Launch`). Without ``also_run``
    nothing is launched (run the ops on fake tensors, ``FakeTensorMode``, so that nothing else touches
    a device); with it, each recorded launch runs as well (the GPU check compares the two)."""
    launches: list = []
    _recorders.append((launches, also_run))
    try:
        yield launches
    finally:
        _recorders.pop()


@contextlib.contextmanager
def target_arch(arch: Optional[int]) -> Iterator[None]:
    """Make the launchers inside the block pick the launch configuration of compute capability
    ``arch`` (e.g. 80; ``None``: the interpreter's) instead of the one of the device they run on:
    the ahead-of-time compile check and the interpreter tests of every architecture's blocks."""
    _target_arch.append(arch)
    try:
        yield
    finally:
        _target_arch.pop()


def launch_arch(device=None) -> Optional[int]:
    """Compute capability whose launch configuration the launchers use: the one set by
    :func:`target_arch`, else ``None`` under the interpreter, else the CUDA device's."""
    if _target_arch:
        return _target_arch[-1]
    if interpreter_enabled() or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor
