"""Cross-chain MSA pairing by species, as AF2-Multimer (Evans et al. 2021; AF2 ``msa_pairing``).

Each chain brings a *pairing* alignment (AF2: ``uniprot_hits.sto``; ColabFold / Protenix:
``pairing.a3m``), kept apart from the unpaired MSAs. Rows are labelled with a species by
:func:`species_id`; :func:`pair_rows` then builds the paired block:

1. row 0 pairs the chains' queries;
2. per species present in at least two chains, and with at most :data:`MAX_HITS_PER_SPECIES` rows
   in every chain that has it, each chain's rows of that species are sorted by their identity to
   the chain's query (fraction of query columns with the query's residue, highest first) and the
   first ``k`` are paired, ``k`` = the fewest rows of that species in any chain that has it; a chain
   without the species contributes its padding row (all gap) to those pairs;
3. pairs are ordered by the number of chains they span (most first), then by the product of
   their row numbers (best-ranked rows first), equal products by the row numbers.

Equally similar rows of one species keep the alignment's order, so the result does not depend on
how species are named (AF2 sorts without a stable sort: its order of such ties is arbitrary).
Rows without a species (the query, headers of other layouts) are never paired.

A *pre-paired* alignment (:func:`prepaired_msa`: an MSA server's paired mode, ``prepaired.a3m``) is
already row-aligned with the other chains': row ``k`` of every chain is one pair, taken as is
(:func:`prepaired_rows`); nothing is dropped or reordered.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import note_input
from .features.msa import GAP, msa_to_tokens
from .msa import Msa

__all__ = [
    "MAX_HITS_PER_SPECIES",
    "MAX_PAIRING_HITS",
    "PairingMsa",
    "species_id",
    "pairing_msa",
    "prepaired_msa",
    "pair_rows",
    "prepaired_rows",
    "gather_paired",
]

#: A species with more rows than this in any chain is left unpaired (AF2 ``pair_sequences``).
MAX_HITS_PER_SPECIES = 600
#: Rows of a pairing alignment read at most (AF2 ``max_uniprot_hits``).
MAX_PAIRING_HITS = 50_000

# AF2 msa_identifiers: "tr|A0A0K0ME10|A0A0K0ME10_9STAP" (an isoform suffix "_1" on the accession
# and a trailing "_<digits>" of small BFD allowed); the species is the mnemonic after the last "_".
_UNIPROT = re.compile(r"^(?:tr|sp)\|[A-Za-z0-9]{6,10}(?:_\d)?\|[A-Za-z0-9]+_([A-Za-z0-9]{1,5})(?:_\d+)?$")
# ColabFold / Protenix pairing.a3m: "UniRef100_<accession>_<NCBI taxid>/".
_UNIREF_TAXID = re.compile(r"^UniRef100_[A-Za-z0-9]+_(\d+)$")


def species_id(description: str) -> str:
    """The species of an alignment row from its header, ``""`` when it names none.

    The first token up to ``/`` is read as a UniProt id (``tr|ACC|ENTRY_SPECIES``: AF2's rule, the
    mnemonic ``SPECIES`` -> ``"uniprot:SPECIES"``) or a ColabFold/Protenix UniRef100 id
    (``UniRef100_ACC_TAXID`` -> ``"ncbi:TAXID"``). The two namespaces never match each other.
    """
    tokens = description.split()
    if not tokens:
        return ""
    name = tokens[0].partition("/")[0]
    m = _UNIPROT.match(name)
    if m:
        return "uniprot:" + m.group(1)
    m = _UNIREF_TAXID.match(name)
    if m:
        return "ncbi:" + m.group(1)
    return ""


@dataclass(frozen=True, eq=False)
class PairingMsa:
    """One chain's pairing alignment as tokens (AF2's ``*_all_seq`` features).

    Attributes:
        msa: ``[N_seq, N_res]`` int64 tokens (0-19 aa, 20 X, 21 gap); row 0 is the query.
        deletion_matrix: ``[N_seq, N_res]`` float32 deletion counts.
        species: ``N_seq`` species ids (:func:`species_id`); ``""`` for row 0 and rows without one.
        path: the source file, or ``None``.
        prepaired: the rows are paired with the other chains' already (:func:`prepaired_msa`).
    """

    msa: np.ndarray
    deletion_matrix: np.ndarray
    species: tuple[str, ...]
    path: str | None = None
    prepaired: bool = False

    @property
    def num_species_rows(self) -> int:
        """Rows that carry a species (candidates for pairing)."""
        return sum(1 for s in self.species if s)


def pairing_msa(sequence: str, msa: Msa | None, *, max_hits: int = MAX_PAIRING_HITS, name=None) -> PairingMsa:
    """A chain's :class:`PairingMsa` from its parsed pairing alignment (``None``: the query alone).

    Row 0 is ``sequence``; the alignment's rows follow, its first row (its own query) and exact
    repeats dropped, at most ``max_hits`` rows read. An alignment in which no row names a species
    pairs nothing: one note says so, naming the file.
    """
    seq = sequence.upper()
    rows, dels, species = [seq], [np.zeros(len(seq), np.int32)], [""]
    if msa is not None and msa.depth:
        seen = {seq}
        for k in range(min(msa.depth, max_hits)):
            row = msa.sequences[k]
            if k == 0 or row in seen:
                continue
            seen.add(row)
            rows.append(row)
            dels.append(msa.deletion_matrix[k])
            species.append(species_id(msa.descriptions[k]))
        if msa.depth > 1 and not any(species):
            note_input(
                "no row of the pairing alignment names a species (expected UniRef100_<acc>_<taxid> or "
                "UniProt tr|<acc>|<entry>_<species> headers): its rows are not paired across chains",
                file=msa.path,
                record=name,
                stacklevel=3,
            )
    return PairingMsa(
        msa_to_tokens(rows), np.stack(dels).astype(np.float32), tuple(species), None if msa is None else msa.path
    )


def prepaired_msa(sequence: str, msa: Msa) -> PairingMsa:
    """A chain's pre-paired :class:`PairingMsa`: every row of ``msa`` in its order (row 0 = the query,
    written as ``sequence``), no species, ``prepaired=True``."""
    rows = [sequence.upper(), *msa.sequences[1:]]
    dels = np.zeros((len(rows), len(sequence)), np.float32)
    dels[1:] = msa.deletion_matrix[1:]
    return PairingMsa(msa_to_tokens(rows), dels, ("",) * len(rows), msa.path, prepaired=True)


def prepaired_rows(chains: Sequence[PairingMsa]) -> np.ndarray:
    """The paired block of pre-paired chains as row numbers (``[N_rows, N_chains]``: row ``k`` of each).

    Raises:
        ValueError: the chains' alignments have different numbers of rows (one line naming the files).
    """
    depths = {len(c.msa) for c in chains}
    if len(depths) != 1:
        listed = ", ".join(f"{c.path}: {len(c.msa)}" for c in chains)
        raise ValueError(f"pre-paired alignments must have as many rows each (row k of each is one pair): {listed}")
    return np.repeat(np.arange(depths.pop(), dtype=np.int64)[:, None], len(chains), axis=1)


def _rows_by_species(chain: PairingMsa) -> dict[str, list[int]]:
    """Species -> its row numbers, most query-identical first (ties in row order)."""
    identity = (chain.msa == chain.msa[0][None]).mean(axis=1)
    out: dict[str, list[int]] = defaultdict(list)
    for row in np.argsort(-identity, kind="stable"):
        sp = chain.species[row]
        if sp:
            out[sp].append(int(row))
    return out


def pair_rows(chains: Sequence[PairingMsa], *, max_hits_per_species: int = MAX_HITS_PER_SPECIES) -> np.ndarray:
    """The paired block as row numbers: ``[N_pairs, N_chains]`` int64, ``-1`` = the chain's padding row.

    Row 0 is ``[0, ..., 0]`` (the queries). See the module docstring for the rule; copies of one
    entity are separate chains here (they pair with each other as AF2 does).
    """
    per_chain = [_rows_by_species(c) for c in chains]
    n = len(chains)
    by_span: dict[int, list[np.ndarray]] = defaultdict(list)
    for sp in sorted(set().union(*per_chain)):
        present = [rows.get(sp) for rows in per_chain]
        counts = [len(r) for r in present if r]
        if len(counts) < 2 or max(counts) > max_hits_per_species:
            continue
        k = min(counts)
        block = np.array([r[:k] if r else [-1] * k for r in present], dtype=np.int64).T
        by_span[len(counts)].append(block)
    out = [np.zeros((1, n), dtype=np.int64)]
    for span in sorted(by_span, reverse=True):
        block = np.concatenate(by_span[span]).tolist()
        # |product of row numbers| (exact integers), ties by the row numbers themselves.
        block.sort(key=lambda rows: (math.prod(abs(r) for r in rows), rows))
        out.append(np.array(block, dtype=np.int64))
    return np.concatenate(out)


def gather_paired(chain: PairingMsa, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(msa, deletion_matrix)`` of one chain's segment of the paired block; ``-1`` rows are AF2's
    padding row (gap, no deletion)."""
    pad_msa = np.concatenate([chain.msa, np.full((1, chain.msa.shape[1]), GAP, np.int64)])
    pad_del = np.concatenate([chain.deletion_matrix, np.zeros((1, chain.msa.shape[1]), np.float32)])
    return pad_msa[rows], pad_del[rows]
