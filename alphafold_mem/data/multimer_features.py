"""Complex-wide MSA and sequence features as AF2-Multimer builds them (AF2 ``feature_processing.pair_and_merge``).

Steps, per :func:`make_multimer_msa_features`:

1. every entity has one unpaired MSA (row 0 = its query) and one pairing alignment
   (:class:`EntityMsa`); identical chains share them;
2. pairing (:mod:`.msa_pairing`) when the complex has two or more entities (homomers and
   monomers are not paired): the paired block is ``[N_pairs, N_res]`` over all chains (by species,
   or, when every entity's alignment is pre-paired, row ``k`` of each as is), and every chain's
   unpaired rows that repeat a row of its paired segment are dropped (the query among them);
3. cropping (AF2 ``_crop_single_chain``, ``msa_crop_size`` 2048): the paired block keeps at most
   ``msa_crop_size // 2`` rows; each chain keeps at most ``msa_crop_size`` minus its non-gap paired
   rows of its unpaired MSA (without pairing: ``msa_crop_size``);
4. merging: the paired block first, then one unpaired block per entity (entity order), its rows
   over the columns of every copy of the entity and gap (21, deletion 0) elsewhere.

Chains keep the input order of the :class:`~.complex.Complex` (AF2 groups them by entity first).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .alignment_layout import alignment_files
from .complex import Complex
from .errors import InputError, warn_input
from .features.msa import GAP, make_msa_features
from .features.pipeline import sequence_to_aatype
from .msa import Msa, parse_msa, query_problem
from .msa_pairing import PairingMsa, gather_paired, pair_rows, pairing_msa, prepaired_msa, prepaired_rows

__all__ = [
    "MSA_CROP_SIZE",
    "PAIRING_FILES",
    "PREPAIRED_FILE",
    "EntityMsa",
    "check_alignment_query",
    "entity_msa",
    "load_entity_msa",
    "make_multimer_msa_features",
    "entity_folder",
    "complex_msa_features",
    "pad_msa",
]

#: AF2-Multimer's MSA crop per chain (``feature_processing.MSA_CROP_SIZE``).
MSA_CROP_SIZE = 2048
#: Pairing alignments of a chain folder, first found wins (ColabFold/Protenix, then AF2/OpenFold).
PAIRING_FILES = ("pairing.a3m", "pairing.a3m.gz", "uniprot_hits.sto", "uniprot_hits.sto.gz", "uniprot_hits.a3m")
#: A chain folder's pre-paired rows (an MSA server's paired mode): row ``k`` of every chain's file is one
#: pair; used instead of :data:`PAIRING_FILES` when present.
PREPAIRED_FILE = "prepaired.a3m"


@dataclass(frozen=True, eq=False)
class EntityMsa:
    """One entity's alignments as tokens.

    Attributes:
        msa: ``[N_seq, L]`` int64 unpaired MSA tokens (0-19 aa, 20 X, 21 gap); row 0 is the query.
        deletion_matrix: ``[N_seq, L]`` float32 deletion counts.
        pairing: the pairing alignment (:class:`~.msa_pairing.PairingMsa`; query alone when none).
    """

    msa: np.ndarray
    deletion_matrix: np.ndarray
    pairing: PairingMsa


def check_alignment_query(cx: Complex, entity_id: int, msa: Msa) -> None:
    """Raise unless ``msa``'s first row is entity ``entity_id``'s sequence.

    Raises:
        InputError: one line naming the file, the chain and, when the first row is another chain's
            sequence, that chain (the alignments of two chains were swapped).
    """
    chain = cx.chains_of(entity_id)[0]
    problem = query_problem(msa.query, chain.sequence) if msa.depth else None
    if not problem:
        return
    other = next((c for c in cx.chains if c.entity_id != entity_id and c.sequence == msa.query), None)
    if other is not None:
        problem = (
            f"the alignment's query is the sequence of chain {other.chain_id}, not of chain {chain.chain_id}: "
            "the alignments of two chains are swapped; give each chain its own folder"
        )
    else:
        problem = f"{problem} of chain {chain.chain_id}"
    raise InputError(problem, file=msa.path, record=chain.record, line=1)


def entity_msa(
    cx: Complex, entity_id: int, unpaired: Sequence[Msa] = (), pairing: Msa | None = None, *, prepaired: bool = False
) -> EntityMsa:
    """An :class:`EntityMsa` from parsed alignments (each checked by :func:`check_alignment_query`);
    ``prepaired``: ``pairing`` holds rows paired already (:func:`~.msa_pairing.prepaired_msa`)."""
    sequence = cx.entities[entity_id]
    for msa in (*unpaired, *([pairing] if pairing is not None else [])):
        check_alignment_query(cx, entity_id, msa)
    record = cx.chains_of(entity_id)[0].record
    feats = make_msa_features(sequence, unpaired, name=record)
    if prepaired and pairing is not None:
        paired = prepaired_msa(sequence, pairing)
    else:
        paired = pairing_msa(sequence, pairing, name=record)
    return EntityMsa(feats["msa"], feats["deletion_matrix"], paired)


def load_entity_msa(cx: Complex, entity_id: int, folder) -> EntityMsa:
    """:func:`entity_msa` from a chain folder: its unpaired MSAs in AF2's order and caps
    (:func:`~.alignment_layout.alignment_files`) and :data:`PREPAIRED_FILE` or else the first of
    :data:`PAIRING_FILES` found."""
    folder = Path(folder)
    unpaired = [parse_msa(p, max_sequences=cap) for p, cap in alignment_files(folder)]
    if (folder / PREPAIRED_FILE).is_file():
        return entity_msa(cx, entity_id, unpaired, parse_msa(folder / PREPAIRED_FILE), prepaired=True)
    found = next((folder / n for n in PAIRING_FILES if (folder / n).is_file()), None)
    pairing = parse_msa(found) if found is not None else None
    return entity_msa(cx, entity_id, unpaired, pairing)


def entity_folder(msa_dir, cx: Complex, entity_id: int) -> Path | None:
    """The alignment folder of an entity in ``msa_dir``: the first existing of ``<complex>_<chain id>``
    (``2q2k_A``), ``<record>``, ``<chain id>`` for each copy, then ``<entity_id>`` (Protenix's
    ``msa/1/``); ``None`` when there is none."""
    names = []
    for c in cx.chains_of(entity_id):
        names += [f"{cx.name}_{c.chain_id}", c.record, c.chain_id]
    names.append(str(entity_id))
    return next((Path(msa_dir) / n for n in dict.fromkeys(names) if n and (Path(msa_dir) / n).is_dir()), None)


def complex_msa_features(cx: Complex, msa_dir=None, *, pair: bool | None = None) -> dict[str, np.ndarray]:
    """:func:`make_multimer_msa_features` with each entity's alignments read from its
    :func:`entity_folder` (one read per entity); an entity without a folder gets its query alone,
    with a warning naming its chains."""
    msas = {}
    for eid, seq in cx.entities.items():
        folder = entity_folder(msa_dir, cx, eid) if msa_dir is not None else None
        if folder is None:
            if msa_dir is not None:
                ids = ", ".join(c.chain_id for c in cx.chains_of(eid))
                warn_input(
                    f"no alignment folder for chain(s) {ids} in {msa_dir}: single-sequence MSA for them",
                    file=cx.path,
                    record=cx.chains_of(eid)[0].record,
                )
            msas[eid] = entity_msa(cx, eid)
        else:
            msas[eid] = load_entity_msa(cx, eid, folder)
    return make_multimer_msa_features(cx, msas, pair=pair)


def pad_msa(features: Mapping[str, np.ndarray], min_num_seq: int = 512) -> dict[str, np.ndarray]:
    """AF2-Multimer's ``pipeline_multimer.pad_msa``: append zero rows (``msa`` 0, masks 0) until the MSA
    has ``min_num_seq`` rows; ``num_alignments`` keeps the real count."""
    out = dict(features)
    missing = min_num_seq - out["msa"].shape[0]
    if missing > 0:
        for key in ("msa", "deletion_matrix", "msa_mask", "bert_mask"):
            out[key] = np.pad(out[key], ((0, missing), (0, 0)))
        out["cluster_bias_mask"] = np.pad(out["cluster_bias_mask"], (0, missing))
    return out


def _warn_mixed_species(cx: Complex, entity_msas: Mapping[int, EntityMsa]) -> None:
    """One warning when the entities' pairing alignments name species only in different ways
    (NCBI taxids of ``pairing.a3m`` vs UniProt species codes of ``uniprot_hits.sto``): nothing can pair."""
    kinds = {eid: {s.partition(":")[0] for s in em.pairing.species if s} for eid, em in entity_msas.items()}
    named = [k for k in kinds.values() if k]
    if len(named) > 1 and not any(a & b for i, a in enumerate(named) for b in named[i + 1 :]):
        listed = "; ".join(
            f"chain(s) {', '.join(c.chain_id for c in cx.chains_of(e))}: {', '.join(sorted(k))}"
            for e, k in kinds.items()
            if k
        )
        warn_input(
            f"pairing alignments name species in different ways ({listed}; ncbi = UniRef100_<acc>_<taxid> "
            "headers, uniprot = UniProt species codes): no rows are paired; give every chain the same layout",
            file=cx.path,
            record=cx.name,
        )


def _paired_rows(cx: Complex, entity_msas: Mapping[int, EntityMsa]) -> np.ndarray:
    """:func:`~.msa_pairing.prepaired_rows` when every entity's pairing alignment is pre-paired, else
    :func:`~.msa_pairing.pair_rows` (by species).

    Raises:
        InputError: some entities pre-paired and others not, or pre-paired alignments of different depths.
    """
    chains = [entity_msas[c.entity_id].pairing for c in cx.chains]
    kinds = {c.prepaired for c in chains}
    if kinds == {True}:
        try:
            return prepaired_rows(chains)
        except ValueError as exc:
            raise InputError(str(exc), file=cx.path, record=cx.name) from None
    if True in kinds:
        ids = ", ".join(c.chain_id for c, p in zip(cx.chains, chains) if not p.prepaired)
        raise InputError(
            f"chain(s) {ids} have no {PREPAIRED_FILE} while other chains do: pre-paired rows pair only "
            "with pre-paired rows; give every chain one, or none",
            file=cx.path,
            record=cx.name,
        )
    _warn_mixed_species(cx, entity_msas)
    return pair_rows(chains)


def _unpaired_crop(paired: np.ndarray | None, num_unpaired: int, crop: int) -> int:
    """AF2 ``_crop_single_chain``: the unpaired rows one chain keeps, ``paired`` = its segment of the
    (already cropped) paired block, ``None`` without pairing."""
    if paired is None:
        return min(num_unpaired, crop)
    non_gap = int(np.any(paired != GAP, axis=1).sum())
    return min(num_unpaired, max(crop - non_gap, 0))


def make_multimer_msa_features(
    cx: Complex, entity_msas: Mapping[int, EntityMsa], *, pair: bool | None = None, msa_crop_size: int = MSA_CROP_SIZE
) -> dict[str, np.ndarray]:
    """Merged complex features with AF2-Multimer's names (steps in the module docstring).

    Args:
        cx: the complex.
        entity_msas: ``entity_id`` -> :class:`EntityMsa` for every entity of ``cx``.
        pair: pair MSA rows across chains; ``None`` = AF2's rule (when ``cx`` has two or more entities).
        msa_crop_size: AF2's per-chain MSA crop.

    Returns:
        ``aatype``, ``residue_index`` (restarting per chain), ``asym_id``, ``entity_id``, ``sym_id``,
        ``seq_mask`` (``[N_res]``); ``msa`` (int64), ``deletion_matrix``, ``msa_mask``, ``bert_mask``
        (``[N_seq, N_res]``; ``bert_mask`` 0 off the diagonal blocks); ``cluster_bias_mask``
        (``[N_seq]``: 1 on row 0 when paired, else on each entity block's first row);
        ``deletion_mean`` (``[N_res]``, over each chain's unpaired MSA before cropping);
        scalars ``num_paired_rows`` (leading rows that are the paired block: the query row counts; 1
        for a homomer or monomer, 0 for a heteromer without pairing), ``num_alignments``,
        ``seq_length``.

    Raises:
        ValueError: an entity without an :class:`EntityMsa` or with one of the wrong width.
    """
    for eid, seq in cx.entities.items():
        if eid not in entity_msas:
            raise ValueError(
                f"no alignments for entity {eid} (chains {', '.join(c.chain_id for c in cx.chains_of(eid))})"
            )
        if entity_msas[eid].msa.shape[1] != len(seq) or entity_msas[eid].pairing.msa.shape[1] != len(seq):
            raise ValueError(f"alignments of entity {eid} are not {len(seq)} columns wide")
    if pair is None:
        pair = not cx.is_homomer_or_monomer
    n_res, offsets = cx.num_res, cx.offsets
    cols = {c.asym_id: slice(o, o + len(c)) for c, o in zip(cx.chains, offsets)}

    paired_msa = paired_del = None
    segments: dict[int, np.ndarray] = {}  # asym_id -> paired segment (tokens)
    if pair:
        rows = _paired_rows(cx, entity_msas)
        keep_paired = min(len(rows), msa_crop_size // 2)
        paired_msa = np.full((len(rows), n_res), GAP, np.int64)
        paired_del = np.zeros((len(rows), n_res), np.float32)
        for k, c in enumerate(cx.chains):
            m, d = gather_paired(entity_msas[c.entity_id].pairing, rows[:, k])
            paired_msa[:, cols[c.asym_id]], paired_del[:, cols[c.asym_id]] = m, d
            segments[c.asym_id] = m

    unpaired: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for eid in cx.entities:
        em = entity_msas[eid]
        msa, dels = em.msa, em.deletion_matrix
        copies = cx.chains_of(eid)
        if pair:
            # Copies of one entity get the same paired segment; their unpaired rows are deduplicated against it.
            repeated = {row.tobytes() for c in copies for row in segments[c.asym_id]}
            keep = np.array([row.tobytes() not in repeated for row in msa], dtype=bool)
            msa, dels = msa[keep], dels[keep]
        n_keep = min(
            _unpaired_crop(segments[c.asym_id][:keep_paired] if pair else None, len(msa), msa_crop_size) for c in copies
        )
        unpaired[eid] = (msa[:n_keep], dels[:n_keep])

    blocks_msa, blocks_del, blocks_bert, bias = [], [], [], []
    if pair:
        blocks_msa.append(paired_msa[:keep_paired])
        blocks_del.append(paired_del[:keep_paired])
        blocks_bert.append(np.ones((keep_paired, n_res), np.float32))
        bias.append(np.eye(1, keep_paired, dtype=np.float32)[0])
    for eid, (msa, dels) in unpaired.items():
        block = np.full((len(msa), n_res), GAP, np.int64)
        block_del = np.zeros((len(msa), n_res), np.float32)
        bert = np.zeros((len(msa), n_res), np.float32)
        for c in cx.chains_of(eid):
            block[:, cols[c.asym_id]], block_del[:, cols[c.asym_id]], bert[:, cols[c.asym_id]] = msa, dels, 1.0
        blocks_msa.append(block)
        blocks_del.append(block_del)
        blocks_bert.append(bert)
        first = np.zeros(len(msa), np.float32)
        if not pair and len(msa):
            first[0] = 1.0
        bias.append(first)

    msa = np.concatenate(blocks_msa)
    num_paired = keep_paired if pair else int(cx.is_homomer_or_monomer)
    deletion_mean = np.concatenate(
        [entity_msas[c.entity_id].deletion_matrix.mean(axis=0).astype(np.float32) for c in cx.chains]
    )
    return {
        "aatype": np.concatenate([sequence_to_aatype(c.sequence) for c in cx.chains]),
        "residue_index": cx.residue_index(),
        "asym_id": cx.per_residue("asym_id"),
        "entity_id": cx.per_residue("entity_id"),
        "sym_id": cx.per_residue("sym_id"),
        "seq_mask": np.ones(n_res, np.float32),
        "msa": msa,
        "deletion_matrix": np.concatenate(blocks_del),
        "msa_mask": np.ones(msa.shape, np.float32),
        "bert_mask": np.concatenate(blocks_bert),
        "cluster_bias_mask": np.concatenate(bias),
        "deletion_mean": deletion_mean,
        "num_paired_rows": np.asarray(num_paired, np.int64),
        "num_alignments": np.asarray(len(msa), np.int64),
        "seq_length": np.asarray(n_res, np.int64),
    }
