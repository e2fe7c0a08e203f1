"""Progress of one target's forward: recycles and Evoformer blocks, on stderr, for targets that take
more than a few seconds; every block is also a point where a pending signal ends the run
(:func:`alphafold_mem.predict.signals.check`)."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, Optional, TextIO

import torch.nn as nn

from . import signals

__all__ = ["ForwardProgress"]


class ForwardProgress:
    """Forward hooks on the Evoformer stack and its blocks of ``model`` (an
    :class:`alphafold_mem.model.AlphaFold`) that report ``<name>: recycle i/N, block j/B, S s``.

    On a terminal (``stream``, default stderr): one line updating in place from ``after`` seconds of
    the forward on. Elsewhere (a log file, a test's captured output): one line every ``every``
    seconds, from ``every`` seconds on.
    """

    def __init__(
        self,
        model: nn.Module,
        name: str,
        after: float = 5.0,
        every: float = 60.0,
        stream: Optional[TextIO] = None,
    ):
        self.model, self.name, self.after, self.every = model, name, after, every
        self.stream = stream
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
        try:
            yield self
        finally:
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

    def line(self) -> str:
        return (
            f"progress: {self.name}: iteration {self.recycle}/{self.total_recycles} (1 + recycles), "
            f"Evoformer block {self.block}/{self.total_blocks}, {time.monotonic() - self.start:.0f} s"
        )

    def _show(self) -> None:
        now = time.monotonic()
        if self._tty:
            if now - self.start < self.after:
                return
            if now - self.shown >= 0.5:
                print("\r" + self.line(), end="", file=self._out, flush=True)
                self.shown = now
        elif now - max(self.shown, self.start) >= self.every:
            print(self.line(), file=self._out, flush=True)
            self.shown = now
