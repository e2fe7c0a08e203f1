"""Input errors and warnings of the data pipeline, located by file, record and 1-based line/column.

Every parser raises :class:`InputError` (a ``ValueError``) for input it cannot use. Its ``str`` is
one line in the compiler style ``path:line:col: record 'name': message`` so that editors and CI logs
can jump to it. Recoverable oddities are reported with :func:`warn_input` (a ``warnings.warn`` with
an :class:`InputWarning` carrying the same location). Harmless changes the user should still hear
about (a stripped trailing ``*``, a modified residue mapped to its parent) are
:class:`InputNote` s, emitted by :func:`note_input`; they are warnings too, so a caller that
records warnings gets both, and front ends print them as ``note:`` lines.
"""

from __future__ import annotations

import os
import warnings


def _location(file, line, column, record) -> str:
    parts = []
    if file is not None:
        loc = os.fspath(file)
        if line is not None:
            loc += f":{line}"
            if column is not None:
                loc += f":{column}"
        parts.append(loc)
    elif line is not None:
        parts.append(f"line {line}" + (f", column {column}" if column is not None else ""))
    if record is not None:
        parts.append(f"record '{record}'")
    return ": ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class InputError(ValueError):
    """Bad input that a parser cannot use.

    Attributes:
        file: path of the offending file (``None`` for in-memory text).
        record: record name (FASTA/MSA header id, mmCIF chain id), or ``None``.
        line: 1-based line number in ``file``, or ``None``.
        column: 1-based column within that line, or ``None``.
        reason: the bare message.
    """

    def __init__(self, reason: str, *, file=None, record=None, line=None, column=None):
        self.reason = _one_line(reason)
        self.file = None if file is None else os.fspath(file)
        self.record = None if record is None else _one_line(record)[:80]
        self.line = line
        self.column = column
        loc = _location(self.file, line, column, self.record)
        super().__init__(f"{loc}: {self.reason}" if loc else self.reason)


class InputWarning(UserWarning):
    """A recoverable oddity in the input (skipped record, unusual residue, ...)."""


class InputNote(InputWarning):
    """Information about a harmless change made to the input (printed as a ``note:`` line)."""


def _message(reason, file, record, line, column) -> str:
    loc = _location(
        None if file is None else os.fspath(file), line, column, None if record is None else _one_line(record)[:80]
    )
    return f"{loc}: {_one_line(reason)}" if loc else _one_line(reason)


def warn_input(reason: str, *, file=None, record=None, line=None, column=None, stacklevel=3) -> None:
    """Emit an :class:`InputWarning` whose one-line message starts with the location."""
    warnings.warn(_message(reason, file, record, line, column), InputWarning, stacklevel=stacklevel)


def note_input(reason: str, *, file=None, record=None, line=None, column=None, stacklevel=3) -> None:
    """Emit an :class:`InputNote` (same message layout as :func:`warn_input`)."""
    warnings.warn(_message(reason, file, record, line, column), InputNote, stacklevel=stacklevel)
