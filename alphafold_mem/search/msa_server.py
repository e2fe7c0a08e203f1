"""MSAs from an MMseqs2 MSA server, the protocol ColabFold's ``run_mmseqs2`` speaks (Mirdita et al. 2022,
*ColabFold: making protein folding accessible to all*, Nature Methods 19, 679-682): what
``alphafold-mem predict --msa-server URL`` runs instead of a local search.

Protocol (one ticket per sequence)::

    POST {url}/ticket/msa          form q=">101\\n<sequence>\\n", mode=env|all  ->  {"id": ..., "status": ...}
    GET  {url}/ticket/{id}         ->  {"status": PENDING | RUNNING | COMPLETE | ERROR | ...}
    GET  {url}/result/download/{id}  ->  tar.gz with uniref.a3m (and, mode env,
                                         bfd.mgnify30.metaeuk30.smag30.a3m: ColabFoldDB), pdb70.m8, ...

Paired mode (complexes, :func:`fetch_server_pairs`; one ticket for the distinct sequences of a complex)::

    POST {url}/ticket/pair         form q=">101\n<seq 1>\n>102\n<seq 2>\n...", mode=pairgreedy|paircomplete
    GET  {url}/result/download/{id}  ->  tar.gz with pair.a3m: one block per sequence (query first, blocks
                                         separated by NUL), row k of every block paired by the server

A submission answered ``RATELIMIT`` or ``UNKNOWN`` is sent again after a wait (growing, bounded number of times);
``PENDING``/``RUNNING`` are polled with a growing interval; ``ERROR`` and ``MAINTENANCE`` fail the target. Each
state change is one log line; a failure is one :class:`MsaServerError` line.

Results are cached by sequence under ``<out>/msa_server/<key>/`` (``key``: SHA-256 of mode and sequence) with a
``request.json`` naming the server and ticket: a rerun with the same sequence, mode and server asks nothing. The
A3M files are checked as a local A3M is (:func:`alphafold_mem.data.msa.parse_msa` with the query) before use.

Terms of use: ColabFold's public server (``https://api.colabfold.com``) is free but rate-limited so that no
one user overloads it; its authors ask that it not be used for large-scale predictions nor from several IP
addresses at once, and remind users that the sequences are sent to a third-party server (ColabFold wiki,
https://github.com/sokrypton/ColabFold/wiki, "Local MSA generation"). For many targets, run your own server or
a local search (``--db``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable

from ..data.errors import InputError
from ..data.msa import parse_msa
from ..version import __version__
from .settings import MODES, PUBLIC_SERVER, TERMS, SearchError

__all__ = [
    "MsaServerError",
    "MsaServerOptions",
    "PUBLIC_SERVER",
    "MODES",
    "PAIRINGS",
    "fetch_server_msa",
    "fetch_server_pairs",
    "cache_key",
]

#: Pairing strategies of the paired mode -> the server's mode names (ColabFold's; greedy is its default:
#: rows where any two or more chains have a hit of one species, complete: rows where every chain has one).
PAIRINGS = {"greedy": "pairgreedy", "complete": "paircomplete"}

_WAITING = ("PENDING", "RUNNING", "UNKNOWN")


class MsaServerError(SearchError):
    """The server refused, failed or could not be reached for one target: one line."""


@dataclass(frozen=True)
class MsaServerOptions:
    """How to talk to the server.

    Attributes:
        url: the server's base URL (ColabFold's public one: :data:`PUBLIC_SERVER`).
        mode: ``env`` (UniRef30 and ColabFoldDB, ColabFold's default) or ``all`` (UniRef30 only).
        poll_interval: seconds before the first status poll and the first resubmission; each later wait is 1.5
            times longer (plus up to 20 % jitter), at most ``max_interval``.
        max_interval: the longest wait, seconds.
        submit_attempts: submissions answered RATELIMIT/UNKNOWN before the target fails.
        timeout: seconds one ticket may take from submission to result.
        request_timeout: seconds one HTTP request may stay silent.
        pairing: the paired mode's strategy (:data:`PAIRINGS`), for complexes.
    """

    url: str = PUBLIC_SERVER
    mode: str = "env"
    poll_interval: float = 5.0
    max_interval: float = 60.0
    submit_attempts: int = 8
    timeout: float = 3600.0
    request_timeout: float = 60.0
    pairing: str = "greedy"

    def __post_init__(self):
        if self.pairing not in PAIRINGS:
            raise ValueError(f"MSA server pairing {self.pairing!r}: choose one of {', '.join(PAIRINGS)}")
        if self.mode not in MODES:
            raise ValueError(f"MSA server mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"--msa-server {self.url!r}: expected an http:// or https:// URL")


def cache_key(sequence: str, mode: str) -> str:
    """The cache folder name of ``sequence`` in ``mode``: 24 hex digits of SHA-256."""
    return hashlib.sha256(f"{mode}\n{sequence.upper()}".encode()).hexdigest()[:24]


def fetch_server_msa(
    name: str,
    sequence: str,
    cache_dir,
    options: MsaServerOptions,
    *,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] | None = None,
) -> list[str]:
    """The A3M files of ``sequence`` from the server (or the cache), checked against the query.

    Args:
        name: target id (for the log lines); sequence: the query (``N_res``).
        cache_dir: the cache root (``<out>/msa_server``); results go to ``cache_dir/<cache_key>/``.
        options: :class:`MsaServerOptions`.
        log: receives one line per state (submitted, waiting, rate-limited, done, reused).
        sleep: the wait function (default: :func:`time.sleep`, looked up at call time).

    Returns:
        Paths of the A3M files in :data:`MODES` order (query first in each).

    Raises:
        MsaServerError: unreachable server, HTTP error, a reply that is not JSON, ERROR / MAINTENANCE status,
            rate-limited ``submit_attempts`` times, ``timeout`` exceeded, a damaged result or an A3M that fails
            the checks of a local A3M.
    """
    sequence = sequence.upper()
    folder = os.path.join(os.fspath(cache_dir), cache_key(sequence, options.mode))
    wanted = MODES[options.mode]
    record_path = os.path.join(folder, "request.json")
    old = _load(record_path)
    paths = [os.path.join(folder, f) for f in wanted]
    same = old.get("sequence") == sequence and old.get("mode") == options.mode and old.get("server") == options.url
    if same and all(os.path.isfile(p) for p in paths):
        log(f"msa-server: {name}: reusing {folder} (ticket {old.get('ticket')})")
        return paths
    client = _Client(options, name, log, sleep or _sleep)
    t0 = time.monotonic()
    ticket, status = client.submit("ticket/msa", f">101\n{sequence}\n", options.mode)
    client.wait(ticket, status, t0)
    payload = client.get(f"result/download/{ticket}")
    record = {"sequence": sequence, "mode": options.mode, "server": options.url, "ticket": ticket, "files": wanted}
    queries = dict.fromkeys(wanted, sequence)
    _store(folder, record, lambda tmp: _unpack(payload, wanted, tmp, client.host), queries, client)
    log(f"msa-server: {name}: ticket {ticket} done in {time.monotonic() - t0:.0f} s -> {', '.join(paths)}")
    return paths


def fetch_server_pairs(
    name: str,
    sequences,
    cache_dir,
    options: MsaServerOptions,
    *,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] | None = None,
) -> list[str]:
    """The server's paired rows of a complex's distinct ``sequences`` (paired mode, one ticket), cached.

    Args:
        name: complex id (for the log lines); sequences: the distinct chain sequences, two or more.
        cache_dir: the cache root; results go to ``cache_dir/pair_<key>/`` (``key`` over the pairing
            strategy and the sequences in order).
        options: :class:`MsaServerOptions` (``pairing`` picks the server's mode).

    Returns:
        One A3M path per sequence, in order (``pair_<k>.a3m``, query first); row ``j`` of every file is
        one pair (rows as the server wrote them, the query's row 0 included).

    Raises:
        MsaServerError: as :func:`fetch_server_msa`; also a result without a block per sequence or whose
            blocks differ in depth.
    """
    sequences = [s.upper() for s in sequences]
    mode = PAIRINGS[options.pairing]
    key = cache_key("\n".join(sequences), mode)
    folder = os.path.join(os.fspath(cache_dir), f"pair_{key}")
    wanted = tuple(f"pair_{k}.a3m" for k in range(len(sequences)))
    paths = [os.path.join(folder, f) for f in wanted]
    old = _load(os.path.join(folder, "request.json"))
    same = old.get("sequences") == sequences and old.get("mode") == mode and old.get("server") == options.url
    if same and all(os.path.isfile(p) for p in paths):
        log(f"msa-server: {name}: reusing paired rows {folder} (ticket {old.get('ticket')})")
        return paths
    client = _Client(options, name, log, sleep or _sleep)
    t0 = time.monotonic()
    query = "".join(f">{101 + k}\n{s}\n" for k, s in enumerate(sequences))
    ticket, status = client.submit("ticket/pair", query, mode)
    client.wait(ticket, status, t0)
    payload = client.get(f"result/download/{ticket}")

    def unpack(tmp: str) -> None:
        _unpack(payload, ("pair.a3m",), tmp, client.host, keep_nul=True)
        with open(os.path.join(tmp, "pair.a3m"), "rb") as fh:
            blocks = _pair_blocks(fh.read(), len(sequences), client.host)
        os.remove(os.path.join(tmp, "pair.a3m"))
        for f, block in zip(wanted, blocks):
            with open(os.path.join(tmp, f), "wb") as fh:
                fh.write(block)

    record = {"sequences": sequences, "mode": mode, "server": options.url, "ticket": ticket, "files": wanted}
    _store(folder, record, unpack, dict(zip(wanted, sequences)), client)
    depths = {len(parse_msa(p).sequences) for p in paths}
    if len(depths) != 1:
        shutil.rmtree(folder, ignore_errors=True)
        raise MsaServerError(f"{client.host}: the paired blocks have different numbers of rows ({sorted(depths)})")
    log(f"msa-server: {name}: paired ticket {ticket} done in {time.monotonic() - t0:.0f} s, {depths.pop()} rows")
    return paths


def _pair_blocks(text: bytes, n: int, host: str) -> list[bytes]:
    """pair.a3m's blocks in query order (``>101`` ... ``>10n``), split at the NUL bytes between them
    (raw text, no NUL split, with a single query)."""
    blocks = {}
    for chunk in text.split(b"\x00"):
        chunk = chunk.lstrip()
        if chunk.startswith(b">"):
            blocks[chunk.split(None, 1)[0][1:].decode("ascii", "replace")] = chunk
    missing = [str(101 + k) for k in range(n) if str(101 + k) not in blocks]
    if missing:
        raise MsaServerError(f"{host}: pair.a3m has no block for query {', '.join(missing)} (it has {len(blocks)})")
    return [blocks[str(101 + k)] for k in range(n)]


def _store(folder: str, record: dict, unpack: Callable[[str], None], queries: dict, client) -> None:
    """Write a result atomically into ``folder``: ``unpack(tmp)`` writes the files, each A3M of
    ``queries`` (file -> its query) gets the checks of a local A3M, then ``request.json``."""
    os.makedirs(os.path.dirname(folder) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".msa.", suffix=".partial", dir=os.path.dirname(folder))
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # the usual folder mode, not mkdtemp's 0700
        unpack(tmp)
        for f, sequence in queries.items():
            try:
                parse_msa(os.path.join(tmp, f), query=sequence)  # the checks of a local A3M
            except InputError as exc:
                raise MsaServerError(f"{client.host} returned {f}, which fails the A3M checks: {exc.reason}") from None
        with open(os.path.join(tmp, "request.json"), "w") as fh:
            json.dump(record, fh, indent=1)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except OSError as exc:
        raise MsaServerError(f"{folder}: cannot write the server's MSA ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _load(path: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _unpack(payload: bytes, wanted: tuple, into: str, host: str, *, keep_nul: bool = False) -> None:
    """Write the ``wanted`` A3M members of the result tar(.gz) into ``into``, NUL separators removed (ColabFold's
    multi-query files separate queries with NUL bytes; one ticket holds one query) unless ``keep_nul``."""
    try:
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as tar:
            found = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
            missing = [f for f in wanted if f not in found]
            if missing:
                raise MsaServerError(
                    f"{host}: the result has no {', '.join(missing)} (it has {', '.join(sorted(found)) or 'nothing'})"
                )
            for f in wanted:
                text = tar.extractfile(found[f]).read()
                text = text if keep_nul else text.replace(b"\x00", b"")
                with open(os.path.join(into, f), "wb") as fh:
                    fh.write(text)
    except (tarfile.TarError, EOFError) as exc:
        raise MsaServerError(
            f"{host}: the result is not a readable tar archive ({' '.join(str(exc).split())})"
        ) from None


class _Client:
    """One target's conversation with the server."""

    def __init__(self, options: MsaServerOptions, name: str, log, sleep):
        self.options, self.name, self.log, self.sleep = options, name, log, sleep
        self.base = options.url.rstrip("/") + "/"
        self.host = urllib.parse.urlsplit(options.url).netloc or options.url
        self.interval = options.poll_interval

    def _wait_time(self) -> float:
        t = self.interval * (1.0 + 0.2 * random.random())
        self.interval = min(self.options.max_interval, self.interval * 1.5)
        return t

    def get(self, path: str, data: dict | None = None) -> bytes:
        body = None if data is None else urllib.parse.urlencode(data).encode()
        request = urllib.request.Request(
            self.base + path, data=body, headers={"User-Agent": f"alphafold-mem/{__version__}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.options.request_timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (429, 503):  # rate limit / overload said in HTTP
                return json.dumps({"status": "RATELIMIT"}).encode()
            raise MsaServerError(f"{self.host}: HTTP {exc.code} {exc.reason} for {path}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MsaServerError(
                f"cannot reach MSA server {self.host} ({reason}); offline? check --msa-server"
            ) from None

    def json(self, path: str, data: dict | None = None) -> dict:
        raw = self.get(path, data)
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or "status" not in reply:
            shown = " ".join(raw[:80].decode("utf-8", "replace").split())
            raise MsaServerError(
                f"{self.host}: the reply to {path.split('/')[0]}/... is not the protocol's JSON: {shown!r}"
            )
        return reply

    def submit(self, endpoint: str, query: str, mode: str) -> tuple[str, str]:
        """Submit ``query`` (FASTA text) until the server takes the ticket; returns its id and status."""
        form = {"q": query, "mode": mode}
        for attempt in range(1, self.options.submit_attempts + 1):
            reply = self.json(endpoint, form)
            status = reply["status"]
            if status in ("RATELIMIT", "UNKNOWN"):
                if attempt == self.options.submit_attempts:
                    break
                wait = self._wait_time()
                self.log(
                    f"msa-server: {self.name}: {self.host} answered {status}; submitting again in {wait:.0f} s "
                    f"(attempt {attempt + 1} of {self.options.submit_attempts})"
                )
                self.sleep(wait)
                continue
            self._check(status, "submission")
            if "id" not in reply:
                raise MsaServerError(f"{self.host}: the submission's reply has no ticket id ({status})")
            self.log(f"msa-server: {self.name}: submitted to {self.host}, ticket {reply['id']} {status}")
            self.interval = self.options.poll_interval
            return str(reply["id"]), status
        raise MsaServerError(
            f"{self.host} rate-limited the submission {self.options.submit_attempts} times (status {status}); "
            f"try again later with fewer targets at once ({TERMS})"
        )

    def wait(self, ticket: str, status: str, t0: float) -> None:
        """Poll until the ticket leaves PENDING/RUNNING/UNKNOWN; raise unless it is COMPLETE."""
        last = status
        while status in _WAITING:
            if time.monotonic() - t0 > self.options.timeout:
                raise MsaServerError(
                    f"{self.host}: ticket {ticket} still {status} after {self.options.timeout:.0f} s; try again later"
                )
            self.sleep(self._wait_time())
            status = self.json(f"ticket/{urllib.parse.quote(ticket)}")["status"]
            if status != last and status in _WAITING:
                self.log(f"msa-server: {self.name}: ticket {ticket} {status}")
            last = status
        self._check(status, f"ticket {ticket}")

    def _check(self, status: str, what: str) -> None:
        if status == "ERROR":
            raise MsaServerError(
                f"{self.host} answered ERROR for {what} (the server could not search this sequence; check it, "
                "or try again later)"
            )
        if status == "MAINTENANCE":
            raise MsaServerError(f"{self.host} is under maintenance; try again later")
        if status not in _WAITING and status != "COMPLETE":
            raise MsaServerError(f"{self.host}: unexpected status {status!r} for {what}")
