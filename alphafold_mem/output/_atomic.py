"""Write a file atomically: to a temporary name in the same directory, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator


_UMASK: list[int] = []


def _umask() -> int:
    if not _UMASK:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK.append(current)
    return _UMASK[0]


@contextlib.contextmanager
def atomic_path(path) -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
