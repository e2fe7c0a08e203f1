"""The searches of a ``predict --dap P`` run of complexes, run once before its P ranks start
(:func:`search_before_ranks`, called by :func:`alphafold_mem.cli.complex_args.run_complex` in the
launcher): every complex's alignments (``--db`` / ``--uniprot-db`` jackhmmer or ``--msa-server``,
:class:`~.complex_msas.ComplexSearch`) into ``<out>/<id>/msas/`` and its template hits (``--template-db``,
:func:`~.complex_templates.search_template_hits`) into ``<out>/<id>/template_search/``, as one process
would search them. The ranks then run with ``searched=True``
(:func:`~.complex_run.predict_complexes`): they read those files, search nothing, and build the same
features as one process would; so ``--dap 2`` with a search equals one process.

Searching in the launcher, not on rank 0 inside the process group, keeps a long search out of the
group's collectives (their timeout) and the other ranks' devices idle only while the model runs. A
complex whose search fails is one ``error:`` line here and is left out of the ranks' run (exit 1); an
unusable input is reported here too (the ranks run the named complexes only, quietly).
"""

from __future__ import annotations

from typing import Callable, Optional

from ..data.errors import InputError
from ..search.settings import SearchError
from .complex_msas import ComplexSearch
from .complex_target import collect_complexes
from .complex_templates import search_template_hits
from .errors import PredictError

__all__ = ["search_before_ranks"]


def search_before_ranks(
    inputs,
    out_dir,
    *,
    one_complex: bool = False,
    msa_dir=None,
    msa_search: Optional[ComplexSearch] = None,
    pipeline=None,
    log: Callable[[str], None] = print,
) -> tuple[list[str], list[str]]:
    """Search every complex of ``inputs`` (module docstring): with ``msa_search`` its alignments, with
    ``pipeline.template_db`` its template hits (from ``msa_dir``'s folders, or the searched ones).
    Returns ``(names, errors)``: the complexes whose searches succeeded, for the ranks, and one message
    per unusable input or failed search (each logged as one ``error:`` line; the input's own lines
    are logged by :func:`~.complex_target.collect_complexes`)."""
    found, rejected = collect_complexes(inputs, one_complex=one_complex, log=log)
    errors = [message for _, message in rejected]
    if msa_search is not None:
        msa_search.note_public_server(len(found), log)
    names = []
    for t in found:
        try:
            root = msa_search.alignments(t.cx, out_dir, log) if msa_search is not None else msa_dir
            if pipeline is not None and pipeline.template_db is not None:
                search_template_hits(t.cx, root, pipeline, out_dir, log)
        except (SearchError, PredictError, InputError, OSError) as exc:
            what = "MSA server" if msa_search is not None and msa_search.msa_server else "search"
            message = f"{t.source}: complex '{t.name}': {what}: {' '.join(str(exc).split())}"
            log(f"error: {message}")
            errors.append(message)
            continue
        names.append(t.name)
    return names, errors
