"""The real chains an ablation predicts: sequence, MSA files, and the experimental structure to score
against.

Default: the shipped per-entry chains (``data/fasta/per_entry/*.fasta``) with their MSAs
(``data/alignments/<record id>/``; single-sequence where there is none) and structures
(``data/mmcif/<pdb id>.cif`` or ``data/pdb/<pdb id>.pdb``). ``--chains`` takes FASTA files, ``.a3m``
files (first row = query) or directories of them; MSAs and structures are looked up next to each input
and in ``alignments/``, ``mmcif/`` and ``pdb/`` folders up to two levels above it. Record ids follow
the PDB convention ``<pdb id>_<chain id>`` (e.g. ``1lcd_A``) for the structure lookup.

Homomer copies (records with a sequence seen before) are left out: they would repeat a row.
Targets are discovered and validated by :func:`alphafold_mem.predict.collect_targets` (the same
rules as ``alphafold-mem predict``); features by :func:`alphafold_mem.data.make_features`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..data import InputError, make_features, parse_msa, read_structure
from ..data.formats import GZIP_SUFFIX, STRUCTURE, suffixes
from ..data.structure import ProteinChain
from ..predict import collect_targets

__all__ = ["Chain", "REPO_DATA", "discover_chains", "chain_features", "experimental_chain"]

#: The shipped example data (``<repo>/data``).
REPO_DATA = Path(__file__).resolve().parents[2] / "data"

_STRUCTURE_DIRS = ("mmcif", "pdb")
#: The structure suffixes of :mod:`alphafold_mem.data.formats`, uncompressed ones first.
_STRUCTURE_SUFFIXES = suffixes(STRUCTURE) + tuple(s + GZIP_SUFFIX for s in suffixes(STRUCTURE))


@dataclass
class Chain:
    """One chain of the ablation grid.

    Attributes:
        name: record id (``1lcd_A``), unique in the run.
        sequence: one-letter query sequence (``N_res`` letters).
        source: ``file:line`` of the record.
        msa_files: alignment files merged for its features (empty: single-sequence).
        msa_dir: the directory ``msa_files`` were found in (``<msa_dir>/<name>/``), or None.
        structure_path: the experimental structure file, or None (then no accuracy columns).
        note: why a structure or an MSA is missing, if one is.
    """

    name: str
    sequence: str
    source: str
    msa_files: tuple[str, ...] = ()
    msa_dir: Optional[str] = None
    structure_path: Optional[str] = None
    note: str = ""
    msa_depth: int = 1
    _experimental: list = field(default_factory=list, repr=False)

    @property
    def n_res(self) -> int:
        return len(self.sequence)

    def describe(self) -> dict:
        """JSON-able description for the ``config`` column."""
        return {
            "chain": self.name,
            "n_res": self.n_res,
            "source": self.source,
            "msa_depth": self.msa_depth,
            "msa_files": [os.path.relpath(f) for f in self.msa_files],
            "structure": os.path.relpath(self.structure_path) if self.structure_path else None,
        }


def _inputs(paths: Optional[Sequence[str]]) -> list[Path]:
    if not paths:
        return [REPO_DATA / "fasta" / "per_entry"]
    return [Path(p) for p in paths]


def _lookup_dirs(path: Path, sub: str) -> list[Path]:
    """``path``'s directory and ``<ancestor>/<sub>`` for the directory and two levels above it."""
    base = path if path.is_dir() else path.parent
    out = [base]
    for anc in (base, base.parent, base.parent.parent):
        if (anc / sub).is_dir():
            out.append(anc / sub)
    return out


def _structure_for(name: str, path: Path) -> Optional[Path]:
    pdb_id = name.split("_")[0].lower()
    for sub in _STRUCTURE_DIRS:
        for d in _lookup_dirs(path, sub):
            for suffix in _STRUCTURE_SUFFIXES:
                for stem in (pdb_id, pdb_id.upper()):
                    if (d / f"{stem}{suffix}").is_file():
                        return d / f"{stem}{suffix}"
                # e.g. 721p-assembly1.cif
                extra = sorted(p for p in d.glob(f"{pdb_id}[-_.]*{suffix}") if p.is_file())
                if extra:
                    return extra[0]
    return None


