"""Estimates kept: in this process, and on disk across processes, so that a shape planned once is
not traced again (predict's pre-flight of a target length already seen, ``memory-plan`` asked
again, the test suite's repeated sizes).

An entry is keyed by everything the trace reads: the whole model config (every field of the
:class:`~alphafold_mem.config.ModelConfig` dict, so a field added later counts too), the whole
:class:`~alphafold_mem.memory.policy.MemoryPolicy`, the sizes, training or inference, dtype, device
kind, DAP group size and the estimator's switches, and the code version (:func:`code_version`:
alphafold_mem's version, a digest of its source files and of its kernels', torch's version). A
change of any of them is another key: the old entry is never read again.

Where: the folder named by ``ALPHAFOLD_MEM_PLAN_CACHE`` (``off``, ``0`` or empty: nothing on disk),
else ``$XDG_CACHE_HOME/alphafold_mem/plans``, else ``~/.cache/alphafold_mem/plans``. One small JSON
file an entry, written whole (a temporary file renamed), so concurrent processes may share a folder;
a file that cannot be read or written is ignored (the estimate is traced as without a cache).

What is kept: exact estimates, and lower bounds from traces stopped past a limit
(:attr:`~alphafold_mem.planner.estimate.PeakEstimate.lower_bound`), which answer a later question
with a limit below them; an exact estimate answers every question.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

import torch

from ..version import __version__

#: Environment variable naming the cache folder (``off``, ``0`` or empty: no disk cache).
CACHE_ENV = "ALPHAFOLD_MEM_PLAN_CACHE"
_OFF = ("", "0", "off", "none", "false")

#: In-process entries: exact estimates and lower bounds, by key (the arguments of the trace).
_exact: dict[tuple, object] = {}
_bounds: dict[tuple, object] = {}
_MEMO_SIZE = 4096


def cache_dir() -> Optional[Path]:
    """The folder of the disk cache (module docstring), ``None`` when it is switched off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "alphafold_mem" / "plans"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``"<alphafold_mem version>+<digest>"``: the digest covers the source files of alphafold_mem and
    of its kernels package (an edited checkout plans afresh) and torch's version (the fake tensors'
    decompositions are torch's)."""
    # on demand: the kernels package (and its Triton support) loads only when a plan hashes its sources
    from .. import kernels

    digest = hashlib.sha256(torch.__version__.encode())
    roots = sorted({Path(__file__).resolve().parents[1], Path(kernels.__file__).resolve().parent})
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:20]}"


@functools.lru_cache(maxsize=256)
def _as_dict(x) -> dict:
    return dataclasses.asdict(x)


def _key_text(kind: str, key: tuple) -> str:
    """The key as canonical JSON: dataclasses (config, policy) as dicts, dtypes and others as text."""

    def plain(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return _as_dict(x)
        return x

    body = {"kind": kind, "version": code_version(), "key": [plain(x) for x in key]}
    return json.dumps(body, sort_keys=True, default=str)


def _path(kind: str, key: tuple) -> Optional[Path]:
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"{hashlib.sha256(_key_text(kind, key).encode()).hexdigest()}.json"


def load(kind: str, key: tuple) -> Optional[dict]:
    """The stored value of ``key`` (a JSON object), or ``None`` (absent, unreadable, cache off)."""
    path = _path(kind, key)
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def store(kind: str, key: tuple, value: dict) -> None:
    """Write ``value`` (a JSON object) for ``key``, replacing any entry; failures are ignored."""
    path = _path(kind, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass


def cached_estimate(key: tuple, limit: Optional[int], trace: Callable, make: Callable[[dict], object]):
    """The estimate of ``key`` (``trace(*key, limit=limit)``, a
    :class:`~alphafold_mem.planner.estimate.PeakEstimate`) from the in-process entries, else the disk,
    else traced and kept. With ``limit``: an exact estimate when one is known, else a lower bound above
    ``limit`` when one is known, else what the trace returns. ``make``: a ``PeakEstimate`` from its
    stored fields."""
    if key in _exact:
        return _exact[key]
    bound = _bounds.get(key)
    if bound is None or limit is None or bound.total <= limit:
        stored = load("estimate", key) or {}
        if stored.get("exact") is not None:
            return _remember(key, make(stored["exact"]))
        if stored.get("bound") is not None:
            disk = make(stored["bound"])
            bound = disk if bound is None or disk.total > bound.total else bound
            _bounds[key] = bound
    if limit is not None and bound is not None and bound.total > limit:
        return bound
    est = trace(*key, limit=limit)
    _remember(key, est)
    which = "bound" if est.lower_bound else "exact"
    store("estimate", key, {which: dataclasses.asdict(est)})
    return est


def _remember(key: tuple, est):
    if est.lower_bound:
        _bounds[key] = est
    else:
        if len(_exact) >= _MEMO_SIZE:
            _exact.clear()
        _exact[key] = est
        _bounds.pop(key, None)
    return est


def cached_value(kind: str, key: tuple, compute: Callable[[], int]) -> int:
    """An integer kept on disk under ``kind`` and ``key`` (computed and stored when absent)."""
    stored = load(kind, key)
    if stored is not None and isinstance(stored.get("value"), int):
        return stored["value"]
    value = compute()
    store(kind, key, {"value": int(value)})
    return value


def forget() -> None:
    """Drop the in-process entries (the disk keeps its own; switch it off with ``CACHE_ENV``)."""
    _exact.clear()
    _bounds.clear()


__all__ = ["CACHE_ENV", "cache_dir", "cached_estimate", "cached_value", "code_version", "forget", "load", "store"]
