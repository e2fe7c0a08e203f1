"""Can the Triton kernels run here? One check, used by the dispatch in :mod:`kernels`.

Triton kernels run either compiled on a CUDA device, or in Triton's CPU interpreter when the
environment variable ``TRITON_INTERPRET=1`` is set before the kernel modules are imported
(``@triton.jit`` picks the interpreter at decoration time). Importing this module never imports
Triton and never probes a device; the check runs only when a Triton kernel is requested.
"""

from __future__ import annotations

from typing import Optional

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
