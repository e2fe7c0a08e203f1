"""Published weights fetched, verified and unpacked: :func:`fetch_weights`, which ``alphafold-mem weights
fetch {af2,af2-ptm,af2-multimer,openfold} --dir DIR`` wraps, and :data:`RELEASES`, the table of what each name fetches.

One fetch:

1. downloads every file of the release into ``DIR/.downloads/`` (``<file>.part`` while it grows); an
   interrupted download resumes where it stopped (HTTP ``Range`` requests), within the run after a dropped
   connection and across runs from the ``.part`` left behind; a progress bar goes to stderr;
2. computes the file's SHA-256 and compares it with the value pinned by ``--sha256`` or shipped in
   :data:`RELEASES`; a mismatch removes the file and stops with one line, before anything is unpacked. Where the
   publisher gives no checksum (none of the releases below has one that can be cited, see their ``source``), the
   value is printed so it can be pinned with ``--sha256`` on the next machine;
3. unpacks the release's files (AF2: the ``params_model_*.npz`` of the chosen set and ``LICENSE``) into a
   temporary directory inside ``DIR`` and renames it to ``DIR/<name>/`` only when complete, with a
   ``FETCHED.json`` (URLs, sizes, SHA-256 values): nothing half-extracted ever sits under the final name.

Failures (offline, HTTP errors, a checksum mismatch, a damaged archive, a full disk) raise :class:`FetchError`
with one line naming the file and what to do.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import http.client
import json
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Optional

from tqdm import tqdm

from ..version import __version__

__all__ = ["FetchError", "FetchResult", "Release", "RemoteFile", "RELEASES", "fetch_weights", "download"]

USER_AGENT = f"alphafold-mem/{__version__} (weights fetch)"
CHUNK = 1 << 20  # bytes per read and write
MANIFEST = "FETCHED.json"


class FetchError(RuntimeError):
    """A fetch that cannot finish: one line naming the file or URL and what to do."""


@dataclass(frozen=True)
class RemoteFile:
    """One published file: its ``name`` (also the last part of its URL), ``size`` in bytes and ``sha256`` (hex),
    each ``None`` where the publisher gives none."""

    name: str
    size: Optional[int] = None
    sha256: Optional[str] = None


@dataclass(frozen=True)
class Release:
    """What ``weights fetch <name>`` downloads.

    Attributes:
        name: the command's argument; also the folder the files end in (``DIR/<name>/``).
        base_url: the files' URLs are ``base_url + file.name``.
        files: the :class:`RemoteFile` downloads.
        members: for a tar archive, the ``fnmatch`` patterns of the member file names unpacked (flat, by
            base name); ``()`` for files used as downloaded.
        source: where the URL (and, were there one, the checksum) is published.
    """

    name: str
    base_url: str
    files: tuple
    members: tuple = ()
    source: str = ""
    description: str = ""


_AF2_TAR = RemoteFile("alphafold_params_2022-12-06.tar")  # size and SHA-256 not published
_AF2_SOURCE = (
    "URL from DeepMind's scripts/download_alphafold_params.sh and README (github.com/google-deepmind/alphafold); "
    "no size or SHA-256 is published for the archive: the computed value is printed, pin it with --sha256"
)


def _af2_release(name: str, suffix: str) -> Release:
    """The AF2 models 1-5 whose file names end in ``suffix`` (``""``, ``"_ptm"`` or AF2-Multimer's
    ``"_multimer_v3"``), unpacked from the one parameter archive."""
    files = f"params_model_{{1..5}}{suffix}.npz"
    kind = {"": "monomer ", "_ptm": "monomer pTM ", "_multimer_v3": "Multimer v3 "}[suffix]
    return Release(
        name,
        "https://storage.googleapis.com/alphafold/",
        (_AF2_TAR,),
        members=(f"params_model_[1-5]{suffix}.npz", "LICENSE"),
        source=_AF2_SOURCE,
        description=f"AlphaFold2 {kind}models 1-5 ({files}, CC BY 4.0)",
    )


_OPENFOLD_FILES = (
    "finetuning_1.pt",
    "finetuning_2.pt",
    "finetuning_3.pt",
    "finetuning_4.pt",
    "finetuning_5.pt",
    "finetuning_ptm_1.pt",
    "finetuning_ptm_2.pt",
    "finetuning_no_templ_1.pt",
    "finetuning_no_templ_2.pt",
    "finetuning_no_templ_ptm_1.pt",
    "initial_training.pt",
)

RELEASES = {
    "af2": _af2_release("af2", ""),
    "af2-ptm": _af2_release("af2-ptm", "_ptm"),
    "af2-multimer": _af2_release("af2-multimer", "_multimer_v3"),
    "openfold": Release(
        "openfold",
        "https://huggingface.co/nz/OpenFold/resolve/main/",
        tuple(RemoteFile(n) for n in _OPENFOLD_FILES),
        source=(
            "OpenFold parameters v. 06_22, mirrored on Hugging Face (nz/OpenFold) as named by OpenFold's "
            "scripts/download_openfold_params_huggingface.sh (github.com/aqlaboratory/openfold); no checksums "
            "are published: the computed values are printed and recorded in FETCHED.json"
        ),
        description="OpenFold checkpoints (finetuning_*.pt, *_ptm_*.pt, initial_training.pt; CC BY 4.0)",
    ),
}


@dataclass
class FetchResult:
    """``path``: the release's folder; ``files``: the paths in it; ``sha256``: per downloaded file name;
    ``reused``: True when the folder was complete already and nothing was downloaded."""

    path: str
    files: list = field(default_factory=list)
    sha256: dict = field(default_factory=dict)
    reused: bool = False


def fetch_weights(
    name: str,
    directory,
    *,
    url: Optional[str] = None,
    sha256: Optional[str] = None,
    force: bool = False,
    keep_archive: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
    timeout: float = 60.0,
    retries: int = 5,
    retry_wait: float = 2.0,
) -> FetchResult:
    """Download, verify and unpack release ``name`` of :data:`RELEASES` into ``directory/<name>/``.

    Args:
        name: ``af2``, ``af2-ptm``, ``af2-multimer`` or ``openfold``.
        directory: where the release folder goes (created if needed); downloads wait in ``.downloads/`` there.
        url: a mirror: a base URL ending in ``/`` (file names appended) or, for a one-file release, the file's URL.
        sha256: the expected SHA-256 (hex) of a one-file release; overrides the shipped value.
        force: download and unpack again even when ``directory/<name>/`` is complete.
        keep_archive: keep the verified archive in ``.downloads/`` (the ``af2*`` releases share it).
        progress: tqdm bars on stderr.
        log: receives one line per step.
        timeout: seconds a connection may stay silent; retries: dropped connections resumed in a row without
            progress before giving up; retry_wait: seconds before a resume.

    Returns:
        :class:`FetchResult`.

    Raises:
        FetchError: unknown name, offline, HTTP error, checksum mismatch, damaged archive, disk full (one line).
    """
    release = RELEASES.get(name)
    if release is None:
        raise FetchError(f"unknown weights {name!r}; choose one of {', '.join(RELEASES)}")
    if sha256 is not None and len(release.files) != 1:
        raise FetchError(f"--sha256 pins a one-file release; {name} has {len(release.files)} files")
    if sha256 is not None and not _is_hex256(sha256):
        raise FetchError(f"--sha256 {sha256!r}: expected 64 hexadecimal digits")
    directory = os.path.abspath(os.fspath(directory))
    final = os.path.join(directory, release.name)
    if os.path.isfile(os.path.join(final, MANIFEST)) and not force:
        files = sorted(os.path.join(final, f) for f in os.listdir(final) if f != MANIFEST)
        log(f"weights: {final} is complete already ({len(files)} files; --force fetches again)")
        return FetchResult(final, files, reused=True)
    downloads = os.path.join(directory, ".downloads")
    try:
        os.makedirs(downloads, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"{directory}: cannot create the weights directory ({exc.strerror or exc})") from None
    record = {"release": release.name, "source": release.source, "files": []}
    digests, local = {}, []
    for remote in release.files:
        file_url = _file_url(release, remote, url)
        path = os.path.join(downloads, remote.name)
        expected = (sha256 or remote.sha256 or "").lower() or None
        if not os.path.isfile(path):
            download(file_url, path, size=remote.size, progress=progress, log=log, timeout=timeout,
                     retries=retries, retry_wait=retry_wait)  # fmt: skip
        digest = file_sha256(path)
        if expected is not None and digest != expected:
            os.remove(path)
            raise FetchError(
                f"{file_url}: SHA-256 {digest} does not match the expected {expected}; the download was removed and "
                "nothing was unpacked (rerun to download again; with --url, check the mirror)"
            )
        if expected is None:
            log(f"weights: sha256 {digest}  {remote.name} (no published checksum to compare; pin it with --sha256)")
        else:
            log(f"weights: {remote.name}: SHA-256 verified")
        digests[remote.name] = digest
        size = os.path.getsize(path)
        record["files"].append({"name": remote.name, "url": file_url, "bytes": size, "sha256": digest})
        local.append(path)
    files = _install(release, local, directory, final, record, keep_archive)
    log(f"weights: {release.name}: {len(files)} files in {final}")
    return FetchResult(final, files, digests)


def _is_hex256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


def _file_url(release: Release, remote: RemoteFile, url: Optional[str]) -> str:
    if url is None:
        return release.base_url + remote.name
    if url.endswith("/"):
        return url + remote.name
    if len(release.files) == 1:
        return url
    return url + "/" + remote.name


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _disk_full(path: str, exc: OSError, note: str) -> FetchError:
    return FetchError(f"{path}: no space left on device ({exc.strerror or exc}); {note}")


def download(
    url: str,
    path: str,
    *,
    size: Optional[int] = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    timeout: float = 60.0,
    retries: int = 5,
    retry_wait: float = 2.0,
) -> None:
    """Download ``url`` to ``path`` through ``path + '.part'``, resuming an existing ``.part`` and every dropped
    connection with a ``Range`` request; ``path`` appears only when the download is complete (the size the server
    announced, or ``size``).

    Raises:
        FetchError: the host cannot be reached, an HTTP error, ``retries`` drops in a row without progress, or the
            disk is full (the ``.part`` is kept: a rerun resumes).
    """
    part = path + ".part"
    name = os.path.basename(path)
    stalled = 0
    while True:
        have = os.path.getsize(part) if os.path.exists(part) else 0
        headers = {"User-Agent": USER_AGENT}
        if have:
            headers["Range"] = f"bytes={have}-"
        start = have
        try:
            response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have and (size is None or have == size):
                os.replace(part, path)  # the .part was complete: the server has no byte after it
                return
            if exc.code == 416:
                os.remove(part)
                continue
            raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}; check the URL or use --url MIRROR") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            host = urllib.parse.urlsplit(url).netloc
            kept = f"; {have} bytes kept in {part}, a rerun resumes" if have else ""
            raise FetchError(
                f"{url}: cannot reach {host} ({reason}); check the network (offline?) or use --url MIRROR{kept}"
            ) from None
        with response:
            total = _total_size(response, have)
            if have and response.status == 206 and _range_start(response) != have:  # not the bytes asked for
                os.remove(part)
                continue
            if have and response.status != 206:  # the server ignored the range: the whole file comes again
                have = start = 0
            try:
                fh = open(part, "ab" if have else "wb")
            except OSError as exc:
                raise FetchError(f"{part}: cannot write ({exc.strerror or exc})") from None
            bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=name,
                       file=sys.stderr, disable=not progress, leave=False)  # fmt: skip
            dropped = None
            try:
                with fh, bar:
                    while True:
                        try:
                            chunk = response.read(CHUNK)
                        except (http.client.IncompleteRead, ConnectionError, socket.timeout, OSError) as exc:
                            dropped = exc
                            break
                        if not chunk:
                            break
                        fh.write(chunk)
                        bar.update(len(chunk))
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise _disk_full(part, exc, "free space and rerun: the download resumes") from None
                raise FetchError(f"{part}: cannot write ({exc.strerror or exc})") from None
        got = os.path.getsize(part)
        expected_total = total if total is not None else size
        if dropped is None and (expected_total is None or got == expected_total):
            os.replace(part, path)
            return
        if dropped is None and expected_total is not None and got > expected_total:
            os.remove(part)
            raise FetchError(f"{url}: the server sent {got} bytes, more than the {expected_total} announced; rerun")
        stalled = 0 if got > start else stalled + 1
        if stalled >= retries:
            raise FetchError(
                f"{url}: the connection dropped {retries} times without progress at byte {got}"
                + (f" of {expected_total}" if expected_total else "")
                + f"; rerun later to resume from {part}"
            )
        log(f"weights: {name}: connection dropped at byte {got}; resuming")
        time.sleep(retry_wait)


def _range_start(response) -> Optional[int]:
    """The first byte of a 206 reply's ``Content-Range: bytes A-B/N`` (None when absent)."""
    value = (response.headers.get("Content-Range") or "").replace("bytes", "").strip()
    head = value.split("-", 1)[0].strip()
    return int(head) if head.isdigit() else None


