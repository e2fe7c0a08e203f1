"""``alphafold-mem weights fetch`` against a small archive served from 127.0.0.1 (a ``http.server`` thread in the
test; nothing leaves the machine): a full download, a resume after a dropped connection and after an earlier run,
a corrupted archive refused with one line and nothing unpacked, a full disk, no network."""

import dataclasses
import errno
import hashlib
import http.server
import io
import json
import os
import socket
import tarfile
import threading

import pytest

from alphafold_mem.cli import main
from alphafold_mem.weights import fetch
from alphafold_mem.weights.fetch import RELEASES, FetchError, RemoteFile, fetch_weights

TAR_NAME = "alphafold_params_2022-12-06.tar"


def _tar(members: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


MEMBERS = {
    "params_model_1.npz": os.urandom(50_000),
    "params_model_2.npz": os.urandom(40_000),
    "params_model_1_ptm.npz": os.urandom(60_000),
    "params_model_1_multimer_v3.npz": b"m" * 1000,
    "LICENSE": b"CC BY 4.0\n",
}
ARCHIVE = _tar(MEMBERS)
DIGEST = hashlib.sha256(ARCHIVE).hexdigest()


class Server:
    """Serves ``files`` (name -> bytes) with Range support; names in ``drop_once`` lose their connection half-way
    through the body of their first GET. ``requests`` records (path, Range header)."""

    def __init__(self, files):
        self.files = dict(files)
        self.drop_once = set()
        self.ignore_range = False
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 5  # every connection bounded in time

            def log_message(self, *args):
                pass

            def do_GET(self):
                name = self.path.lstrip("/")
                outer.requests.append((name, self.headers.get("Range")))
                data = outer.files.get(name)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                rng = None if outer.ignore_range else self.headers.get("Range")
                if rng:
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if name in outer.drop_once:
                    outer.drop_once.discard(name)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    s = Server({TAR_NAME: ARCHIVE})
    yield s
    s.close()


def _fetch(name, directory, server, **kw):
    lines = []
    kw.setdefault("retry_wait", 0.0)
    kw.setdefault("timeout", 5.0)
    result = fetch_weights(name, directory, url=server.url, progress=False, log=lines.append, **kw)
    return result, lines


def _leftovers(directory):
    return [p for p in os.listdir(directory) if p.endswith(".partial") or p.endswith(".old")]


def test_full_download_unpacks_the_chosen_set(tmp_path, server, capsys):
    code = main(["weights", "fetch", "af2-ptm", "--dir", str(tmp_path), "--url", server.url, "--no-progress"])
    assert code == 0
    folder = tmp_path / "af2-ptm"
    assert capsys.readouterr().out.strip() == str(folder)
    assert sorted(os.listdir(folder)) == ["FETCHED.json", "LICENSE", "params_model_1_ptm.npz"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~mask  # not mkdtemp's 0700
    assert (folder / "params_model_1_ptm.npz").read_bytes() == MEMBERS["params_model_1_ptm.npz"]
    record = json.loads((folder / "FETCHED.json").read_text())
    assert record["files"] == [
        {"name": TAR_NAME, "url": server.url + TAR_NAME, "bytes": len(ARCHIVE), "sha256": DIGEST}
    ]
    assert not os.listdir(tmp_path / ".downloads") and not _leftovers(tmp_path)  # archive removed, no temp folder
    # the model set of af2 from the same archive; a second fetch finds the folder complete and downloads nothing
    result, _ = _fetch("af2", tmp_path, server)
    assert sorted(os.path.basename(f) for f in result.files) == ["LICENSE", "params_model_1.npz", "params_model_2.npz"]
    n = len(server.requests)
    again, lines = _fetch("af2", tmp_path, server)
    assert again.reused and len(server.requests) == n and "complete already" in lines[0]


def test_no_published_checksum_is_computed_and_printed(tmp_path, server):
    _, lines = _fetch("af2", tmp_path, server)
    assert f"weights: sha256 {DIGEST}  {TAR_NAME} (no published checksum to compare; pin it with --sha256)" in lines
    assert all(f.sha256 is None for r in RELEASES.values() for f in r.files)  # none is published (see source)
    assert all(r.source for r in RELEASES.values())


def test_resume_after_a_dropped_connection(tmp_path, server):
    server.drop_once.add(TAR_NAME)
    result, lines = _fetch("af2-ptm", tmp_path, server, sha256=DIGEST)
    half = len(ARCHIVE) // 2
    assert server.requests == [(TAR_NAME, None), (TAR_NAME, f"bytes={half}-")]
    assert any(f"connection dropped at byte {half}; resuming" in line for line in lines)
    assert result.sha256 == {TAR_NAME: DIGEST}
    assert (tmp_path / "af2-ptm" / "params_model_1_ptm.npz").read_bytes() == MEMBERS["params_model_1_ptm.npz"]


def test_resume_of_an_earlier_runs_partial_download(tmp_path, server):
    downloads = tmp_path / ".downloads"
    downloads.mkdir()
    (downloads / (TAR_NAME + ".part")).write_bytes(ARCHIVE[:12345])
    result, _ = _fetch("af2", tmp_path, server, sha256=DIGEST)
    assert server.requests == [(TAR_NAME, "bytes=12345-")]
    assert result.sha256 == {TAR_NAME: DIGEST}


def test_a_server_that_ignores_ranges_sends_the_whole_file_again(tmp_path, server):
    server.ignore_range = True
    downloads = tmp_path / ".downloads"
    downloads.mkdir()
    (downloads / (TAR_NAME + ".part")).write_bytes(b"x" * 5000)  # would corrupt the file if appended to
    result, _ = _fetch("af2", tmp_path, server, sha256=DIGEST)
    assert server.requests == [(TAR_NAME, "bytes=5000-")] and result.sha256 == {TAR_NAME: DIGEST}


def test_a_corrupted_archive_is_refused_and_nothing_is_unpacked(tmp_path, server, capsys):
    damaged = bytearray(ARCHIVE)
    damaged[1000] ^= 0xFF
    server.files[TAR_NAME] = bytes(damaged)
    argv = ["weights", "fetch", "af2", "--dir", str(tmp_path), "--url", server.url, "--sha256", DIGEST]
    assert main(argv + ["--no-progress"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and err[0].startswith(f"error: {server.url}{TAR_NAME}: SHA-256 ")
    assert f"does not match the expected {DIGEST}" in err[0] and "nothing was unpacked" in err[0]
    assert sorted(os.listdir(tmp_path)) == [".downloads"] and not os.listdir(tmp_path / ".downloads")


def test_a_shipped_checksum_is_checked(tmp_path, server, monkeypatch):
    wrong = RemoteFile(TAR_NAME, sha256="0" * 64)
    monkeypatch.setitem(RELEASES, "af2", dataclasses.replace(RELEASES["af2"], files=(wrong,)))
    with pytest.raises(FetchError, match="does not match the expected 0000"):
        _fetch("af2", tmp_path, server)
    assert not (tmp_path / "af2").exists()
    right = RemoteFile(TAR_NAME, sha256=DIGEST.upper())
    monkeypatch.setitem(RELEASES, "af2", dataclasses.replace(RELEASES["af2"], files=(right,)))
    _, lines = _fetch("af2", tmp_path, server)
    assert f"weights: {TAR_NAME}: SHA-256 verified" in lines


def test_a_damaged_archive_without_checksum_is_one_line(tmp_path, server):
    server.files[TAR_NAME] = b"<html>not a tar</html>" * 100
    with pytest.raises(FetchError, match="not a readable tar archive") as info:
        _fetch("af2", tmp_path, server)
    assert "\n" not in str(info.value) and not (tmp_path / "af2").exists() and not _leftovers(tmp_path)


class _FullDisk:
    """A writable file whose writes fail with ENOSPC once ``limit`` bytes were written."""

    def __init__(self, fh, limit):
        self.fh, self.limit = fh, limit

    def write(self, data):
        if self.fh.tell() + len(data) > self.limit:
            self.fh.write(data[: max(0, self.limit - self.fh.tell())])
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_disk_full_is_one_line_and_a_rerun_resumes(tmp_path, server, monkeypatch, capsys):
    real_open = open
    monkeypatch.setattr(
        fetch, "open", lambda path, mode="r", *a, **k: _FullDisk(real_open(path, mode, *a, **k), 30_000), raising=False
    )
    argv = ["weights", "fetch", "af2", "--dir", str(tmp_path), "--url", server.url, "--no-progress"]
    assert main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    part = tmp_path / ".downloads" / (TAR_NAME + ".part")
    assert err == [
        f"error: {part}: no space left on device (No space left on device); free space and rerun: the download resumes"
    ]
    assert part.stat().st_size == 30_000 and not (tmp_path / "af2").exists()
    monkeypatch.undo()
    result, _ = _fetch("af2", tmp_path, server, sha256=DIGEST)
    assert server.requests[-1] == (TAR_NAME, "bytes=30000-") and result.sha256 == {TAR_NAME: DIGEST}


def test_disk_full_while_unpacking_leaves_nothing(tmp_path, server, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch.shutil, "copyfileobj", full)
    with pytest.raises(FetchError, match="no space left on device .*nothing was unpacked"):
        _fetch("af2", tmp_path, server)
    assert not (tmp_path / "af2").exists() and not _leftovers(tmp_path)
    assert os.listdir(tmp_path / ".downloads") == [TAR_NAME]  # verified download kept for the rerun


def test_offline_is_one_line(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["weights", "fetch", "af2", "--dir", str(tmp_path), "--url", f"http://127.0.0.1:{port}/", "--no-progress"]
    assert main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and f"cannot reach 127.0.0.1:{port}" in err[0] and "offline?" in err[0]


def test_http_error_and_bad_arguments(tmp_path, server):
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch_weights("af2", tmp_path, url=server.url + "missing.tar", progress=False, log=lambda line: None)
    with pytest.raises(FetchError, match="unknown weights 'af3'"):
        fetch_weights("af3", tmp_path)
    with pytest.raises(FetchError, match="64 hexadecimal digits"):
        fetch_weights("af2", tmp_path, sha256="abc")
    with pytest.raises(FetchError, match="one-file release"):
        fetch_weights("openfold", tmp_path, sha256=DIGEST)


def test_openfold_files_are_downloaded_as_they_are(tmp_path, monkeypatch):
    files = {"finetuning_1.pt": os.urandom(3000), "finetuning_ptm_2.pt": os.urandom(4000)}
    monkeypatch.setitem(
        RELEASES, "openfold", dataclasses.replace(RELEASES["openfold"], files=tuple(RemoteFile(n) for n in files))
    )
    s = Server(files)
    try:
        result, lines = _fetch("openfold", tmp_path, s)
    finally:
        s.close()
    assert {os.path.basename(f): open(f, "rb").read() for f in result.files} == files
    assert result.sha256 == {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    assert sum("no published checksum" in line for line in lines) == 2


def test_af2_multimer_unpacks_the_multimer_files_of_the_same_archive(tmp_path, server, capsys):
    code = main(["weights", "fetch", "af2-multimer", "--dir", str(tmp_path), "--url", server.url, "--no-progress"])
    assert code == 0
    folder = tmp_path / "af2-multimer"
    assert capsys.readouterr().out.strip() == str(folder)
    assert sorted(os.listdir(folder)) == ["FETCHED.json", "LICENSE", "params_model_1_multimer_v3.npz"]
    assert (folder / "params_model_1_multimer_v3.npz").read_bytes() == MEMBERS["params_model_1_multimer_v3.npz"]
    assert [r["name"] for r in json.loads((folder / "FETCHED.json").read_text())["files"]] == [TAR_NAME]
    # the monomer sets of the same archive leave the multimer file out
    result, _ = _fetch("af2", tmp_path, server)
    assert not any("multimer" in os.path.basename(f) for f in result.files)
