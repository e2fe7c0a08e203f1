"""One predict run under the lock on its ``--out`` and SIGINT/SIGTERM handling: the single-process and
``--dap`` routes of chains (:mod:`.predict`) and complexes (:mod:`.complex_args`) and the ``--devices``
launcher (:mod:`.devices_launch`)."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable

from ..predict import PredictError
from ..predict.lock import lock_output_dir
from ..predict.signals import Interrupted, handle_signals

__all__ = ["locked_run"]


def locked_run(out, lead: bool, body: Callable[[], int], what: str = "targets") -> int:
    """``body()``'s exit status, run with SIGINT/SIGTERM handled and, on the ``lead`` process only (the
    other ranks join its run), the lock on ``out`` held. A :class:`~alphafold_mem.predict.PredictError`
    (the lock: ``out`` in use or not writable) is one ``error:`` line and exit status 2; an interruption
    is one line saying that the finished ``what`` are complete in ``out``, and the signal's exit status."""
    try:
        with handle_signals(), lock_output_dir(out) if lead else contextlib.nullcontext():
            return body()
    except PredictError as exc:
        _log(f"error: {exc}")
        return 2
    except Interrupted as exc:
        _log(f"interrupted ({exc.name}): finished {what} are complete in {out}; run again to continue")
        return exc.exit_code


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
