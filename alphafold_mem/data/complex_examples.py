"""Complex training examples from mmCIF entries (AF2-Multimer training data, Evans et al. 2022).

An entry (one mmCIF file, first model) becomes a :class:`ComplexExample`: its protein chains in file
order with AF2-Multimer's numbering (``asym_id`` per chain, ``entity_id`` per distinct sequence,
``sym_id`` per copy; :func:`~.complex.make_complex`) and the whole-complex ground truth
(``[N_full, 37, 3]`` atoms, SEQRES order, unresolved residues masked) that
:func:`alphafold_mem.losses.permutation.permutation_align_batch` matches the predicted chains against.

Filters (:class:`ComplexFilters`) leave out, each counted by reason (:mod:`.drops` entries):

* whole entries: unreadable file, resolution above the limit, released after the limit, no protein
  chain (nucleic acid only), fewer than two protein chains left, more protein chains than the limit;
* chains inside a kept entry: nucleic-acid chains (``"nucleic-acid chain left out"``) and protein
  chains shorter than ``min_chain_length`` (``"chain shorter than the minimum"``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from .complex import Complex, make_complex
from .drops import drop
from .errors import InputError
from .mmcif import _read_mmcif_dict, read_mmcif
from .structure import ProteinChain

__all__ = ["ComplexExample", "ComplexFilters", "load_complex_example", "load_complex_examples", "nucleic_acid_chains"]

_NA_TYPES = ("polydeoxyribonucleotide", "polyribonucleotide", "polydeoxyribonucleotide/polyribonucleotide hybrid")
_CIF_SUFFIXES = (".cif", ".cif.gz", ".mmcif")


@dataclass(frozen=True)
class ComplexFilters:
    """Which entries and chains train.

    Attributes:
        max_resolution: Å; entries with a worse resolution are left out (no resolution, e.g. NMR: kept).
        max_release_date: ``YYYY-MM-DD``; later entries are left out (None: no limit).
        max_chains: most protein chains an entry may have.
        min_chain_length: protein chains with fewer SEQRES residues are left out of the complex.
    """

    max_resolution: float = 9.0
    max_release_date: str | None = None
    max_chains: int = 30
    min_chain_length: int = 10


@dataclass(frozen=True, eq=False)
class ComplexExample:
    """One complex: ``complex`` (chains, numbering), ``chains`` (the experimental chains in the
    same order), entry metadata, and :meth:`ground_truth`."""

    complex: Complex
    chains: tuple[ProteinChain, ...]
    resolution: float | None = None
    release_date: str | None = None
    path: str | None = None
    left_out: tuple = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return self.complex.name

    def ground_truth(self) -> dict[str, np.ndarray]:
        """Whole-complex ground truth, chains in ``asym_id`` order, residues in SEQRES order:
        ``aatype``, ``residue_index``, ``asym_id``, ``entity_id``, ``sym_id`` ``[N_full]`` int64;
        ``all_atom_positions [N_full, 37, 3]`` (Å), ``all_atom_mask [N_full, 37]`` float32."""
        cx = self.complex
        return {
            "aatype": np.concatenate([c.aatype for c in self.chains]).astype(np.int64),
            "residue_index": cx.residue_index(),
            "asym_id": cx.per_residue("asym_id"),
            "entity_id": cx.per_residue("entity_id"),
            "sym_id": cx.per_residue("sym_id"),
            "all_atom_positions": np.concatenate([c.atom37_positions for c in self.chains]).astype(np.float32),
            "all_atom_mask": np.concatenate([c.atom37_mask for c in self.chains]).astype(np.float32),
        }


def nucleic_acid_chains(path) -> list[str]:
    """Strand ids of the DNA / RNA polymer entities of an mmCIF file (``_entity_poly.type``)."""
    d = _read_mmcif_dict(os.fspath(path))
    types = d.get("_entity_poly.type") or []
    strands = d.get("_entity_poly.pdbx_strand_id") or []
    out: list[str] = []
    for t, s in zip(types, strands):
        if t.strip().lower() in _NA_TYPES:
            out += [x.strip() for x in s.split(",") if x.strip()]
    return out


def load_complex_example(path, filters: ComplexFilters = ComplexFilters()) -> tuple[ComplexExample | None, list[dict]]:
    """Read one entry and apply ``filters``.

    Returns:
        ``(example or None, drops)``: ``drops`` are :func:`~.drops.drop` entries for the entry (when
        it is left out) and for each chain left out of it. Never raises for a bad file: an
        unreadable one is a drop (``"unreadable structure"``) with the reader's one-line message.
    """
    path = os.fspath(path)
    name = Path(path).name
    drops: list[dict] = []
    try:
        structure = read_mmcif(path)
        na = nucleic_acid_chains(path)
    except InputError as exc:
        if "no protein chain" in str(exc):
            return None, [drop("no protein chain (nucleic acid only)", name, str(exc))]
        return None, [drop("unreadable structure", name, str(exc))]
    for chain_id in na:
        drops.append(drop("nucleic-acid chain left out", f"{structure.pdb_id}_{chain_id}"))
    if structure.resolution is not None and structure.resolution > filters.max_resolution:
        return None, [
            drop("resolution above the limit", name, f"{structure.resolution} Å > {filters.max_resolution} Å")
        ]
    if filters.max_release_date and structure.release_date and structure.release_date > filters.max_release_date:
        return None, [drop("released after the limit", name, f"{structure.release_date} > {filters.max_release_date}")]
    kept = []
    for chain in structure.chains.values():
        if len(chain) < filters.min_chain_length:
            drops.append(
                drop(
                    "chain shorter than the minimum",
                    chain.name,
                    f"{len(chain)} residues < {filters.min_chain_length}",
                )
            )
        else:
            kept.append(chain)
    if len(kept) > filters.max_chains:
        return None, drops + [drop("more chains than the limit", name, f"{len(kept)} > {filters.max_chains}")]
    if len(kept) < 2:
        return None, drops + [drop("fewer than two protein chains", name, f"{len(kept)} protein chain(s) left")]
    cx = make_complex([(c.chain_id, c.sequence) for c in kept], name=structure.pdb_id, path=path)
    example = ComplexExample(cx, tuple(kept), structure.resolution, structure.release_date, path, tuple(drops))
    return example, drops


def _structure_files(dirs: Iterable) -> list[Path]:
    out = []
    for d in dirs:
        d = Path(d)
        if d.is_file():
            out.append(d)
            continue
        for sub in (d, d / "mmcif"):
            if sub.is_dir():
                out += sorted(p for p in sub.iterdir() if p.is_file() and p.name.lower().endswith(_CIF_SUFFIXES))
    return list(dict.fromkeys(out))


def load_complex_examples(dirs, filters: ComplexFilters = ComplexFilters()) -> tuple[list[ComplexExample], list[dict]]:
    """Every mmCIF entry of ``dirs`` (files, or folders holding ``*.cif[.gz]`` directly or in
    ``mmcif/``) through :func:`load_complex_example`, in file-name order. Returns ``(examples, drops)``."""
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    examples, drops = [], []
    for p in _structure_files(dirs):
        ex, d = load_complex_example(p, filters)
        drops += d
        if ex is not None:
            examples.append(ex)
    return examples, drops