def discover_chains(
    paths: Optional[Sequence[str]] = None,
    max_chains: Optional[int] = None,
    smallest_first: bool = False,
    log: Callable[[str], None] = lambda line: None,
) -> list[Chain]:
    """The chains of ``paths`` (default: the shipped per-entry chains), one per distinct sequence.

    Args:
        paths: FASTA / ``.a3m`` files or directories of them.
        max_chains: keep only this many (after ordering).
        smallest_first: order by length (shortest first) instead of by input order.
        log: receives one line per rejected record or missing MSA/structure.

    Raises:
        alphafold_mem.predict.PredictError: no usable input at all.
    """
    chains: list[Chain] = []
    seen: set[str] = set()
    quiet = lambda line: None  # noqa: E731 - rejections are reported below, once
    for path in _inputs(paths):
        msa_dirs = [d for d in _lookup_dirs(path, "alignments") if d.name == "alignments"]
        found: dict[str, tuple] = {}
        for msa_dir in msa_dirs:
            with_msa, _ = collect_targets(str(path), msa_dir=str(msa_dir), log=quiet)
            for t in with_msa:
                found.setdefault(t.name, (t, str(msa_dir)))
        targets, rejected = collect_targets(str(path), log=quiet)
        for r in rejected:
            log(f"ablate: skipped input {r.message}")
        for t in targets:
            t, msa_dir = found.get(t.name, (t, None))
            if t.sequence in seen:
                continue
            seen.add(t.sequence)
            structure = _structure_for(t.name, path)
            notes = [] if t.msa_files else ["single-sequence (no MSA found)"]
            if structure is None:
                notes.append("no experimental structure found: accuracy columns empty")
            chains.append(
                Chain(
                    t.name,
                    t.sequence,
                    t.source,
                    tuple(t.msa_files),
                    msa_dir,
                    str(structure) if structure else None,
                    "; ".join(notes),
                    t.msa_depth,
                )
            )
    if smallest_first:
        chains.sort(key=lambda c: (c.n_res, c.name))
    for c in chains:
        if c.note:
            log(f"ablate: {c.name}: {c.note}")
    return chains[:max_chains] if max_chains else chains


def chain_features(chain: Chain, config, seed: int = 0) -> dict[str, torch.Tensor]:
    """The model batch of ``chain`` (no batch dim), as :func:`alphafold_mem.predict` builds it (a
    template-enabled model gets predict's one empty template)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reported when the chains were collected
        msas = [parse_msa(f, query=chain.sequence) for f in chain.msa_files]
    batch = make_features(chain.sequence, msa=msas or None, config=config, mode="predict", seed=seed)
    if config.template.enabled and "template_aatype" not in batch:
        from ..predict.target_forward import placeholder_templates  # predict's one empty template

        batch.update(placeholder_templates(chain.n_res))
    return batch


def experimental_chain(chain: Chain) -> tuple[Optional[ProteinChain], str]:
    """The experimental chain of ``chain`` in SEQRES order, and a reason when there is none.

    The structure's chain is the one whose id is the record's chain id, else the one with the same
    sequence; a chain whose SEQRES differs from the query is not used (residue correspondence unknown).
    """
    if chain._experimental:
        return chain._experimental[0]
    result: tuple[Optional[ProteinChain], str] = (None, chain.note or "no experimental structure")
    if chain.structure_path:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                structure = read_structure(chain.structure_path)
            chain_id = chain.name.split("_", 1)[1] if "_" in chain.name else None
            candidates = [c for c in structure.chains.values() if c.chain_id == chain_id]
            candidates += [c for c in structure.chains.values() if c.sequence == chain.sequence]
            match = next((c for c in candidates if c.sequence == chain.sequence), None)
            if match is None:
                result = (None, f"{chain.structure_path}: no chain with the query's sequence")
            elif not np.any(match.atom37_mask[:, 1] > 0):
                result = (None, f"{chain.structure_path}: chain {match.chain_id} has no resolved Cα")
            else:
                result = (match, "")
        except (InputError, OSError) as exc:
            result = (None, f"{chain.structure_path}: {exc}")
    chain._experimental.append(result)
    return result