def _total_size(response, have: int) -> Optional[int]:
    content_range = response.headers.get("Content-Range")
    if response.status == 206 and content_range and "/" in content_range:
        tail = content_range.rsplit("/", 1)[1].strip()
        if tail.isdigit():
            return int(tail)
    length = response.headers.get("Content-Length")
    if length and length.isdigit():
        return int(length) + (have if response.status == 206 else 0)
    return None


def _install(release: Release, local: list, directory: str, final: str, record: dict, keep: bool) -> list:
    """Unpack (or move) the verified downloads into a temporary folder inside ``directory``, then rename it to
    ``final``; on any error the temporary folder is removed and ``final`` is untouched."""
    tmp = tempfile.mkdtemp(prefix=f".{release.name}.", suffix=".partial", dir=directory)
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # the usual folder mode, not mkdtemp's 0700
        if release.members:
            for archive in local:
                _extract(archive, release.members, tmp)
        else:
            for path in local:
                shutil.copyfile(path, os.path.join(tmp, os.path.basename(path)))
        record["unpacked"] = sorted(os.listdir(tmp))
        with open(os.path.join(tmp, MANIFEST), "w") as fh:
            json.dump(record, fh, indent=1)
        if os.path.exists(final):  # --force: the old folder goes only once the new one is complete
            old = tempfile.mkdtemp(prefix=f".{release.name}.", suffix=".old", dir=directory)
            os.replace(final, os.path.join(old, "x"))
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(
                directory, exc, "nothing was unpacked; free space and rerun (the download is kept)"
            ) from None
        raise FetchError(f"{directory}: cannot unpack ({exc.strerror or exc}); nothing was unpacked") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not keep:
        for path in local:
            os.remove(path)
    return sorted(os.path.join(final, f) for f in record["unpacked"])


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _extract(archive: str, patterns: tuple, into: str) -> None:
    """Copy the regular members of tar ``archive`` whose base names match ``patterns`` into ``into`` (flat)."""
    try:
        with tarfile.open(archive, "r:" if archive.endswith(".tar") else "r:*") as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile() and any(fnmatch.fnmatch(os.path.basename(m.name), p) for p in patterns)
            ]
            weights = [m for m in members if os.path.basename(m.name) != "LICENSE"]
            if not weights:
                raise FetchError(
                    f"{archive}: no file matching {', '.join(patterns)} in the archive; is --url the right archive?"
                )
            for m in members:
                src = tar.extractfile(m)
                with src, open(os.path.join(into, os.path.basename(m.name)), "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
    except (tarfile.TarError, EOFError) as exc:
        os.remove(archive)  # a rerun downloads it again
        reason = " ".join(str(exc).split())
        raise FetchError(
            f"{archive}: not a readable tar archive ({reason}); the download was removed and nothing was unpacked "
            "(rerun to download again; with --url, check the mirror)"
        ) from None
