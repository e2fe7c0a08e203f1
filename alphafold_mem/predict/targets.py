"""Prediction targets: collect FASTA records / alignment inputs / structure chains and their MSAs, and
validate all of them before any model work: :func:`collect_targets`. Which files are read:
:mod:`.inputs`; each kind of file as targets: :mod:`.target_inputs`; the record: :mod:`.target`; MSAs
attached, parsed and measured: :mod:`.target_msas`.

A FASTA file goes through :func:`alphafold_mem.data.parse_fasta` whole; only if it is rejected is it
split at its headers so that every other record still runs. MSAs are parsed once here to validate
them (count their rows, compute Neff at 80 % identity, :mod:`alphafold_mem.data.neff`) and parsed
again when the target runs, so a large batch never holds all of its alignments in memory. Every
rejection is one line naming file, record and position. An MSA that holds only the query gets the
single-sequence warning; ``min_msa_depth`` rejects targets with fewer distinct rows.
"""

from __future__ import annotations

import itertools
from typing import Callable, Optional

from ..data.names import sanitize_name, unique_name
from .errors import PredictError
from .inputs import FASTA_SUFFIXES, MSA_SUFFIXES, input_files
from .target import DESCRIPTION_CHARS, DESCRIPTION_FULL_CHARS, Rejected, Target, description_fields
from .target_inputs import TARGETS_OF
from .target_msas import attach_msas, measure_msa, measure_searched, read_msas

__all__ = [
    "PredictError",
    "Target",
    "Rejected",
    "collect_targets",
    "measure_msa",
    "measure_searched",
    "FASTA_SUFFIXES",
    "MSA_SUFFIXES",
    "DESCRIPTION_CHARS",
    "DESCRIPTION_FULL_CHARS",
    "description_fields",
]


def _unique_names(targets: list[Target], log) -> None:
    seen: dict[str, int] = {}
    for t in targets:
        new = unique_name(t.name, seen)
        if new != t.name:
            log(f"warning: {t.source}: record '{t.name}' repeats an id of this run; its outputs are named '{new}'")
            t.name = new


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _log_renames(targets: list[Target], log) -> None:
    """One ``note:`` line per target whose record id was changed to make a file name."""
    for t in targets:
        if t.input_id is not None and sanitize_name(t.input_id, "") != t.input_id:
            log(
                f"note: {t.source}: record '{_shown(t.input_id)}' written as '{t.name}' (output file names "
                "keep only the letters A-Z a-z, digits and . _ -, at most 64 characters)"
            )


def collect_targets(
    inputs,
    msa=None,
    msa_dir=None,
    log: Callable[[str], None] = print,
    *,
    single_sequence: bool = False,
    min_msa_depth: int = 0,
) -> tuple[list[Target], list[Rejected]]:
    """Parse and validate every input and MSA before any model work.

    Args:
        inputs: a FASTA file, an ``.a3m``/``.sto`` (first row = query), an mmCIF/PDB file (one target
            per protein chain), a directory of such files (:mod:`.inputs`), or a list of these.
        msa: one alignment file for a single-target input.
        msa_dir: directory with ``<id>.a3m``/``<id>.sto`` or a folder ``<id>/`` of alignment files.
        log: receives ``error:``/``warning:``/``note:`` lines as they are found (a ``note:`` per record
            id changed to make a file name: ``record 'X' written as 'Y'``).
        single_sequence: ignore alignments (alignment inputs give their query only).
        min_msa_depth: reject targets whose MSA has fewer distinct rows (query included; 1 without
            an MSA).

    Returns:
        The valid targets (unique names) and one :class:`Rejected` per rejected record or MSA.

    Raises:
        PredictError: no usable input at all, or MSA options that do not fit the input.
    """
    targets: list[Target] = []
    rejected: list[Rejected] = []
    counter = itertools.count()

    def reject(name: str, message: str, order: Optional[int] = None, length: Optional[int] = None) -> None:
        log(f"error: {message}")
        rejected.append(Rejected(name, message, next(counter) if order is None else order, length))

    for path, kind in input_files(inputs, log):
        for item in TARGETS_OF[kind](path, log):
            if isinstance(item, Target):
                item.order = next(counter)
                targets.append(item)
            else:
                reject(*item)
    _log_renames(targets, log)
    _unique_names(targets, log)
    targets = attach_msas(targets, msa, msa_dir, len(rejected), reject)
    valid = []
    for t in targets:
        problem = read_msas(t, single_sequence, log) or measure_msa(t, min_msa_depth, log)
        if problem:
            reject(t.name, problem, t.order, len(t.sequence))
        else:
            valid.append(t)
    return valid, rejected
