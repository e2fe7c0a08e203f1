"""Templates of a complex, per entity (AF2-Multimer: the template search and featurisation run per
chain, ``pipeline_multimer._process_single_chain``; the chains' features are then joined along the
residues): :func:`complex_templates`.

For every entity (identical chains share it) the template hits come, as on the monomer route, from

* a hmmsearch against ``--template-db`` (AF2 v2.3) when the pipeline has one: the profile is the
  entity's UniRef90 alignment in its ``--msa-dir`` folder (``uniref90_hits.sto``/``.a3m``), else its
  first alignment there, else the query alone; hits go to
  ``<out>/<complex>/template_search/entity_<k>/pdb_hits.sto`` and are reused while the sequence,
  database and profile file are unchanged;
* otherwise the entity's folder in ``--msa-dir`` (``pdb70_hits.hhr``, ``hmm_output.sto``,
  ``pdb_hits.sto``: :func:`~alphafold_mem.data.alignment_layout.template_hits_file`).

Hits become templates with :meth:`~.stages.PipelineOptions.templates_from` (needs ``--mmcif-dir``),
then the monomer route's features of that sequence
(:func:`~alphafold_mem.data.features.templates.make_template_features`, the first ``max_templates``),
and :func:`~alphafold_mem.data.multimer_templates.assemble_templates` puts them at every copy's
residues: slot ``k`` of the complex holds each chain's ``k``-th template in that chain's columns and
zero masks everywhere else, so no template spans two chains.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..data.alignment_layout import alignment_files, template_hits_file
from ..data.complex import Complex
from ..data.features.templates import make_template_features
from ..data.msa import Msa, parse_msa
from ..data.multimer_features import entity_folder
from ..data.multimer_templates import MAX_TEMPLATES, assemble_templates
from ..io import atomic_write
from ..search.hmmsearch import search_templates
from ..search.settings import SearchError
from .errors import PredictError

__all__ = ["PROFILE_FILES", "complex_templates", "search_template_hits", "template_scores"]

#: The alignments of an entity folder the template search builds its profile from (AF2 v2.3: UniRef90).
PROFILE_FILES = ("uniref90_hits.sto", "uniref90_hits.a3m")


def complex_templates(
    cx: Complex, msa_dir, pipeline, out_dir, log: Callable[[str], None]
) -> tuple[dict[str, np.ndarray], dict]:
    """The template features and their record for complex ``cx``.

    Args:
        cx: the complex.
        msa_dir: the per-chain alignment folders (``None``: no folders).
        pipeline: :class:`~.stages.PipelineOptions` (``template_db``, ``mmcif_dirs``,
            ``max_templates``, ``max_template_date``...) or ``None`` (hits are then only reported).
        out_dir: the run's output folder (searched hits go under ``<out_dir>/<cx.name>/``).
        log: one line per entity with hits (used and dropped templates).

    Returns:
        ``(features, record)``: ``features`` is empty when no chain has a template, else
        ``template_aatype [T, N_res]`` int64, ``template_all_atom_positions [T, N_res, 37, 3]`` (Å),
        ``template_all_atom_mask [T, N_res, 37]``, ``template_mask [T]`` float32 with
        ``T = max(pipeline.max_templates, 4)``; ``record``: ``{"entities": [{"entity_id", "chains",
        "hits_file", "used", "hits"}...]}`` for the scores JSON.

    Raises:
        PredictError: the template search failed (pyhmmer missing, database unreadable).
        InputError: a bad ``max_template_date``.
    """
    per_entity: dict[int, dict] = {}
    entities = []
    for eid, sequence in cx.entities.items():
        chains = [c.chain_id for c in cx.chains_of(eid)]
        label = f"{cx.name} chain(s) {', '.join(chains)}"
        folder = entity_folder(msa_dir, cx, eid) if msa_dir is not None else None
        if pipeline is not None and pipeline.template_db is not None:
            hits = _search(cx, eid, sequence, folder, pipeline, out_dir, log)
        else:
            found = template_hits_file(folder) if folder is not None else None
            hits = os.fspath(found) if found is not None else None
        selection = None
        if pipeline is not None:
            selection = pipeline.templates_from(label, sequence, hits, log=log)
        elif hits is not None:
            log(f"note: {label}: template hits in {hits} but no --mmcif-dir; running without templates")
        if selection is not None and selection.templates:
            chosen = selection.templates[: pipeline.max_templates]
            per_entity[eid] = {k: v.numpy() for k, v in make_template_features(sequence, chosen).items()}
        entities.append(
            {
                "entity_id": eid,
                "chains": chains,
                "hits_file": hits,
                "used": selection.used if selection else [],
                "hits": [c.as_dict() for c in selection.choices] if selection else [],
            }
        )
    record = {"entities": entities}
    if not per_entity:
        return {}, record
    slots = max(MAX_TEMPLATES, pipeline.max_templates)
    return assemble_templates(cx, per_entity, max_templates=slots), record


def search_template_hits(cx: Complex, msa_dir, pipeline, out_dir, log: Callable[[str], None]) -> None:
    """The template search of every entity of ``cx`` against ``pipeline.template_db`` and nothing else
    (its hits written under ``<out_dir>/<cx.name>/template_search/``, or reused): ``predict --dap``'s
    launcher runs it once before the ranks, whose :func:`complex_templates` then reuse the hits.

    Raises:
        PredictError: the template search failed (pyhmmer missing, database unreadable).
    """
    for eid, sequence in cx.entities.items():
        folder = entity_folder(msa_dir, cx, eid) if msa_dir is not None else None
        _search(cx, eid, sequence, folder, pipeline, out_dir, log)


def template_scores(record: Optional[dict], config) -> dict:
    """The ``templates`` entry of a prediction's scores JSON: ``record`` of :func:`complex_templates`
    with ``used`` (every entity's templates) and ``used_by_model`` (an AF2-Multimer ``config`` with
    templates reads them; monomer weights on a complex run without; ``config`` None: False)."""
    record = record or {"entities": []}
    used = [name for e in record["entities"] for name in e["used"]]
    uses = bool(config is not None and config.multimer and config.template.enabled and used)
    return {"used": used, "used_by_model": uses, **record}


def _profile(folder: Optional[Path], sequence: str) -> tuple[Msa, Optional[str]]:
    """The search profile's alignment and its file (``None``: the query alone)."""
    if folder is not None:
        named = [folder / n for n in PROFILE_FILES if (folder / n).is_file()]
        files = named or [p for p, _ in alignment_files(folder)]
        if files:
            return parse_msa(files[0], query=sequence), os.fspath(files[0])
    rows = (sequence.upper(),)
    return Msa(rows, np.zeros((1, len(sequence)), np.int32), ("query",)), None


