"""What produced a finished target, and whether an existing result may stand for this run.

Every prediction's ``<id>/<model>_seed_<s>_scores.json`` carries a ``provenance`` record: the query
sequence, a SHA-256 digest of its MSA files' contents (``null`` in single-sequence mode), a SHA-256
digest of the weights file, the options that change the result (preset, number of recycles, precision, seed, and with a
search/template/relax stage its settings and a digest of the target's template hits) and the output
files written. Before any model work, :func:`partition_finished` compares the record of each
target whose scores file exists with the record this run would write:

* equal and every listed output present -> skipped (``skip:`` line);
* equal but an output missing -> run again (``rerun:`` line);
* different, or no record (written by an older version) -> the target fails with one line naming
  what changed, unless ``overwrite`` (then it is recomputed).

The comparison is repeated when a target's outputs are about to be written
(:func:`check_still_ours`): a scores file another run wrote meanwhile with other inputs or options is
not replaced (unless ``overwrite``); the target fails in one line instead.

Memory options (chunking, low-memory attention, offload) are left out: they give the reference
result (``tests/test_memory.py``). Output files carry file names, not local paths, unless
``record_paths`` (:func:`shareable_scores`).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Callable, Optional

from .targets import PredictError, Rejected, Target

__all__ = [
    "file_digest",
    "msa_digest",
    "provenance_record",
    "describe_changes",
    "partition_finished",
    "shareable_scores",
    "check_still_ours",
    "pipeline_settings",
    "RESULT_OPTIONS",
]

#: Options of :func:`alphafold_mem.predict` recorded because they change the result.
RESULT_OPTIONS = ("preset", "num_recycles", "precision", "seed", "pipeline")
#: Result-changing options recorded only when set (records without them stay valid).
OPTIONAL_RESULT_OPTIONS = ("recycle_early_stop_tolerance",)

_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str) -> str:
    """SHA-256 (hex) of a file's bytes, cached per (path, size, mtime) for the process."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def msa_digest(files) -> Optional[str]:
    """SHA-256 over the contents of the MSA files in order (``None`` without files); file names and
    locations do not enter it."""
    if not files:
        return None
    return hashlib.sha256("\n".join(file_digest(f) for f in files).encode()).hexdigest()


def pipeline_settings(pipeline) -> Optional[dict]:
    """The result-changing settings of a :class:`~.stages.PipelineOptions` (``None`` without one):
    template selection and relaxation. Database and search settings enter through the MSA digest
    (searched MSAs are files like given ones), the template database through the hits digest. Names
    only, no local paths: ``mmcif_dirs`` are the names of the resolved folders (symbolic links
    followed), and with any, ``mmcif_paths_sha256`` (a SHA-256 of their resolved paths) tells two
    folders of one name apart (``data/mmcif``, ``data/search/mmcif``)."""
    if pipeline is None:
        return None
    resolved = [os.path.realpath(d) for d in pipeline.mmcif_dirs]
    settings = {
        "template_db": os.path.basename(pipeline.template_db) if pipeline.template_db else None,
        "mmcif_dirs": [os.path.basename(d) for d in resolved],
        "max_template_date": pipeline.max_template_date,
        "max_templates": pipeline.max_templates,
        "obsolete": bool(pipeline.obsolete),
        "relax": bool(pipeline.relax),
    }
    if resolved:
        settings["mmcif_paths_sha256"] = hashlib.sha256("\n".join(resolved).encode()).hexdigest()
    return settings


def provenance_record(t: Target, weights_sha256: Optional[str], options: dict, hits: Optional[str] = None) -> dict:
    """The record written into a prediction's scores JSON (``outputs`` is added when the files are known);
    ``hits``: the target's template hits file, if any."""
    record = {
        "sequence": t.sequence,
        "msa_sha256": msa_digest(t.msa_files),
        "msa_files": [os.path.basename(f) for f in t.msa_files],
        "weights_sha256": weights_sha256,
        "options": {k: options.get(k) for k in RESULT_OPTIONS},
    }
    record["options"].update({k: options[k] for k in OPTIONAL_RESULT_OPTIONS if options.get(k) is not None})
    if hits is not None and os.path.isfile(hits):
        record["template_hits_sha256"] = file_digest(hits)
    return record


def _short(digest: Optional[str]) -> str:
    return "none" if digest is None else digest[:12]


def describe_changes(old: Optional[dict], new: dict) -> list[str]:
    """What differs between a stored record and this run's, as phrases (``[]`` when nothing does)."""
    if not isinstance(old, dict):
        return ["provenance (the result was written without a provenance record, by an older version)"]
    changes = []
    if old.get("sequence") != new["sequence"]:
        before = old.get("sequence") or ""
        if len(before) != len(new["sequence"]):
            changes.append(f"sequence ({len(new['sequence'])} residues now, {len(before)} before)")
        else:
            k = next(i for i, (a, b) in enumerate(zip(new["sequence"], before)) if a != b)
            changes.append(f"sequence (residue {k + 1}: {new['sequence'][k]!r} now, {before[k]!r} before)")
    if old.get("msa_sha256") != new["msa_sha256"]:
        changes.append(f"MSA (sha256 {_short(new['msa_sha256'])} now, {_short(old.get('msa_sha256'))} before)")
    if old.get("template_hits_sha256") != new.get("template_hits_sha256"):
        changes.append(
            f"template hits (sha256 {_short(new.get('template_hits_sha256'))} now, "
            f"{_short(old.get('template_hits_sha256'))} before)"
        )
    if old.get("weights_sha256") != new["weights_sha256"]:
        changes.append(
            f"weights (sha256 {_short(new['weights_sha256'])} now, {_short(old.get('weights_sha256'))} before)"
        )
    old_opts = dict(old.get("options") or {})
    old_opts["pipeline"] = _as_recorded_before(old_opts.get("pipeline"), new["options"].get("pipeline"))
    for key in RESULT_OPTIONS + OPTIONAL_RESULT_OPTIONS:
        if old_opts.get(key) != new["options"].get(key):
            changes.append(f"{key} ({new['options'].get(key)!r} now, {old_opts.get(key)!r} before)")
    return changes


