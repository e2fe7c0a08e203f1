"""Progress of one target's forward: recycles and Evoformer blocks with an ETA, on stderr, for targets
that take more than a few seconds, and at least once a minute however long a block takes (a timer
thread); every block is also a point where a pending signal ends the run
(:func:`alphafold_mem.predict.signals.check`)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Iterator, Optional, TextIO

import torch.nn as nn

from . import signals
from .run_time import format_seconds

__all__ = ["ForwardProgress"]


class ForwardProgress:
    """Forward hooks on the Evoformer stack and its blocks of ``model`` (an
    :class:`alphafold_mem.model.AlphaFold`) that report ``<name>: iteration i/N, block j/B, S s, ETA``.

    On a terminal (``stream``, default stderr): one line updating in place from ``after`` seconds of
    the forward on. Elsewhere (a log file, a test's captured output): one line every ``every``
    seconds, from ``every`` seconds on. A timer thread shows the line every ``every`` seconds also while
    one block runs longer than that (a long chain on a CPU). The ETA: the seconds so far over the
    Evoformer blocks done (all iterations), times the blocks left; before the first block, the
    pre-flight's ``expected_seconds`` (:mod:`.planning`) less the seconds so far, when given.
    """

    def __init__(
        self,
        model: nn.Module,
        name: str,
        after: float = 5.0,
        every: float = 60.0,
        stream: Optional[TextIO] = None,
        expected_seconds: Optional[float] = None,
    ):
        self.model, self.name, self.after, self.every = model, name, after, every
        self.stream = stream
        self.expected_seconds = expected_seconds
        self._lock = threading.Lock()
        self.recycle = 0
        self.block = 0
        self.start = 0.0
        self.shown = 0.0  # when a line was last shown (0: never)

    @contextlib.contextmanager
    def attached(self) -> Iterator["ForwardProgress"]:
        """Hooks in place for the block (one forward, all its recycles)."""
        evoformer = getattr(self.model, "evoformer", None)
        blocks = list(getattr(evoformer, "blocks", ()))
        self.total_recycles = int(getattr(getattr(self.model, "config", None), "num_recycles", 0)) + 1
        self.total_blocks = len(blocks)
        handles = []
        if evoformer is not None:
            handles.append(evoformer.register_forward_pre_hook(self._recycle_started))
        handles += [b.register_forward_hook(self._block_done) for b in blocks]
        self.start, self.recycle, self.block, self.shown = time.monotonic(), 0, 0, 0.0
        stop = threading.Event()
        timer = threading.Thread(target=self._tick, args=(stop,), daemon=True, name=f"progress {self.name}")
        if self.every > 0:
            timer.start()
        try:
            yield self
        finally:
            stop.set()
            if timer.is_alive():
                timer.join()
            for h in handles:
                h.remove()
            if self.shown and self._tty:  # the last state (updates are throttled), then end the line
                print("\r" + self.line(), file=self._out, flush=True)

    @property
    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    @property
    def _tty(self) -> bool:
        return bool(getattr(self._out, "isatty", lambda: False)())

    def _recycle_started(self, module, args) -> None:
        signals.check()
        self.recycle += 1
        self.block = 0
        self._show()

    def _block_done(self, module, args, output) -> None:
        signals.check()
        self.block += 1
        self._show()

    def eta(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds left (module docstring), or ``None`` when nothing says yet."""
        elapsed = (time.monotonic() if now is None else now) - self.start
        done = max(self.recycle - 1, 0) * self.total_blocks + self.block
        total = self.total_recycles * self.total_blocks
        if done > 0 and total > 0:
            return elapsed / done * max(total - done, 0)
        if self.expected_seconds is not None:
            return max(self.expected_seconds - elapsed, 0.0)
        return None

    def line(self) -> str:
        now = time.monotonic()
        eta = self.eta(now)
        return (
            f"progress: {self.name}: iteration {self.recycle}/{self.total_recycles} (1 + recycles), "
            f"Evoformer block {self.block}/{self.total_blocks}, {now - self.start:.0f} s"
            + (f", ETA {format_seconds(eta)}" if eta is not None else "")
        )

    def _tick(self, stop: threading.Event) -> None:
        """The timer thread: a line whenever ``every`` seconds passed without one."""
        while not stop.wait(min(self.every, 1.0)):
            now = time.monotonic()
            if now - max(self.shown, self.start) >= self.every and now - self.start >= self.after:
                self._show(force=True)

    def _show(self, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if self._tty:
                if now - self.start < self.after:
                    return
                if force or now - self.shown >= 0.5:
                    print("\r" + self.line(), end="", file=self._out, flush=True)
                    self.shown = now
            elif force or now - max(self.shown, self.start) >= self.every:
                print(self.line(), file=self._out, flush=True)
                self.shown = now
