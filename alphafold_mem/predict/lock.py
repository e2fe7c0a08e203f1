"""One prediction run per output directory: an advisory lock (``fcntl.flock``) on ``<out>/.alphafold-mem.lock``.

The holder writes its PID into the lock file; a second run on the same ``--out`` fails at once with
one line naming that PID (it does not wait). The lock is released when the run ends, also when the
process dies (the kernel drops a dead process's locks); the file is removed by its holder. Where
``fcntl`` is missing (Windows) runs are not locked.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from .errors import PredictError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "OutputLocked", "lock_output_dir"]

LOCK_NAME = ".alphafold-mem.lock"


class OutputLocked(PredictError):
    """Another run holds the lock on the output directory (the message names its PID)."""


def _holder(path: str) -> str:
    try:
        with open(path) as fh:
            pid = fh.read().strip()
    except OSError:
        pid = ""
    return f"PID {pid}" if pid.isdigit() else "another process"


@contextlib.contextmanager
def lock_output_dir(out_dir: str) -> Iterator[str]:
    """Hold the lock on ``out_dir`` (created if needed) for the block; yields the lock file's path. A
    directory this call created is removed again when the run leaves nothing in it (a missing input,
    bad options: no empty ``--out`` left behind).

    Raises:
        OutputLocked: another run holds it.
        PredictError: the directory or the lock file cannot be created (one line, the reason).
    """
    path = os.path.join(out_dir, LOCK_NAME)
    created = not os.path.exists(out_dir)
    try:
        if fcntl is None:  # pragma: no cover
            yield path
            return
        with _locked(out_dir, path):
            yield path
    finally:
        if created:
            with contextlib.suppress(OSError):  # not empty (the run wrote), or gone: leave it
                os.rmdir(out_dir)


@contextlib.contextmanager
def _locked(out_dir: str, path: str) -> Iterator[None]:
    while True:
        try:
            os.makedirs(out_dir, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise PredictError(
                f"--out {out_dir}: cannot create the lock file {LOCK_NAME} ({exc.strerror or exc}); "
                "choose another --out"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OutputLocked(
                f"--out {out_dir} is in use by another alphafold-mem predict run ({_holder(path)}); wait for it "
                "to end or choose another --out"
            ) from None
        try:  # the holder before us may have removed the file after we opened it: lock the one in place
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)
