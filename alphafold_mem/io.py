"""The file helpers every writer of the project shares.

:func:`atomic_write` is the only way the package writes a result file (predictions, scores, plots,
AF2 ``.npz`` exports, weights files, training checkpoints): the data goes to a temporary name in the
same directory, is flushed to disk, and replaces the target with one ``os.replace``. The file at the
target path is therefore either the old one or the complete new one, never a partial write, also
when the process is killed mid-write.

An OS error while writing (no space left, a read-only file system, no permission) leaves the
destination as it was and is raised as :class:`WriteError`, whose text is one line naming the file and
the reason; :func:`os_error_line` gives that line for any ``OSError``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Iterator

import torch

_UMASK: list[int] = []


class WriteError(OSError):
    """An OS error while writing ``filename`` (``errno``/``strerror`` of the cause); ``str()`` is one
    line: ``cannot write <path> (<reason>)``."""

    def __str__(self) -> str:
        return f"cannot write {self.filename} ({self.strerror or 'OS error'})"


def os_error_line(exc: OSError, doing: str = "") -> str:
    """One line for an OS error: what was being done (``doing``, e.g. ``"writing timings.json"``), the
    path and the reason, without the ``[Errno N]`` prefix."""
    if isinstance(exc, WriteError):
        return str(exc)
    reason = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    where = f" {exc.filename}" if exc.filename else ""
    return f"{doing or 'file access'}{':' if where else ''}{where} ({reason})".strip()


def _umask() -> int:
    if not _UMASK:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK.append(current)
    return _UMASK[0]


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path`` for the caller to write; on success it is fsynced and
    replaces ``path``, on error it is removed and ``path`` is untouched.

    Raises:
        WriteError: an OS error creating, writing or renaming the file (``filename`` = ``path``).

    The parent directory is created if needed; the new file gets the usual mode (0666 minus the
    umask), not ``mkstemp``'s 0600.

    Example::

        with atomic_write("out/model.pdb") as tmp:
            with open(tmp, "w") as fh:
                fh.write(text)
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise WriteError(exc.errno, exc.strerror, path) from exc
    try:
        try:
            yield tmp
            os.chmod(tmp, 0o666 & ~_umask())
            _fsync(tmp)
            os.replace(tmp, path)
        except WriteError:
            raise
        except OSError as exc:  # the caller's write to tmp, or the rename: named by the destination
            raise WriteError(exc.errno, exc.strerror, path) from exc
    finally:
        with contextlib.suppress(OSError):
            if os.path.exists(tmp):
                os.remove(tmp)


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj)`` through :func:`atomic_write`: ``path`` holds the old file or the whole new one."""
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        torch.save(obj, fh)


__all__ = ["WriteError", "atomic_save", "atomic_write", "os_error_line"]
