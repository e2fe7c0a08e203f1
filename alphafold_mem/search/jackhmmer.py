"""MSA search with jackhmmer (pyhmmer, HMMER3 in Python): :func:`search_database` searches one
query against one FASTA database with AF2's settings (:mod:`.settings`) and returns A3M rows, best
E-value first, deduplicated, query first.

Large databases are streamed: :func:`count_sequences` reads the file once in 16 MiB pieces to get
``Z`` (unless given), then the database is read ``chunk_sequences`` at a time; each chunk runs the
full jackhmmer iteration with the whole database's ``Z`` (so E-values are those of the whole
database) and its hits are merged, which is how AF2's Colab notebook streams UniRef90/MGnify
(``jackhmmer.Jackhmmer(num_streamed_chunks=..., z_value=...)``). With a database smaller than one
chunk this is exactly one jackhmmer run. ``cpus`` chunks are searched at once (pyhmmer releases the
GIL); at most that many chunks are in memory.
"""

from __future__ import annotations

import concurrent.futures as cf
import gzip
import os
import time
from dataclasses import dataclass
from typing import Optional

from tqdm import tqdm

from .alignments import stockholm_to_a3m_rows
from .settings import JackhmmerSettings, SearchError, require_pyhmmer

__all__ = ["DatabaseHits", "search_database", "count_sequences"]


@dataclass
class DatabaseHits:
    """A3M result of one query against one database.

    Attributes:
        names: row names (query first; hits as ``<target>/<start>-<end> <description>``).
        rows: A3M rows (query columns upper case / ``-``, insertions lower case).
        evalues: per row (the query: 0.0).
        searched: sequences searched; z: the ``Z`` used; seconds: wall time.
    """

    names: list
    rows: list
    evalues: list
    searched: int
    z: float
    seconds: float

    @property
    def depth(self) -> int:
        return len(self.rows)


def count_sequences(path) -> int:
    """Number of FASTA records (``>`` at a line start) in ``path`` (``.gz`` too), read in 16 MiB pieces."""
    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    n, last = 0, b"\n"
    with opener(path, "rb") as fh:
        while True:
            block = fh.read(16 << 20)
            if not block:
                return n
            n += block.count(b"\n>") + (1 if last == b"\n" and block[:1] == b">" else 0)
            last = block[-1:]


def _search_chunk(pyhmmer, query, block, settings: JackhmmerSettings, z: float):
    """Iterate jackhmmer on one chunk; return ``[(name, a3m_row, evalue)]`` for its hits."""
    alphabet = query.alphabet
    pipeline = pyhmmer.plan7.Pipeline(alphabet, **settings.pipeline_options(z))
    builder = pyhmmer.plan7.Builder(alphabet, seed=42, architecture="hand")  # HMMER jackhmmer's builder
    result = None
    for result in pipeline.iterate_seq(query, block, builder):
        if result.iteration >= settings.iterations or result.converged:
            break
    if result is None:
        return []
    evalue = {}
    for hit in result.hits:
        if hit.included:
            evalue[_text(hit.name)] = float(hit.evalue)
    msa = result.msa
    if hasattr(msa, "textize"):
        msa = msa.textize()
    names = [_text(s.name) for s in msa.sequences]
    descs = [_text(s.description) for s in msa.sequences]
    aligned = list(msa.alignment)
    if not aligned:
        return []
    query_row = aligned[0].replace("-", "").replace(".", "").upper()
    if names[0] != _text(query.name) or query_row != _text(query.textize().sequence).upper():
        raise SearchError(f"jackhmmer's alignment does not start with the full query ({names[0]})")
    rows = stockholm_to_a3m_rows(aligned)
    out = []
    for name, desc, row in zip(names[1:], descs[1:], rows[1:]):
        target = name.rsplit("/", 1)[0]
        label = f"{name} {desc}".strip() if desc and desc != "None" else name
        out.append((label, row, evalue.get(target, float("inf"))))
    return out


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def search_database(
    name: str,
    sequence: str,
    database,
    settings: Optional[JackhmmerSettings] = None,
    *,
    cpus: int = 1,
    progress: bool = True,
    label: str = "",
) -> DatabaseHits:
    """jackhmmer of one query against one FASTA database (streamed in chunks).

    Args:
        name: the query's name (first A3M row); sequence: its residues (``N_res``).
        database: a protein FASTA file (plain or ``.gz``).
        settings: :class:`~.settings.JackhmmerSettings` (default: AF2's).
        cpus: chunks searched at once.
        progress: show a tqdm bar (sequences searched) on stderr.
        label: the bar's text (default ``<name> vs <database file>``).

    Returns:
        :class:`DatabaseHits`: the query then up to ``max_sequences - 1`` distinct hit rows, best
        E-value first.

    Raises:
        SearchError: pyhmmer missing, the database unreadable or not protein.
    """
    pyhmmer = require_pyhmmer()

    settings = settings or JackhmmerSettings()
    database = os.fspath(database)
    if not os.path.isfile(database):
        raise SearchError(f"{database}: sequence database not found")
    t0 = time.perf_counter()
    z = settings.z if settings.z is not None else count_sequences(database)
    alphabet = pyhmmer.easel.Alphabet.amino()
    query = pyhmmer.easel.TextSequence(name=name.encode(), sequence=sequence.upper()).digitize(alphabet)
    found, searched = [], 0
    bar = tqdm(
        total=int(z),
        unit="seq",
        unit_scale=True,
        disable=not progress,
        leave=True,
        desc=label or f"{name} vs {os.path.basename(database)}",
    )
    try:
        with (
            pyhmmer.easel.SequenceFile(database, digital=True, alphabet=alphabet) as sf,
            cf.ThreadPoolExecutor(max_workers=max(1, cpus)) as pool,
        ):
            pending: list = []
            while True:
                block = sf.read_block(sequences=settings.chunk_sequences)
                if not len(block):
                    break
                pending.append((len(block), pool.submit(_search_chunk, pyhmmer, query, block, settings, z)))
                while len(pending) >= max(1, cpus):
                    n, fut = pending.pop(0)
                    found.extend(fut.result())
                    searched += n
                    bar.update(n)
            for n, fut in pending:
                found.extend(fut.result())
                searched += n
                bar.update(n)
    except (ValueError, OSError, EOFError) as exc:
        raise SearchError(f"{database}: cannot search this database ({' '.join(str(exc).split())[:200]})") from None
    finally:
        bar.close()
    found.sort(key=lambda x: x[2])  # stable: chunk order breaks ties
    query_row = sequence.upper()
    names, rows, evalues, seen = [name], [query_row], [0.0], {query_row}
    for label_, row, ev in found:
        if len(rows) >= settings.max_sequences:
            break
        if row in seen:
            continue
        seen.add(row)
        names.append(label_)
        rows.append(row)
        evalues.append(ev)
    return DatabaseHits(names, rows, evalues, searched, float(z), time.perf_counter() - t0)
