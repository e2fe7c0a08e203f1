"""The chains of a complex as the planner sees them: chain lengths and the entity of each chain, the
shapes and chain features (``asym_id``, ``entity_id``, ``sym_id``, ``residue_index``) of the fake batch
the estimator traces the AF2-Multimer model on (:func:`~alphafold_mem.planner.estimate.feature_batch`).

Numbering follows AF2-Multimer (``pipeline_multimer.add_assembly_features``, as
:mod:`alphafold_mem.data.complex`): ``asym_id`` 1, 2, ... per chain in input order, ``entity_id`` 1, 2,
... per distinct entity in order of first appearance, ``sym_id`` 1, 2, ... among the copies of one
entity, ``residue_index`` restarting at 0 in every chain.

Multimer sizes (:func:`multimer_sizes`): AF2-Multimer v3 samples 508 MSA clusters and 2048 extra
sequences (1152 for models 4 and 5) with up to 4 templates and does not reduce the clusters by the
templates (google-deepmind/alphafold ``alphafold/model/config.py``, ``CONFIG_MULTIMER``:
``num_msa 508``, ``num_extra_msa 2048``, ``template.max_templates 4``; ``CONFIG_DIFFS`` for models 4
and 5), the values of :func:`alphafold_mem.config.model_config` for the ``*_multimer_v3`` presets.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..config import ModelConfig

__all__ = ["Chains", "multimer_sizes"]


@dataclasses.dataclass(frozen=True)
class Chains:
    """Chain lengths and entities of a complex (hashable: part of the planner's cache key).

    Attributes:
        lengths: residues of each chain, in input order.
        entity_ids: the 1-based entity of each chain (identical chains share one); by default every
            chain is its own entity (:meth:`from_lengths`: equal lengths do not make equal chains).

    Raises:
        ValueError: no chain, a length below 1, or entity ids that do not number 1, 2, ... in order of
            first appearance.
    """

    lengths: tuple[int, ...]
    entity_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        lengths = tuple(int(n) for n in self.lengths)
        entities = tuple(int(e) for e in self.entity_ids) or tuple(range(1, len(lengths) + 1))
        if not lengths or min(lengths) < 1:
            raise ValueError(f"a complex needs chains of at least one residue each, got lengths {list(lengths)}")
        if len(entities) != len(lengths):
            raise ValueError(f"{len(lengths)} chain lengths but {len(entities)} entity ids")
        seen: list[int] = []
        for e in entities:
            if e not in seen:
                if e != len(seen) + 1:
                    raise ValueError(f"entity ids must number 1, 2, ... in order of first appearance, got {entities}")
                seen.append(e)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "entity_ids", entities)

    @classmethod
    def from_lengths(cls, lengths: Sequence[int]) -> "Chains":
        """Chains of ``lengths``, each its own entity."""
        return cls(tuple(lengths))

    @classmethod
    def of_complex(cls, complex_) -> "Chains":
        """The chains of a :class:`alphafold_mem.data.complex.Complex` (identical sequences: one entity)."""
        return cls(tuple(len(c) for c in complex_.chains), tuple(c.entity_id for c in complex_.chains))

    @classmethod
    def of_batch(cls, batch: dict[str, Tensor]) -> "Chains":
        """The chains of a multimer feature batch (``asym_id``, ``entity_id`` ``[N_res]``, chains
        consecutive; padding, ``asym_id`` 0, is left out)."""
        asym, entity = batch["asym_id"].reshape(-1).tolist(), batch["entity_id"].reshape(-1).tolist()
        lengths: dict[int, int] = {}
        entity_of: dict[int, int] = {}
        for a, e in zip(asym, entity):
            if a > 0:
                lengths[a] = lengths.get(a, 0) + 1
                entity_of.setdefault(a, e)
        return cls(tuple(lengths.values()), tuple(entity_of.values()))

    @property
    def n_res(self) -> int:
        """``N_res``: residues of all chains."""
        return sum(self.lengths)

    @property
    def num_entities(self) -> int:
        return max(self.entity_ids)

    @property
    def sym_ids(self) -> tuple[int, ...]:
        """The 1-based copy number of each chain within its entity."""
        count: dict[int, int] = {}
        out = []
        for e in self.entity_ids:
            count[e] = count.get(e, 0) + 1
            out.append(count[e])
        return tuple(out)

    def describe(self) -> str:
        """``'3 chains (2 entities), 650 residues: 200+250+200'`` for messages."""
        n, e = len(self.lengths), self.num_entities
        return (
            f"{n} chain{'s' if n != 1 else ''} ({e} entit{'y' if e == 1 else 'ies'}), {self.n_res} residues: "
            + "+".join(str(x) for x in self.lengths)
        )

    def features(self, device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """``asym_id``, ``entity_id``, ``sym_id``, ``residue_index``: ``[N_res]`` int64 each (works under
        FakeTensorMode: every piece has a static shape)."""

        def per_chain(values: Sequence[int]) -> Tensor:
            parts = [torch.full((n,), v, dtype=torch.long, device=device) for n, v in zip(self.lengths, values)]
            return torch.cat(parts)

        return {
            "asym_id": per_chain(range(1, len(self.lengths) + 1)),
            "entity_id": per_chain(self.entity_ids),
            "sym_id": per_chain(self.sym_ids),
            "residue_index": torch.cat([torch.arange(n, device=device) for n in self.lengths]),
        }


def multimer_sizes(
    config: ModelConfig,
    chains: Chains,
    n_seq: Optional[int] = None,
    n_extra: Optional[int] = None,
    n_templ: Optional[int] = None,
) -> tuple[int, int, int, int]:
    """``(N_res, N_seq, N_extra, N_templ)`` of a complex under ``config``: the complex's residues and,
    unless given, the config's MSA clusters, extra sequences and templates (module docstring for the
    AF2-Multimer values)."""
    d = config.data
    templ = config.template.max_templates if config.template.enabled else 0
    return (
        chains.n_res,
        d.max_msa_clusters if n_seq is None else n_seq,
        d.max_extra_msa if n_extra is None else n_extra,
        templ if n_templ is None else n_templ,
    )