def _as_recorded_before(old: object, new: Optional[dict]) -> object:
    """A stored pipeline record without ``mmcif_paths_sha256`` (earlier versions) is compared on the
    folder names alone."""
    if isinstance(old, dict) and isinstance(new, dict) and "mmcif_paths_sha256" not in old:
        if "mmcif_paths_sha256" in new:
            return dict(old, mmcif_paths_sha256=new["mmcif_paths_sha256"])
    return old


def _read_record(path: str) -> tuple[bool, Optional[dict]]:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return False, None
    return True, data.get("provenance") if isinstance(data, dict) else None


def partition_finished(
    targets: list[Target],
    out_dir: str,
    weights_path: str,
    options: dict,
    *,
    overwrite: bool,
    record_paths: bool = False,
    log: Callable[[str], None] = print,
    pipeline=None,
    output_name: str = "{id}",
) -> tuple[list[Target], list[Target], list[Rejected]]:
    """Split targets into ``(to run, to skip, conflicts)`` (rules: module docstring) and attach this
    run's record to every target (``t.provenance``). ``options``: :data:`RESULT_OPTIONS` but
    ``pipeline``, which comes from the :class:`~.stages.PipelineOptions` ``pipeline`` (or None).

    A conflict is a :class:`~.targets.Rejected` whose message names the scores file and what changed.
    ``output_name``: the outputs' base name relative to ``out_dir`` (``{id}``: the target name).
    """
    weights_sha = file_digest(weights_path) if os.path.isfile(weights_path) else None
    options = dict(options, pipeline=pipeline_settings(pipeline))
    hits = pipeline.hits_file if pipeline is not None else None
    todo, skipped, conflicts = [], [], []
    for t in targets:
        t.provenance = provenance_record(t, weights_sha, options, hits(t) if hits else None)
        t.record_paths = record_paths
        t.overwrite = overwrite
        scores = os.path.join(out_dir, output_name.format(id=t.name) + "_scores.json")
        if not os.path.exists(scores) or overwrite:
            todo.append(t)
            continue
        readable, old = _read_record(scores)
        changes = describe_changes(old, t.provenance) if readable else ["scores file (unreadable)"]
        if changes:
            message = (
                f"{t.source}: record '{t.name}': {scores} exists but was produced from another "
                f"{'; '.join(changes)}; use --overwrite to replace it, or another --out"
            )
            log(f"error: {message}")
            conflicts.append(Rejected(t.name, message, t.order, len(t.sequence)))
            continue
        here = os.path.dirname(scores)
        missing = [f for f in old.get("outputs") or [] if not os.path.exists(os.path.join(here, f))]
        if missing:
            log(f"rerun: {t.name}: outputs incomplete in {here} (missing {', '.join(missing)})")
            todo.append(t)
        else:
            skipped.append(t)
    return todo, skipped, conflicts


def check_still_ours(t: Target, scores: str) -> None:
    """Before the outputs of ``t`` are written: a ``scores`` file that exists now must carry this run's
    record (written by an identical run meanwhile), unless the run replaces results (``overwrite``).

    Raises:
        PredictError: the file was produced from other inputs or options (one line naming what changed).
    """
    record = getattr(t, "provenance", None)
    if not record or getattr(t, "overwrite", False) or not os.path.exists(scores):
        return
    readable, old = _read_record(scores)
    changes = describe_changes(old, record) if readable else ["scores file (unreadable)"]
    if changes:
        raise PredictError(
            f"{t.source}: record '{t.name}': {scores} was written meanwhile by another run from another "
            f"{'; '.join(changes)}; not replaced (use --overwrite to replace it, or another --out)"
        )


def shareable_scores(scores: dict, t: Target, outputs: dict) -> dict:
    """``scores`` with the provenance record, Neff and output list added, and local paths (weights,
    input, MSA and template hits files) reduced to file names (paths relative to the output
    directory for files inside it, such as a search's MSAs) unless ``t.record_paths``."""
    out = dict(scores)
    if not t.record_paths:
        here = os.path.dirname(os.path.abspath(outputs["scores"])) if outputs.get("scores") else None
        source, _, line = t.source.rpartition(":")
        out["source"] = (
            f"{os.path.basename(source)}:{line}" if source and line.isdigit() else os.path.basename(t.source)
        )
        out["msa_files"] = [_shareable(f, here) for f in t.msa_files]
        if out.get("weights"):
            out["weights"] = os.path.basename(out["weights"])
        if isinstance(out.get("templates"), dict) and out["templates"].get("hits_file"):
            out["templates"] = dict(out["templates"], hits_file=_shareable(out["templates"]["hits_file"], here))
    if t.neff is not None:
        out["msa_neff_80"] = round(t.neff.value, 2)
        out["msa_neff_80_exact"] = t.neff.exact
    out["provenance"] = dict(t.provenance, outputs=sorted(os.path.basename(p) for p in outputs.values()))
    return out


def _shareable(path: str, out_dir: Optional[str]) -> str:
    """``path`` relative to ``out_dir`` when it lies inside it, else its file name."""
    full = os.path.abspath(path)
    if out_dir and os.path.commonpath([full, out_dir]) == out_dir:
        return os.path.relpath(full, out_dir)
    return os.path.basename(path)
