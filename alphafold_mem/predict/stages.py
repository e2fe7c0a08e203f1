"""The stages ``predict`` runs around the model when asked: sequence search before the features
(:mod:`alphafold_mem.search`), templates from hits, and Amber relaxation after the outputs
(:mod:`.relax`). :class:`PipelineOptions` carries the options; the runner calls :meth:`~PipelineOptions.search`
once for the run, :meth:`~PipelineOptions.templates` per target while building features and
:meth:`~PipelineOptions.relax_target` per target after its outputs are written.

With ``msa_server`` (``--msa-server URL``) the targets without an MSA get theirs from an MMseqs2 MSA server
(ColabFold's protocol, :mod:`alphafold_mem.search.msa_server`), cached by sequence under ``<out>/msa_server/``;
a target whose ticket fails is left out with one line and the others continue.

Template hits come from the search (``<out>/<id>/pdb_hits.sto``) or, without a template database,
from the target's alignment folder (``pdb70_hits.hhr``, ``hmm_output.sto``, ``pdb_hits.sto``: OpenFold /
OpenProteinSet layout); they need ``mmcif_dirs`` to become templates.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..data.fasta import standard_residues
from ..data.msa import parse_msa
from ..data.templates_from_hits import parse_obsolete, templates_from_hit_file
from ..search import (
    PUBLIC_SERVER,
    JackhmmerSettings,
    MsaServerOptions,
    SearchError,
    SearchOptions,
    fetch_server_msa,
    search_target,
)
from ..search.msa_server import TERMS
from .outputs import write_json

__all__ = ["PipelineOptions", "TEMPLATE_HIT_FILES"]

TEMPLATE_HIT_FILES = ("pdb70_hits.hhr", "hmm_output.sto", "pdb_hits.sto")


@dataclass
class PipelineOptions:
    """Search, template and relaxation options of one ``predict`` run.

    Attributes:
        databases: FASTA databases for jackhmmer (``--db``); template_db: pdb_seqres file (``--template-db``).
        mmcif_dirs: where template mmCIFs are (``--mmcif-dir``, repeatable).
        max_template_date: ``YYYY-MM-DD``; obsolete: path of ``obsolete.dat``.
        max_templates: templates per target (AF2: 4).
        cpus, iterations, max_sequences, z: search settings (see :class:`~alphafold_mem.search.JackhmmerSettings`).
        relax: run Amber relaxation; relax_device: ``cpu``/``cuda``.
        progress: tqdm bars during searches.
        msa_server: base URL of an MMseqs2 MSA server (``--msa-server``; ColabFold's public one is
            :data:`alphafold_mem.search.PUBLIC_SERVER`, see its terms in :mod:`alphafold_mem.search.msa_server`);
            msa_server_mode: ``env`` (UniRef30 + ColabFoldDB) or ``all`` (UniRef30 only).
        msa_server_options: further :class:`~alphafold_mem.search.MsaServerOptions` fields (poll interval, ...).
    """

    databases: tuple = ()
    template_db: Optional[str] = None
    mmcif_dirs: tuple = ()
    max_template_date: Optional[str] = None
    obsolete: Optional[str] = None
    max_templates: int = 4
    cpus: int = 1
    iterations: int = 1
    max_sequences: int = 10_000
    z: Optional[float] = None
    relax: bool = False
    relax_device: str = "cpu"
    progress: bool = True
    msa_server: Optional[str] = None
    msa_server_mode: str = "env"
    msa_server_options: dict = field(default_factory=dict)
    log: Callable[[str], None] = print
    _hits: dict = field(default_factory=dict, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.msa_server is not None:  # a bad URL or mode is one line before any work
            MsaServerOptions(self.msa_server, self.msa_server_mode, **self.msa_server_options)

    @property
    def searching(self) -> bool:
        return bool(self.databases) or self.template_db is not None or self.msa_server is not None

    def search(self, targets, out_dir: str, overwrite: bool = False) -> list:
        """Search every target (``--db``/``--template-db``); targets without an MSA get the search's
        A3Ms. Returns ``[(target, error message)]`` for targets whose search failed (they are left out)."""
        failed = []
        for t in targets:
            folder = os.path.dirname(t.msa_files[0]) if t.msa_files else None
            for name in TEMPLATE_HIT_FILES:  # OpenFold layout: hits next to the MSAs
                if folder and os.path.isfile(os.path.join(folder, name)):
                    self._hits.setdefault(t.name, os.path.join(folder, name))
        if not self.searching:
            return failed
        if self.msa_server is not None:
            failed += self._server_msas(targets, out_dir)
            gone = {id(t) for t, _ in failed}
            targets = [t for t in targets if id(t) not in gone]
        if not self.databases and self.template_db is None:
            return failed
        settings = JackhmmerSettings(iterations=self.iterations, max_sequences=self.max_sequences, z=self.z)
        options = SearchOptions(tuple(self.databases), self.template_db, settings, self.cpus, self.progress)
        for t in targets:
            try:
                outcome = search_target(t.name, t.sequence, out_dir, options, log=self.log, overwrite=overwrite)
            except SearchError as exc:
                failed.append((t, f"{t.source}: record '{t.name}': search failed: {exc}"))
                continue
            if outcome.msa_files and not t.msa_files:
                _attach(t, outcome.msa_files)
            if outcome.template_hits:
                self._hits[t.name] = outcome.template_hits
        return failed

    def _server_msas(self, targets, out_dir: str) -> list:
        """MSAs from ``msa_server`` for the targets without one; ``[(target, message)]`` for failed tickets."""
        options = MsaServerOptions(self.msa_server, self.msa_server_mode, **self.msa_server_options)
        cache = os.path.join(out_dir, "msa_server")
        failed = []
        asking = sum(1 for t in targets if not t.msa_files)
        if asking and options.url.rstrip("/") == PUBLIC_SERVER:
            self.log(f"note: sending {asking} sequence(s) to {PUBLIC_SERVER}: {TERMS}")
        for t in targets:
            if t.msa_files:
                self.log(
                    f"note: {t.name}: MSA given ({', '.join(map(os.path.basename, t.msa_files))}); "
                    "not asking the MSA server"
                )
                continue
            try:
                _attach(t, fetch_server_msa(t.name, t.sequence, cache, options, log=self.log))
            except SearchError as exc:
                failed.append((t, f"{t.source}: record '{t.name}': MSA server: {exc}"))
        return failed

    def templates(self, t):
        """:class:`~alphafold_mem.data.templates_from_hits.TemplateSelection` for target ``t`` (or None
        without hits or mmCIF directories, or with a hit file that cannot be read: a warning line)."""
        return self.templates_from(t.name, t.sequence, self._hits.get(t.name))

    def templates_from(self, name: str, sequence: str, hits_path: Optional[str], log=None):
        """:class:`~alphafold_mem.data.templates_from_hits.TemplateSelection` of ``sequence`` from the
        hit file ``hits_path`` (None without hits or mmCIF directories, or with a hit file that cannot
        be read: a warning line); ``name`` labels the log lines (``log``, default: the pipeline's)."""
        log = log or self.log
        if hits_path is None:
            return None
        if not self.mmcif_dirs:
            log(f"note: {name}: template hits in {hits_path} but no --mmcif-dir; running without templates")
            return None
        if self.obsolete and "obsolete" not in self._cache:
            self._cache["obsolete"] = parse_obsolete(self.obsolete)
        selection = templates_from_hit_file(  # an unreadable hit file: one warning, no templates
            sequence,
            hits_path,
            self.mmcif_dirs,
            max_templates=self.max_templates,
            max_template_date=self.max_template_date,
            obsolete=self._cache.get("obsolete"),
            log=log,
            structure_cache=self._cache.setdefault("structures", {}),
        )
        if selection is None:
            return None
        log(
            f"templates: {name}: {len(selection.used)} used ({', '.join(selection.used) or 'none'}), "
            f"{len(selection.dropped)} dropped, from {hits_path}"
        )
        return selection

    @staticmethod
    def template_record(selection, hits_path: Optional[str], model_uses_templates: bool) -> dict:
        """The ``templates`` entry of the scores JSON."""
        return {
            "hits_file": hits_path,
            "used": selection.used if selection else [],
            "used_by_model": bool(model_uses_templates and selection and selection.used),
            "hits": [c.as_dict() for c in selection.choices] if selection else [],
        }

    def hits_file(self, t) -> Optional[str]:
        return self._hits.get(t.name)

    def relax_target(self, outputs: dict, name: str) -> dict:
        """Relax ``outputs["pdb"]`` into ``<name>_relaxed.pdb`` (``name``: the prediction's) and add a
        ``relax`` entry to the scores JSON (written again, atomically). A failure keeps the unrelaxed model
        and records the reason."""
        from .relax import RelaxError, relax_structure  # optional: Amber relaxation needs the relax extra (OpenMM)

        relaxed = os.path.join(os.path.dirname(outputs["pdb"]), f"{name}_relaxed.pdb")
        try:
            result = relax_structure(
                outputs["pdb"],
                relaxed,
                device=self.relax_device,
                threads=self.cpus,
                remarks=[f"relaxed from {os.path.basename(outputs['pdb'])}"],
            )
            record = {"status": "ok", "relaxed_pdb": os.path.basename(relaxed), **result.as_dict()}
            record.pop("path", None)
            outputs["relaxed_pdb"] = relaxed
            b, a = result.violations_before, result.violations_after
            self.log(
                f"relax: {name}: {result.seconds:.1f} s, {result.iterations} iteration(s), energy "
                f"{result.initial_energy:.0f} -> {result.final_energy:.0f} kcal/mol, clashing atoms "
                f"{b['clashing_atoms']} -> {a['clashing_atoms']}, bond violations {b['bond_violations']} -> "
                f"{a['bond_violations']}, Cα-RMSD {result.ca_rmsd:.2f} Å -> {relaxed}"
            )
        except (RelaxError, ValueError, OSError) as exc:
            record = {"status": "failed", "reason": " ".join(str(exc).split())[:300]}
            self.log(f"warning: relax: {name}: failed, the unrelaxed model is kept: {record['reason']}")
        with open(outputs["scores"]) as fh:
            scores = json.load(fh)
        scores["relax"] = record
        write_json(outputs["scores"], scores, flat=True)
        return record


def _attach(t, files) -> None:
    """Give target ``t`` the searched or served MSA ``files`` and their depth (distinct rows, query included)."""
    t.msa_files = tuple(files)
    msas = [parse_msa(f, query=t.sequence) for f in t.msa_files]
    queries = [standard_residues(m.query)[0] for m in msas if m.depth]  # a J in row 0 is the query's X
    rows = [t.sequence] + queries + [s for m in msas for s in m.sequences[1:]]
    t.msa_depth = len(dict.fromkeys(rows))
