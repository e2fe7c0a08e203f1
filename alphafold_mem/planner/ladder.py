"""The candidates the chooser tries (:mod:`.chooser`), fastest first: the chunk sizes
(:func:`chunk_candidates`) and the policy ladder (:func:`policy_candidates`), each a
:class:`Candidate`. Order is a fixed cost order: unchunked before chunked, larger chunks before
smaller, less offload before more; precision is the caller's choice, as it changes the results.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ..memory.policy import MemoryPolicy

#: Default largest chunk the chooser considers (``MemoryPolicy.max_chunk_size`` overrides it).
MAX_CHUNK_SIZE = 256
#: Smallest chunk considered: below it the per-chunk overhead grows and the peak hardly falls.
MIN_CHUNK_SIZE = 4


def chunk_candidates(n_max: int, max_chunk_size: Optional[int] = None) -> list[Optional[int]]:
    """``None`` (no chunking), then powers of two below the largest axis ``n_max``, from
    ``max_chunk_size`` (default :data:`MAX_CHUNK_SIZE`) down to :data:`MIN_CHUNK_SIZE`."""
    top = min(max_chunk_size or MAX_CHUNK_SIZE, max(n_max - 1, 1))
    chunks, c = [], MIN_CHUNK_SIZE
    while c <= top:
        chunks.append(c)
        c *= 2
    return [None] + chunks[::-1]


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A policy to try: ``label`` for tables, ``group`` names a run of candidates that differ only
    in chunk size (bisected)."""

    label: str
    policy: MemoryPolicy
    group: str = ""


def policy_candidates(
    training: bool,
    precision: str,
    n_max: int,
    max_chunk_size: Optional[int] = None,
    device: torch.device | str = "cuda",
) -> list[Candidate]:
    """The policy ladder, fastest first, all in ``precision``.

    Inference: the reference; in place and unchunked (templates streamed, head logits reduced);
    then ``low_memory_inference`` at every chunk size with offload ``"none"``, then, on an
    accelerator, ``"idle"`` and ``"buffers"`` (on CPU offload moves nothing). The last candidate
    has the smallest peak.
    Training: the reference; ``training()`` without checkpointing, with per-block and per-update
    checkpointing; then ``training()`` at every chunk size.
    """
    chunks = [c for c in chunk_candidates(n_max, max_chunk_size) if c is not None]
    if training:
        no_ckpt = dict(checkpoint_evoformer=0, checkpoint_extra_msa=0, checkpoint_template=0)
        rows = [
            Candidate("reference", MemoryPolicy.reference()),
            Candidate("training, no checkpointing", MemoryPolicy.training(**no_ckpt)),
            Candidate("training (checkpoint per block)", MemoryPolicy.training()),
            Candidate("training, checkpoint per update", MemoryPolicy.training(checkpoint_granularity="update")),
        ]
        rows += [Candidate(f"training, chunk {c}", MemoryPolicy.training(chunk_size=c), "training") for c in chunks]
    else:
        rows = [
            Candidate("reference", MemoryPolicy.reference()),
            Candidate("in place, unchunked", MemoryPolicy(inplace=True, templates="streamed", head_logits="drop")),
        ]
        levels = ("none",) if torch.device(device).type == "cpu" else ("none", "idle", "buffers")
        for offload in levels:
            rows += [
                Candidate(
                    f"low_memory_inference, chunk {c}, offload {offload}",
                    MemoryPolicy.low_memory_inference(chunk_size=c, offload=offload),
                    offload,
                )
                for c in chunks
            ]
    return [dataclasses.replace(r, policy=r.policy.replace(precision=precision)) for r in rows]


__all__ = ["MAX_CHUNK_SIZE", "MIN_CHUNK_SIZE", "Candidate", "chunk_candidates", "policy_candidates"]
