"""Template search (AF2 v2.3's ``HmmsearchTemplateSearcher``): a profile HMM built from the query's MSA
(``hmmbuild --hand``: one match state per query residue) searched with hmmsearch against a
``pdb_seqres.txt``-style FASTA (``>1abc_A mol:protein length:N  NAME``), with AF2's options
(:data:`~.settings.HMMSEARCH_OPTIONS`). The hits are written in hmmsearch's ``-A`` Stockholm form and
read back with :func:`alphafold_mem.data.template_hits.parse_hmmsearch_sto`, so a search run here and
an ``hmm_output.sto`` from AF2/OpenFold go through the same reader. The database is read in chunks
with the whole file's ``Z``, as in :mod:`.jackhmmer`.
"""

from __future__ import annotations

import io
import os
import time
from typing import Optional

from ..data.msa import Msa
from ..io import atomic_write
from .jackhmmer import count_sequences
from .settings import HMMSEARCH_OPTIONS, SearchError, require_pyhmmer

__all__ = ["build_profile", "search_templates", "MAX_PROFILE_SEQUENCES"]

MAX_PROFILE_SEQUENCES = 10_000  # AF2 pipeline: the UniRef90 MSA truncated to uniref_max_hits


def build_profile(msa: Msa, name: str = "query"):
    """Profile HMM with one match state per query column (``hmmbuild --hand``; AF2 deduplicates and
    keeps the first 10,000 rows). Returns a ``pyhmmer.plan7.HMM`` with ``M = N_res``."""
    pyhmmer = require_pyhmmer()
    alphabet = pyhmmer.easel.Alphabet.amino()
    rows = list(dict.fromkeys(msa.sequences))[:MAX_PROFILE_SEQUENCES]
    seqs = [pyhmmer.easel.TextSequence(name=f"row{i}".encode(), sequence=r) for i, r in enumerate(rows)]
    text = pyhmmer.easel.TextMSA(name=name.encode(), sequences=seqs)
    text.reference = "x" * msa.length
    builder = pyhmmer.plan7.Builder(alphabet, architecture="hand")
    hmm, _, _ = builder.build_msa(text.digitize(alphabet), pyhmmer.plan7.Background(alphabet))
    return hmm


def search_templates(
    msa: Msa,
    database,
    out_sto,
    *,
    cpus: int = 1,
    chunk_sequences: int = 200_000,
    z: Optional[float] = None,
    name: str = "query",
) -> dict:
    """hmmsearch of ``msa``'s profile against ``database``; writes the hits to ``out_sto``.

    Args:
        msa: the query's MSA (row 0 = query), e.g. its UniRef90 hits.
        database: ``pdb_seqres.txt``-style FASTA.
        out_sto: Stockholm file to write (hmmsearch ``-A`` layout: ``<pdb_id>_<chain>/<start>-<end>``
            rows, ``#=GS DE`` descriptions).
        cpus: hmmsearch threads.
        chunk_sequences: database sequences in memory at once.
        z: ``-Z`` (default: the number of sequences in the database).

    Returns:
        ``{"hits": N, "searched": n, "seconds": s}``.

    Raises:
        SearchError: pyhmmer missing or the database unreadable.
    """
    pyhmmer = require_pyhmmer()
    database = os.fspath(database)
    if not os.path.isfile(database):
        raise SearchError(f"{database}: template sequence database not found")
    t0 = time.perf_counter()
    hmm = build_profile(msa, name)
    alphabet = hmm.alphabet
    z = float(z if z is not None else count_sequences(database))
    tophits, searched = [], 0
    try:
        with pyhmmer.easel.SequenceFile(database, digital=True, alphabet=alphabet) as sf:
            while True:
                block = sf.read_block(sequences=chunk_sequences)
                if not len(block):
                    break
                searched += len(block)
                tophits.extend(pyhmmer.hmmer.hmmsearch(hmm, block, cpus=cpus, Z=z, **HMMSEARCH_OPTIONS))
    except (ValueError, OSError, EOFError) as exc:
        raise SearchError(f"{database}: cannot search this database ({' '.join(str(exc).split())[:200]})") from None
    hits = tophits[0].merge(*tophits[1:]) if len(tophits) > 1 else (tophits[0] if tophits else None)
    n_hits = 0
    with atomic_write(out_sto) as tmp, open(tmp, "w") as fh:
        if hits is not None and len(hits):
            hits.sort()
            buf = io.BytesIO()
            hits.to_msa(alphabet, trim=True, all_consensus_cols=True).write(buf, "stockholm")
            fh.write(buf.getvalue().decode())
            n_hits = sum(1 for h in hits if h.included)
        else:
            fh.write("# STOCKHOLM 1.0\n//\n")
    return {"hits": n_hits, "searched": searched, "seconds": round(time.perf_counter() - t0, 3)}
