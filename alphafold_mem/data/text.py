"""Low-level text input shared by the FASTA and A3M/Stockholm parsers: opening plain or ``.gz``
files, checking that a path names a readable file, and splitting ``>``-records with Biopython's
``SimpleFastaParser`` while remembering the 1-based line and column every character came from, so
that errors can point at it. ``;``, ``#`` and ``!`` lines in column 1 are comments (Pearson/BLAST
conventions) and CRLF endings are normalised.
"""

from __future__ import annotations

import gzip
import io
import os
from typing import Iterable, Iterator

from Bio.SeqIO.FastaIO import SimpleFastaParser

from .errors import InputError

__all__ = ["TrackedLines", "open_text", "check_file", "split_records", "describe_char"]

_COMMENT_STARTS = (";", "#", "!")


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
    """Open ``path`` (``.gz`` decompressed) as UTF-8 text, bad bytes replaced, newlines untranslated."""
    path = os.fspath(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return open(path, "r", encoding="utf-8", errors="replace", newline="")


def check_file(path) -> str:
    """``path`` as a string; :class:`InputError` when it does not exist or is a directory."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("file not found", file=path)
    if os.path.isdir(path):
        raise InputError("is a directory, expected a file", file=path)
    return path


def split_records(lines: Iterable[str]) -> tuple[TrackedLines, list[tuple[str, str]]]:
    """``(tracked, [(title, sequence), ...])``: the records of ``lines`` and where they came from."""
    tracked = TrackedLines(lines)
    records = list(SimpleFastaParser(iter(tracked)))
    return tracked, records


def describe_char(ch: str) -> str:
    """``ch`` quoted for an error message, or its byte value when it is not printable."""
    return repr(ch) if ch.isprintable() else f"non-printable byte 0x{ord(ch):02x}"
