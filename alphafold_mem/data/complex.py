"""Protein complexes from FASTA: chains, entities and AF2-Multimer's chain numbering.

Two input conventions (issue 43):

* ColabFold: one FASTA record whose chains are joined by ``:`` (``MKV...:GSH...``) is one complex;
  its chains are named ``A``, ``B``, ``C`` ... in order. A file of such records is a batch.
* AF2: every record of one file is one chain of one complex (``one_complex=True``, the CLI's
  ``--complex``). Chain ids come from the records when every record names a distinct one
  (``>2q2k_A`` -> ``A``; a short name such as ``>H``; an RCSB header ``>7DDO_1|Chains A, B|...``
  gives one chain per listed id, the ``[auth X]`` id when given); otherwise ``A``, ``B``, ... .

Numbering follows AF2-Multimer (``pipeline_multimer.add_assembly_features``): ``entity_id`` 1, 2, ...
per distinct sequence in order of first appearance, ``sym_id`` 1, 2, ... among the copies of one
entity, ``asym_id`` 1, 2, ... per chain. Chains keep the input order (AF2 regroups them entity by
entity; the multimer model does not depend on the order).

Protein chains only: a nucleic-acid chain (``mol:na`` header, or only ``ACGTUN`` letters, see
:mod:`.molecule`) and an empty chain are :class:`~.errors.InputError` lines naming the file, the
record and the chain.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import InputError
from .fasta import parse_fasta_string
from .molecule import PROTEIN, classify_record
from .names import sanitize_name
from .text import check_file, open_text, split_records

__all__ = ["Chain", "Complex", "make_complex", "read_complexes", "complexes_from_text", "chain_letters"]


@dataclass(frozen=True)
class Chain:
    """One protein chain of a complex.

    Attributes:
        chain_id: the chain's id (``A``, ``B``, ... or from the record).
        sequence: one-letter codes (20 standard + ``X``), length ``N_res(chain)``.
        entity_id: 1-based index of the distinct sequence (AF2-Multimer ``entity_id``).
        sym_id: 1-based copy number within the entity (``sym_id``).
        asym_id: 1-based chain number in input order (``asym_id``).
        record: the FASTA record the chain came from.
        line: 1-based line of that record's header, or ``None``.
    """

    chain_id: str
    sequence: str
    entity_id: int
    sym_id: int
    asym_id: int
    record: str = ""
    line: int | None = None

    def __len__(self) -> int:
        return len(self.sequence)


@dataclass(frozen=True)
class Complex:
    """A complex: its chains in input order, residues concatenated in that order.

    Attributes:
        name: file-name-safe id (the record name for a ``:`` record, the file stem for a file).
        chains: the chains; ``asym_id`` = position + 1.
        path: the source file, or a label for in-memory text.
    """

    name: str
    chains: tuple[Chain, ...]
    path: str | None = None

    @property
    def num_res(self) -> int:
        """``N_res``: residues of all chains."""
        return sum(len(c) for c in self.chains)

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.chains)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Index of each chain's first residue in the concatenated complex."""
        return tuple(int(x) for x in np.cumsum((0,) + self.lengths[:-1]))

    @property
    def entities(self) -> dict[int, str]:
        """``entity_id`` -> sequence, in entity order."""
        out: dict[int, str] = {}
        for c in self.chains:
            out.setdefault(c.entity_id, c.sequence)
        return out

    def chains_of(self, entity_id: int) -> tuple[Chain, ...]:
        """The copies of one entity, in ``sym_id`` order."""
        return tuple(c for c in self.chains if c.entity_id == entity_id)

    @property
    def is_homomer_or_monomer(self) -> bool:
        """One distinct sequence (AF2-Multimer then pairs no MSA rows)."""
        return len(self.entities) == 1

    def per_residue(self, field: str) -> np.ndarray:
        """``[N_res]`` int64: a chain field (``asym_id``, ``entity_id``, ``sym_id``) repeated over its residues."""
        return np.concatenate([np.full(len(c), getattr(c, field), dtype=np.int64) for c in self.chains])

    def residue_index(self) -> np.ndarray:
        """``[N_res]`` int64: 0-based residue number, restarting in every chain (AF2-Multimer)."""
        return np.concatenate([np.arange(len(c), dtype=np.int64) for c in self.chains])

    def describe(self) -> str:
        """``'A:154, B:241 (2 entities)'`` for messages."""
        parts = ", ".join(f"{c.chain_id}:{len(c)}" for c in self.chains)
        return f"{parts} ({len(self.entities)} entit{'y' if len(self.entities) == 1 else 'ies'})"


def chain_letters(n: int) -> list[str]:
    """``A`` .. ``Z``, then ``AA``, ``AB``, ... (spreadsheet order): ``n`` chain ids."""
    out = []
    for k in range(n):
        name, k1 = "", k + 1
        while k1:
            k1, r = divmod(k1 - 1, 26)
            name = chr(ord("A") + r) + name
        out.append(name)
    return out


