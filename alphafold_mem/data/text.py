"""Low-level text input shared by the FASTA and A3M/Stockholm parsers: opening plain or ``.gz``
files (``.gz`` in any letter case, :mod:`.formats`), checking that a path names a readable text file
(:func:`check_file`; binary content is refused in one line, :func:`binary_content`), reading a file
stored as a byte range of a larger one (:func:`text_source`: OpenFold's alignment database), and splitting
``>``-records with Biopython's ``SimpleFastaParser`` while remembering the 1-based line and column
every character came from, so that errors can point at it. ``;``, ``#`` and ``!`` lines in column 1
are comments (Pearson/BLAST conventions) and CRLF endings are normalised.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import Callable, Iterable, Iterator

from Bio.SeqIO.FastaIO import SimpleFastaParser

from .errors import InputError
from .formats import is_gzip

__all__ = [
    "TrackedLines",
    "NotTextError",
    "open_text",
    "check_file",
    "binary_content",
    "split_records",
    "describe_char",
    "text_source",
    "HEAD_BYTES",
]

_COMMENT_STARTS = (";", "#", "!")
#: How much of a file :func:`check_file` reads to tell text from binary content.
HEAD_BYTES = 65536
_C0 = bytes(b for b in range(32) if b not in b"\t\n\v\f\r") + b"\x7f"
_C1 = bytes(range(0x80, 0xA0))


class NotTextError(InputError):
    """The file is missing, a directory, or not text (binary, compressed without ``.gz``, UTF-16):
    nothing in it can be located by line, so callers report this one line for the whole file."""


class TrackedLines:
    """Feeds lines to ``SimpleFastaParser`` while remembering where every record came from.

    Comment lines (``;``, ``#``, ``!`` in column 1) are dropped; CRLF endings are normalised.
    ``headers[i]`` is the 1-based line of record ``i``'s header and ``body[i]`` the list of
    ``(line_number, text)`` of its non-blank sequence lines; ``preamble`` is the first non-blank,
    non-comment line before the first header.
    """

    def __init__(self, lines: Iterable[str]):
        self._lines = lines
        self.headers: list[int] = []
        self.body: list[list[tuple[int, str]]] = []
        self.preamble: tuple[int, str] | None = None

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(self._lines, 1):
            line = line.rstrip("\r\n")
            first = line[:1]
            if first == ">":
                self.headers.append(number)
                self.body.append([])
            elif first and first in _COMMENT_STARTS:
                continue
            elif line.strip():
                if self.headers:
                    self.body[-1].append((number, line))
                elif self.preamble is None:
                    self.preamble = (number, line)
            yield line + "\n"

    def position(self, record: int, index: int) -> tuple[int | None, int | None]:
        """Line and column of character ``index`` (0-based) of ``record``'s joined sequence, counted
        the way ``SimpleFastaParser`` joins lines (trailing whitespace, spaces and CR removed)."""
        k = -1
        for number, text in self.body[record]:
            for column, ch in enumerate(text.rstrip(), 1):
                if ch in " \r":
                    continue
                k += 1
                if k == index:
                    return number, column
        return self.headers[record] if record < len(self.headers) else None, None


def open_text(path) -> io.TextIOBase:
    """Open ``path`` (``.gz`` decompressed, any letter case) as UTF-8 text, bad bytes replaced, newlines
    untranslated."""
    path = os.fspath(path)
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return open(path, "r", encoding="utf-8", errors="replace", newline="")


def check_file(path, what: str = "text") -> str:
    """``path`` as a string, once its first :data:`HEAD_BYTES` (decompressed for ``.gz``) read as text.

    Args:
        path: the file.
        what: what the file should hold, for the message (``"FASTA text"``).

    Raises:
        NotTextError: the file does not exist, is a directory, cannot be read, is named ``.gz`` but is
            not gzip data, or its content is not text (:func:`binary_content`); one line naming the
            file and what to do, no raw bytes.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise NotTextError("file not found", file=path)
    if os.path.isdir(path):
        raise NotTextError("is a directory, expected a file", file=path)
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except gzip.BadGzipFile as exc:
        raise NotTextError("named .gz but not gzip-compressed: rename it without .gz", file=path) from exc
    except (EOFError, zlib.error) as exc:
        raise NotTextError("gzip data truncated or corrupt: download or compress it again", file=path) from exc
    except OSError as exc:
        raise NotTextError(f"cannot be read ({exc.strerror or exc})", file=path) from exc
    why = binary_content(head)
    if why:
        raise NotTextError(f"{why}; expected {what}", file=path)
    return path


def binary_content(head: bytes) -> str | None:
    """Why ``head`` (the first bytes of a file) is not text, or None for text.

    Not text: gzip data (magic ``1f 8b``), UTF-16 (a byte-order mark), a NUL byte, or more than 5 %
    control bytes (C0 other than tab, line and page breaks; DEL; and C1 ``0x80-0x9f`` unless the bytes
    are valid UTF-8). Latin-1 or Windows-1252 text with a few accented letters is text.
    """
    if head.startswith(b"\x1f\x8b"):
        return "gzip-compressed content in a file not named .gz: rename it to end in .gz, or decompress it"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (byte-order mark): save it as UTF-8 or ASCII"
    nul = head.find(b"\x00")
    if nul >= 0:
        return f"binary content, not text (a NUL byte at offset {nul})"
    try:
        head.decode("utf-8")
        controls = _C0
    except UnicodeDecodeError as exc:
        truncated = exc.reason == "unexpected end of data" and exc.start >= len(head) - 3
        controls = _C0 if truncated else _C0 + _C1
    count = len(head) - len(head.translate(None, controls))
    if count > max(2, len(head) // 20):
        return f"binary content, not text ({count} control bytes in the first {len(head)})"
    return None


def split_records(lines: Iterable[str]) -> tuple[TrackedLines, list[tuple[str, str]]]:
    """``(tracked, [(title, sequence), ...])``: the records of ``lines`` and where they came from."""
    tracked = TrackedLines(lines)
    records = list(SimpleFastaParser(iter(tracked)))
    return tracked, records


def describe_char(ch: str) -> str:
    """``ch`` quoted for an error message, or its byte value when it is not printable."""
    return repr(ch) if ch.isprintable() else f"non-printable byte 0x{ord(ch):02x}"


# ----------------------------------------------------------------------------------------------
# Sources: a file, or a byte range of a database file


class _Span(io.RawIOBase):
    """``size`` bytes of an open binary file from ``start`` on, as a read-only stream."""

    def __init__(self, fh, start: int, size: int):
        self._fh, self._left = fh, int(size)
        fh.seek(int(start))

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self._left)
        if n <= 0:
            return 0
        data = self._fh.read(n)
        buffer[: len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        self._fh.close()
        super().close()


def _span_text(db: str, start: int, size: int, name: str) -> io.TextIOBase:
    raw: io.BufferedIOBase = io.BufferedReader(_Span(open(db, "rb"), start, size))
    if is_gzip(name):
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def text_source(path, span=None, name: str | None = None, what: str | None = None) -> tuple[str, Callable]:
    """``(label, opener)`` of a text file, or of the ``span = (start, size)`` bytes of a database file
    ``path`` that hold a file named ``name`` (its suffix says whether it is gzip-compressed).
    ``opener()`` returns a new text handle (as :func:`open_text`); ``label`` is ``path``, or
    ``<path>[<name>]`` for a span.

    Raises:
        InputError: the file (or span) is missing, lies outside the database file, or is not text
            (:func:`check_file` for a file); ``what`` names the expected content in the message
            (default: "text" for a file, "an alignment" for a span).
    """
    if span is None:
        path = check_file(path) if what is None else check_file(path, what)
        return path, lambda: open_text(path)
    db = os.fspath(path)
    start, size = (int(v) for v in span)
    label = f"{db}[{name}]"
    try:
        total = os.path.getsize(db)
    except OSError as exc:
        raise InputError(f"alignment database file cannot be read ({exc.strerror or exc})", file=db) from exc
    if start < 0 or size < 0 or start + size > total:
        raise InputError(
            f"{name} at bytes {start}+{size} lies outside the database file ({total} bytes): "
            "the index does not belong to these .db files; rebuild them together",
            file=db,
        )
    try:
        with _span_text(db, start, size, name or "") as handle:
            head = handle.buffer.read(HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"stored file cannot be read ({exc})", file=label) from exc
    why = binary_content(head)
    if why:
        raise InputError(f"{why}; expected {what or 'an alignment'}", file=label)
    return label, lambda: _span_text(db, start, size, name or "")
