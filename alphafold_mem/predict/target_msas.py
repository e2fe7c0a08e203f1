"""The MSAs of prediction targets: ``--msa`` / ``--msa-dir`` files attached to the targets, parsed once
to validate them, their depth and Neff at 80 % identity measured (:mod:`alphafold_mem.data.neff`) and
``--min-msa-depth`` applied; an MSA that holds only the query gets the single-sequence warning."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable, Optional

from ..data import InputError, parse_msa
from ..data.alignment_layout import alignment_files, msa_row_cap
from ..data.fasta import standard_residues
from ..data.formats import GZIP_SUFFIX
from ..data.neff import neff
from .errors import PredictError
from .inputs import MSA_SUFFIXES
from .target import Rejected, Target
from .target_inputs import emit_warnings

__all__ = ["attach_msas", "measure_msa", "measure_searched", "read_msas"]


def _msa_files_in_dir(msa_dir: str, name: str) -> list[str]:
    found = []
    for suffix in MSA_SUFFIXES:
        for candidate in (f"{name}{suffix}", f"{name}{suffix}{GZIP_SUFFIX}"):
            path = os.path.join(msa_dir, candidate)
            if os.path.isfile(path):
                found.append(path)
    folder = os.path.join(msa_dir, name)
    if not found and os.path.isdir(folder):  # AF2/OpenFold chain folder: AF2's merge order
        found = [str(p) for p, _ in alignment_files(folder)]
    return found


def attach_msas(targets: list[Target], msa, msa_dir, n_rejected: int, reject) -> list[Target]:
    """Give the targets their ``--msa`` file or ``--msa-dir`` alignments; those without one in
    ``msa_dir`` are rejected. Alignment inputs keep their own."""
    if msa is not None:
        from_a3m = [t for t in targets if t.from_alignment]
        if from_a3m:
            raise PredictError(f"--msa {msa} given with an alignment input ({from_a3m[0].source}); give one of them")
        if len(targets) + n_rejected != 1:
            raise PredictError(
                f"--msa {msa} is for a single target but the input holds "
                f"{len(targets) + n_rejected}; use --msa-dir with <record id>.a3m files"
            )
        if not os.path.isfile(os.fspath(msa)):
            raise PredictError(f"{os.fspath(msa)}: MSA file not found")
        for t in targets:
            t.msa_files = (os.fspath(msa),)
        return targets
    if msa_dir is None:
        return targets
    msa_dir = os.fspath(msa_dir)
    if not os.path.isdir(msa_dir):
        raise PredictError(f"{msa_dir}: --msa-dir is not a directory")
    keep = []
    for t in targets:
        if t.from_alignment:
            keep.append(t)
            continue
        files = _msa_files_in_dir(msa_dir, t.name)
        if not files:
            reject(
                t.name,
                f"{t.source}: record '{t.name}': no alignment in {msa_dir} (looked for "
                f"{t.name}.a3m, {t.name}.sto and a folder {t.name}/)",
                t.order,
                len(t.sequence),
            )
            continue
        t.msa_files = tuple(files)
        keep.append(t)
    return keep


def read_msas(t: Target, single_sequence: bool, log) -> Optional[str]:
    """Parse ``t``'s MSA files (none with ``single_sequence``) into ``t.msas``; the error line of the
    first that does not parse, else None."""
    if single_sequence:
        t.msa_files, t.msas = (), []
    if not t.msa_files or t.msas:
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            t.msas = [parse_msa(f, query=t.sequence, max_sequences=msa_row_cap(f)) for f in t.msa_files]
        except InputError as exc:
            emit_warnings(caught, log)
            message = str(exc)
            return message if exc.record is not None else f"{message} (MSA for record '{t.name}')"
    emit_warnings(caught, log)
    return None


def measure_searched(
    targets: list[Target], min_msa_depth: int, log: Callable[[str], None] = print
) -> tuple[list[Target], list[Rejected]]:
    """After a search stage gave targets their MSAs: depth, Neff and ``min_msa_depth`` again
    (:func:`measure_msa`), as :func:`collect_targets` does for given MSAs; targets whose MSA files
    were measured already are not read again. An MSA that does not parse rejects its target."""
    kept, rejected = [], []
    for t in targets:
        try:
            problem = (
                measure_msa(t, min_msa_depth, log)
                if t.measured_files != t.msa_files
                else _depth_problem(t, min_msa_depth)
            )
        except InputError as exc:
            problem = str(exc) if exc.record else f"{exc} (MSA for record '{t.name}')"
        if problem:
            log(f"error: {problem}")
            rejected.append(Rejected(t.name, problem, t.order, len(t.sequence)))
        else:
            kept.append(t)
    return kept, rejected


def measure_msa(t: Target, min_msa_depth: int = 0, log: Callable[[str], None] = print) -> Optional[str]:
    """Set ``t.msa_depth`` (distinct rows, query included, AF2's per-file row caps) and ``t.neff``
    from ``t.msas`` (parsed here from ``t.msa_files`` when empty), warn when an MSA holds only the
    query, and return the rejection message when the depth is below ``min_msa_depth`` (else None).

    Raises:
        InputError: an MSA file that does not parse (only when ``t.msas`` is empty).
    """
    if t.msa_files and not t.msas:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reported when the file was first read
            t.msas = [parse_msa(f, query=t.sequence, max_sequences=msa_row_cap(f)) for f in t.msa_files]
    queries = [standard_residues(m.query)[0] for m in t.msas if m.depth]  # a J in row 0 is the query's X
    rows = list(dict.fromkeys([t.sequence] + queries + [s for m in t.msas for s in m.sequences[1:]]))
    t.msa_depth = len(rows)
    t.neff = neff(rows)
    t.msas = []  # parsed again when the target runs: a large batch never holds every MSA at once
    t.measured_files = t.msa_files
    if t.msa_files and t.msa_depth == 1:
        log(
            f"warning: {t.source}: record '{t.name}': the MSA ({', '.join(Path(f).name for f in t.msa_files)}) "
            "holds only the query (depth 1): this is single-sequence mode (expect low confidence)"
        )
    return _depth_problem(t, min_msa_depth)


def _depth_problem(t: Target, min_msa_depth: int) -> Optional[str]:
    if t.msa_depth < min_msa_depth:
        return (
            f"{t.source}: record '{t.name}': MSA depth {t.msa_depth} (Neff {t.neff.describe()}) "
            f"is below --min-msa-depth {min_msa_depth}"
        )
    return None
