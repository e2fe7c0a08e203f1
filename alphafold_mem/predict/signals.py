"""SIGINT and SIGTERM for a prediction run, handled at the top level.

:func:`handle_signals` (entered by the command line around a whole run) replaces Python's default
``KeyboardInterrupt`` with :class:`Interrupted`, raised in the main thread, and also records the
signal: Python delivers a signal between any two bytecodes, also inside a weakref callback or a
``__del__``, where an exception is printed and dropped. The recorded signal is raised again at the
next :func:`check` (between stages, at every Evoformer block, after each target, before the run
returns), so a signal is never lost.

:func:`deferred` marks a section that must finish once begun (renaming one target's output files
into place): a signal arriving inside it is raised when it ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Optional

__all__ = ["Interrupted", "check", "deferred", "handle_signals"]

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run was ended by a signal (a :class:`BaseException`, like ``KeyboardInterrupt``, so that the
    per-target ``except Exception`` does not hold it); ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    pending: Optional[int] = None
    depth = 0  # nesting of deferred sections


_STATE = _State()


def _handler(signum: int, frame) -> None:
    if _STATE.pending is None:
        _STATE.pending = signum
    if _STATE.depth == 0:
        raise Interrupted(signum)


def check() -> None:
    """Raise :class:`Interrupted` if a signal arrived (also one whose exception Python dropped)."""
    if _STATE.pending is not None and _STATE.depth == 0:
        raise Interrupted(_STATE.pending)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A section a signal does not cut: one arriving inside is raised when the section ends."""
    _STATE.depth += 1
    try:
        yield
    finally:
        _STATE.depth -= 1
    check()


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as :class:`Interrupted` inside the block (main thread only; elsewhere
    the block runs with the handlers as they are); the previous handlers are restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in HANDLED}
    _STATE.pending, _STATE.depth = None, 0
    for s in HANDLED:
        signal.signal(s, _handler)
    try:
        yield
        check()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _STATE.pending = None
