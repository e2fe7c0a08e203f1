"""Which files of the prediction inputs are read, and as what: FASTA, alignment (``.a3m``/``.sto``,
first row = query) or structure (``.cif``/``.pdb``: one target per protein chain), by the suffix
table of :mod:`alphafold_mem.data.formats` (optionally ``.gz``, any letter case).

A file named on the command line is read by its extension (FASTA for anything that is neither an
alignment nor a structure). In an input directory every entry is either used or listed as ignored
with the reason, never dropped silently: FASTA and structure files by extension; any other regular
file whose content starts with a ``>`` header (after blank and comment lines), e.g. ``b.fasta.txt``,
is read as FASTA with a note; alignment files, subdirectories, hidden, empty, binary and other
files are ignored, each with its reason.
"""

from __future__ import annotations

import gzip
import os
from typing import Callable

from ..data.formats import FASTA, MSA, STRUCTURE, format_of, is_gzip, suffixes
from ..data.text import HEAD_BYTES, binary_content
from .errors import PredictError

__all__ = ["FASTA_SUFFIXES", "MSA_SUFFIXES", "STRUCTURE_SUFFIXES", "file_kind", "input_files", "sniff_fasta"]

#: The suffixes of :mod:`alphafold_mem.data.formats` by kind (lower case, without ``.gz``).
FASTA_SUFFIXES = suffixes(FASTA)
MSA_SUFFIXES = suffixes(MSA)
STRUCTURE_SUFFIXES = suffixes(STRUCTURE)


def file_kind(path: str) -> str:
    """``"msa"``, ``"structure"``, ``"fasta"`` (by suffix, :mod:`alphafold_mem.data.formats`) or ``""``
    (a suffix that is no prediction input, aligned FASTA included)."""
    found = format_of(path, FASTA, MSA, STRUCTURE)
    return found.kind if found else ""


def sniff_fasta(path: str) -> tuple[bool, str]:
    """``(True, "")`` when the first non-blank, non-comment line of ``path`` (optionally ``.gz``) is a
    ``>`` header; else ``(False, reason)``."""
    try:
        opener = gzip.open if is_gzip(path) else open
        with opener(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except (OSError, EOFError) as exc:
        return False, f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if not head.strip():
        return False, "empty file"
    if b"\x00" in head:
        return False, "binary file"
    why = binary_content(head)
    if why:
        return False, why
    for line in head.decode("utf-8", errors="replace").splitlines():
        text = line.strip()
        if not text or text.startswith((";", "#", "!")):
            continue
        if text.startswith(">"):
            return True, ""
        return False, f"no FASTA header: its first line is {text[:30]!r}, not '>...'"
    return False, "only comment lines"


def _directory(path: str, log: Callable[[str], None]) -> list[tuple[str, str]]:
    used: list[tuple[str, str]] = []
    ignored: list[tuple[str, str]] = []
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        kind = file_kind(entry)
        if entry.startswith("."):
            ignored.append((entry, "hidden file"))
        elif os.path.isdir(full):
            ignored.append((entry + "/", "a directory (input directories are not searched recursively)"))
        elif not os.path.isfile(full):
            ignored.append((entry, "not a regular file"))
        elif kind == MSA:
            ignored.append((entry, "an alignment: give it as the input itself, or with --msa / --msa-dir"))
        elif kind in (FASTA, STRUCTURE):
            used.append((full, kind))
        else:
            ok, why = sniff_fasta(full)
            if ok:
                log(f"note: {full}: no FASTA extension, but its content starts with a '>' header: read as FASTA")
                used.append((full, FASTA))
            else:
                ignored.append((entry, why))
    shown = ", ".join(os.path.basename(f) for f, _ in used) or "none"
    log(
        f"note: input directory {path}: {len(used)} file(s) used ({shown}), {len(ignored)} ignored"
        + (":" if ignored else "")
    )
    for entry, why in ignored:
        log(f"note: {os.path.join(path, entry)}: ignored: {why}")
    if not used:
        raise PredictError(
            f"{path}: directory without FASTA or structure files "
            f"({', '.join(FASTA_SUFFIXES + STRUCTURE_SUFFIXES)}, or any file starting with '>')"
        )
    return used


def input_files(inputs, log: Callable[[str], None] = print) -> list[tuple[str, str]]:
    """``(path, kind)`` for every input file; directories expanded (see the module docstring).

    Raises:
        PredictError: no input, a missing path, or a directory with nothing usable.
    """
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not items:
        raise PredictError("no input given")
    files = []
    for item in items:
        path = os.fspath(item)
        if os.path.isdir(path):
            files.extend(_directory(path, log))
        elif not os.path.exists(path):
            raise PredictError(f"{path}: input not found")
        else:
            files.append((path, file_kind(path) or FASTA))
    return files