def make_complex(
    chains: Sequence[tuple[str, str] | tuple[str, str, str, int | None]], *, name: str = "complex", path=None
) -> Complex:
    """A :class:`Complex` from ``(chain_id, sequence[, record, line])`` items, numbered as AF2-Multimer.

    Raises:
        InputError: no chain, an empty chain, or two chains with one id.
    """
    if not chains:
        raise InputError("a complex needs at least one chain", file=path, record=name)
    entity_of: dict[str, int] = {}
    copies: dict[int, int] = {}
    out, seen = [], set()
    for asym, item in enumerate(chains, start=1):
        chain_id, seq = item[0], item[1].upper()
        record = item[2] if len(item) > 2 else name
        line = item[3] if len(item) > 3 else None
        if not seq:
            raise InputError(f"chain {chain_id} is empty", file=path, record=record, line=line)
        if chain_id in seen:
            raise InputError(f"chain id {chain_id!r} is used twice", file=path, record=record, line=line)
        seen.add(chain_id)
        entity = entity_of.setdefault(seq, len(entity_of) + 1)
        copies[entity] = copies.get(entity, 0) + 1
        out.append(Chain(chain_id, seq, entity, copies[entity], asym, record, line))
    return Complex(name, tuple(out), None if path is None else os.fspath(path))


_PDB_CHAIN = re.compile(r"^[A-Za-z0-9]{4}_([A-Za-z0-9]{1,4})$")
_SHORT_ID = re.compile(r"^[A-Za-z0-9]{1,4}$")
_RCSB_CHAINS = re.compile(r"^Chains?\s+(.+)$")
_AUTH = re.compile(r"^(\S+?)\s*\[auth\s+(\S+)\]$")


def _ids_from_title(title: str) -> list[str] | None:
    """Chain ids a record header names, or ``None``."""
    fields = title.split("|")
    if len(fields) > 1:
        m = _RCSB_CHAINS.match(fields[1].strip())
        if m:
            ids = []
            for part in m.group(1).split(","):
                part = part.strip()
                auth = _AUTH.match(part)
                ids.append(auth.group(2) if auth else part)
            if all(_SHORT_ID.match(i) for i in ids):
                return ids
    token = title.split()[0] if title.split() else ""
    m = _PDB_CHAIN.match(token)
    if m:
        return [m.group(1)]
    if _SHORT_ID.match(token):
        return [token]
    return None


def _check_chain(title: str, chain: str, chain_id: str, record: str, path: str, line: int) -> None:
    if not chain.strip():
        raise InputError(
            f"chain {chain_id} is empty: give every chain residues (check for '::' or a header without a sequence)",
            file=path,
            record=record,
            line=line,
        )
    kind, why = classify_record(title, chain)
    if kind != PROTEIN:
        what = "a nucleic-acid" if kind == "nucleic" else "a non-protein"
        raise InputError(
            f"chain {chain_id} is {what} chain ({why}): complexes take protein chains only; remove that chain",
            file=path,
            record=record,
            line=line,
        )


def complexes_from_text(text: str, *, label: str = "<string>", one_complex: bool = False) -> list[Complex]:
    """:func:`read_complexes` for in-memory FASTA text; ``label`` names it in messages."""
    tracked, raw = split_records(io.StringIO(text))
    stem = sanitize_name(os.path.basename(label).split(".")[0], "complex")
    plans = []  # per record: (name, title, [(chain_id or None, chain sequence)], line)
    for i, (title, seq) in enumerate(raw):
        name = sanitize_name(title, f"record_{i + 1}")
        parts = seq.split(":")
        if one_complex and len(parts) == 1:
            ids = _ids_from_title(title) or [None]
            plans.append((name, title, [(cid, seq) for cid in ids], tracked.headers[i]))
        else:
            plans.append((name, title, [(None, p) for p in parts], tracked.headers[i]))

    groups = [list(range(len(plans)))] if one_complex else [[k] for k in range(len(plans))]
    ids_of: dict[int, list[str]] = {}
    for group in groups:
        given = [cid for k in group for cid, _ in plans[k][2]]
        if any(cid is None for cid in given) or len(set(given)) != len(given):
            letters = iter(chain_letters(len(given)))
            ids_of.update({k: [next(letters) for _ in plans[k][2]] for k in group})
        else:
            ids_of.update({k: [cid for cid, _ in plans[k][2]] for k in group})
        for k in group:
            name, title, chains, line = plans[k]
            for (_, chain), cid in zip(chains, ids_of[k]):
                _check_chain(title, chain, cid, name, label, line)
    if not plans:
        raise InputError("empty file: no FASTA records", file=label)
    # Letters are checked (and U/O/B/Z/J mapped, case folded) by the FASTA parser's rules.
    records = parse_fasta_string(text, label=label, skip_nucleic=False, allow_chain_breaks=True)
    out = []
    for group in groups:
        items = []
        for k in group:
            rec, chains = records[k], plans[k][2]
            seqs = rec.sequence.split(":") if len(chains) > 1 and ":" in rec.sequence else [rec.sequence] * len(chains)
            items.extend((cid, seq, rec.name, rec.line) for cid, seq in zip(ids_of[k], seqs))
        out.append(make_complex(items, name=stem if one_complex else records[group[0]].name, path=label))
    return out
    if not out:
        raise InputError("empty file: no FASTA records", file=label)
    return out


def read_complexes(path, *, one_complex: bool = False) -> list[Complex]:
    """Read complexes from a FASTA file (optionally ``.gz``).

    Args:
        path: the file.
        one_complex: AF2's convention: all records form one complex (CLI ``--complex``); otherwise
            every record is one complex (a record without ``:`` is a one-chain complex).

    Returns:
        The complexes in file order, numbered as AF2-Multimer (module docstring).

    Raises:
        InputError: a nucleic-acid or empty chain (naming file, record and chain), an invalid letter
            (FASTA rules of :mod:`.fasta`), an empty file; one line each.
    """
    path = check_file(path, "FASTA text")
    with open_text(path) as handle:
        text = handle.read()
    return complexes_from_text(text, label=path, one_complex=one_complex)
