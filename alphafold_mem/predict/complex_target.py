"""Complex prediction targets: which inputs are complexes, and the complexes of a run
(:func:`collect_complexes`), every input validated before any model work.

A complex is one FASTA record whose chains are joined by ``:`` (ColabFold's convention; a file of
such records is a batch), or every record of one file under ``--complex`` (AF2's convention; a
folder of such files is a batch). Chains, entities and numbering: :mod:`alphafold_mem.data.complex`.
A bad complex (a nucleic-acid or empty chain, a letter that is no amino acid) is one ``error:`` line
naming the file, the record and the chain; the other complexes still run.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from ..data.complex import Complex, complexes_from_text
from ..data.errors import InputError, InputNote
from ..data.formats import FASTA, is_gzip
from .inputs import input_files

__all__ = ["ComplexTarget", "collect_complexes", "has_chain_separators", "separate_chains_note"]


@dataclass
class ComplexTarget:
    """One valid complex of the run.

    Attributes:
        cx: the complex (chains, entities, AF2-Multimer numbering).
        name: file-name-safe id, unique in the run (names ``<out>/<name>/``).
        source: the file (and line of a ``:`` record).
        order: position among the run's inputs.
    """

    cx: Complex
    name: str
    source: str
    order: int = 0


def _read_text(path: str) -> str:
    if is_gzip(path):
        # only gzip inputs need it
        import gzip

        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _fasta_files(inputs, log) -> list[str]:
    return [path for path, kind in input_files(inputs, log) if kind == FASTA]


def has_chain_separators(inputs) -> bool:
    """True when a FASTA input holds a record with a ``:`` chain separator (ColabFold's complexes).

    Raises nothing: an unreadable input is left to the reader that reports it."""
    try:
        files = _fasta_files(inputs, lambda line: None)
    except Exception:  # noqa: BLE001 - the monomer path reports bad inputs in its own words
        return False
    for path in files:
        try:
            text = _read_text(path)
        except OSError:
            continue
        if any(":" in line for line in text.splitlines() if line and not line.startswith((">", ";", "#"))):
            return True
    return False


def separate_chains_note(inputs) -> str | None:
    """The one note of a monomer run whose FASTA input has a file of several records: they are
    predicted as separate chains, and ``--complex`` would predict each file as one complex (or None)."""
    try:
        files = _fasta_files(inputs, lambda line: None)
    except Exception:  # noqa: BLE001 - the monomer path reports bad inputs in its own words
        return None
    several = []
    for path in files:
        try:
            text = _read_text(path)
        except OSError:
            continue
        if sum(1 for line in text.splitlines() if line.startswith(">")) > 1:
            several.append(os.path.basename(path))
    if not several:
        return None
    shown = ", ".join(several[:3]) + (f" and {len(several) - 3} more" if len(several) > 3 else "")
    return (
        f"note: {shown}: several records in one file are predicted as separate chains; "
        "give --complex to predict each file as one complex"
    )


def _records(text: str) -> list[str]:
    """The file text cut at its headers, each piece padded with newlines so that its line numbers stay
    those of the file."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(">")]
    return [
        "\n" * s + "".join(lines[s : (starts[k + 1] if k + 1 < len(starts) else len(lines))])
        for k, s in enumerate(starts)
    ]


def _emit(caught, log) -> None:
    for w in caught:
        log(f"{'note' if issubclass(w.category, InputNote) else 'warning'}: {w.message}")


def collect_complexes(
    inputs, *, one_complex: bool, log: Callable[[str], None] = print
) -> tuple[list[ComplexTarget], list[tuple[str, str]]]:
    """Read every complex of ``inputs`` (a FASTA file, a folder of them, or a list of these).

    Args:
        inputs: as :func:`alphafold_mem.predict.inputs.input_files`.
        one_complex: every file is one complex (``--complex``); else every record is one complex,
            its chains joined by ``:``.
        log: receives one ``error:`` line per rejected complex or record (and input warnings).

    Returns:
        The valid complexes (unique names) and ``(name, error line)`` per rejected one.
    """
    found: list[ComplexTarget] = []
    rejected: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for path in _fasta_files(inputs, log):
        try:
            text = _read_text(path)
        except OSError as exc:
            rejected.append((os.path.basename(path), f"{path}: cannot be read ({exc.strerror or exc})"))
            continue
        pieces = [text] if one_complex else _records(text) or [text]
        for piece in pieces:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    complexes = complexes_from_text(piece, label=path, one_complex=one_complex)
                except InputError as exc:
                    _emit(caught, log)
                    rejected.append((_record_of(str(exc)) or os.path.basename(path), str(exc)))
                    continue
            _emit(caught, log)
            for cx in complexes:
                name = cx.name
                if name in seen:
                    seen[name] += 1
                    new = f"{name}_{seen[name]}"
                    log(f"warning: {path}: complex '{name}' repeats an id of this run; its outputs are named '{new}'")
                    name = new
                else:
                    seen[name] = 1
                line = cx.chains[0].line
                source = path if one_complex or line is None else f"{path}:{line}"
                found.append(ComplexTarget(cx, name, source, len(found) + len(rejected)))
    for _, message in rejected:
        log(f"error: {message}")
    return found, rejected


def _record_of(message: str) -> Optional[str]:
    marker = "record '"
    i = message.find(marker)
    j = message.find("'", i + len(marker)) if i >= 0 else -1
    return message[i + len(marker) : j] if j > 0 else None
