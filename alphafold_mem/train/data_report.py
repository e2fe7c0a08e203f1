"""The start-up report of what training data was used, left out, or noted, and why.

``alphafold-mem train`` prints one counted line per reason (with a few examples) when the data
module is set up, and writes every entry to ``<run dir>/data_report.json``:

* dropped while indexing (the index's ``skipped`` list: unreadable structures, protein chains
  without modelled atoms, duplicate chains, alignment folders without a structure); alignment
  files whose first row is not their chain's sequence are counted among the notes (the chain is used);
* left out by the dataset filters (resolution, low complexity, too few resolved residues, missing
  files; :class:`alphafold_mem.data.ProteinChainDataset`) and the published ones
  (:class:`alphafold_mem.data.sampling.ChainFilters`: ``released after the cut-off``, ``no release
  date``, ``not in the chain list``, ``obsolete entry``, ``no alignment folder`` under
  ``--require-alignments``); self-distillation chains left out, their reasons prefixed
  ``distillation:``;
* chains used with a remark (notes): ``no alignment folder`` (trained from the sequence alone), ``not
  in the cluster file`` (a cluster of its own), ``no template hit file`` (trained without templates);
* kept out of training for validation (held-out ids) and left out of validation (too long, more than
  ``max_val_chains``);
* the parsers' warnings and notes while indexing (the index's ``notes``: modified residues mapped
  to their parents, sequences taken from ``_atom_site``, ...).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from ..data.drops import counted_lines, drop

__all__ = ["DataReport", "FILE_REASONS"]

#: Index ``skipped`` reasons that leave out a file, not a chain (reported as notes).
FILE_REASONS = ("alignment query differs from the chain",)


class DataReport:
    """Collects report entries (:mod:`alphafold_mem.data.drops` dicts) in three groups."""

    def __init__(self):
        self.dropped: list[dict] = []
        self.held_out: list[dict] = []
        self.notes: list[dict] = []
        self.counts: dict[str, int] = {}
        self.while_indexing = 0  # entries of ``dropped`` the index builder left out (not among the indexed)

    def add_index(self, index) -> None:
        """The index's ``skipped`` entries and the parser's warnings/notes recorded in it."""
        for entry in index.skipped:  # an alignment file left out is noted; its chain is used
            if entry.get("reason") in FILE_REASONS:
                self.notes.append(entry)
            else:
                self.dropped.append(entry)
                self.while_indexing += 1
        for note in getattr(index, "notes", []):
            kind = "parser warnings" if note.get("kind") == "warning" else "parser notes"
            where, message = note.get("structure", "?"), note.get("message", "")
            head, sep, rest = message.partition(": ")
            if sep and os.path.basename(head.split(":")[0]) == os.path.basename(where):
                message = rest  # the location is the item
            self.notes.append(drop(kind, os.path.basename(where), message))

    def add(self, group: str, entries) -> None:
        """Append ``entries`` to ``"dropped"``, ``"held_out"`` or ``"notes"``."""
        getattr(self, group).extend(entries)

    def lines(self, examples: int = 3) -> list[str]:
        """The start-up lines: totals, then one counted line per reason."""
        c = self.counts
        k = self.while_indexing
        out = [
            f"data: {c.get('indexed', 0)} chains indexed ({k} more left out while indexing), "
            f"{c.get('train', 0)} used for training, {c.get('validation', 0)} for validation, "
            f"{len(self.dropped) - k} left out by the filters"
        ]
        out += counted_lines(self.dropped, examples, prefix="data: dropped: ")
        out += counted_lines(self.held_out, examples, prefix="data: validation: ")
        out += counted_lines(self.notes, examples, prefix="data: ")
        return out

    def write(self, path: str | os.PathLike) -> None:
        """Every entry as JSON (``counts``, ``dropped``, ``validation``, ``notes``)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(
            json.dumps(
                {"counts": self.counts, "dropped": self.dropped, "validation": self.held_out, "notes": self.notes},
                indent=1,
            )
        )

    def emit(self, log: Callable[[str], None], path: str | os.PathLike | None) -> None:
        """Log :meth:`lines` and, with ``path``, write the full list there (and say where)."""
        for line in self.lines():
            log(line)
        if path is not None:
            self.write(path)
            log(f"data: full list in {path}")