def _stamp(path: Optional[str]) -> Optional[list]:
    if path is None:
        return None
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def _search(cx: Complex, eid: int, sequence: str, folder, pipeline, out_dir, log) -> str:
    """hmmsearch of the entity's profile against ``pipeline.template_db`` (or the previous run's hits)."""
    where = Path(out_dir) / cx.name / "template_search" / f"entity_{eid}"
    hits, record_path = where / "pdb_hits.sto", where / "search.json"
    db = os.fspath(pipeline.template_db)
    if not os.path.isfile(db):
        raise PredictError(f"{db}: template sequence database not found")
    msa, source = _profile(folder, sequence)
    want = {"sequence": sequence.upper(), "database": _stamp(db), "profile_from": _stamp(source)}
    try:
        with open(record_path) as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        old = {}
    if hits.is_file() and all(old.get(k) == v for k, v in want.items()):
        log(f"search: {cx.name} entity {eid} templates: reusing {hits} ({old.get('hits')} hits)")
        return os.fspath(hits)
    where.mkdir(parents=True, exist_ok=True)
    try:
        stats = search_templates(msa, db, hits, cpus=pipeline.cpus, name=f"{cx.name}_entity_{eid}")
    except SearchError as exc:  # pyhmmer missing, database unreadable: the complex fails
        raise PredictError(f"template search of {cx.name} entity {eid}: {exc}") from None
    with atomic_write(record_path) as tmp, open(tmp, "w") as fh:
        json.dump({**want, **stats}, fh, indent=1)
    log(
        f"search: {cx.name} entity {eid} templates: {stats['hits']} hits in {os.path.basename(db)} "
        f"(profile {os.path.basename(source) if source else 'query alone'}, {stats['seconds']:.1f} s) -> {hits}"
    )
    return os.fspath(hits)
