"""Lightning strategies for training: DDP set up for AF2's heads, FSDP / DeepSpeed refused.

Data parallelism (``--strategy ddp``) is what AF2 training uses (Suppl. 1.11: 128 TPU cores, one
sample per core): every rank holds the whole model (93 M parameters, 373 MB in fp32 for model_1),
and the memory that limits training is the activations, which :class:`alphafold_mem.MemoryPolicy`
reduces. Sharded strategies are refused with a clear message: the EMA copy of the weights and the
manual optimisation step (non-finite checks, clipping at global norm 0.1, EMA update) read full,
unsharded parameters on every rank.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

from lightning.pytorch.strategies import DDPStrategy

__all__ = ["UNSUPPORTED", "make_strategy", "check_strategy"]

#: Name prefixes of the Lightning strategies that shard parameters, with why they are refused.
UNSUPPORTED = {
    "fsdp": "FSDP shards the parameters",
    "deepspeed": "DeepSpeed ZeRO shards the optimiser state and parameters",
}


def _refusal(what: str) -> str:
    return (
        f"--strategy {what} is not supported: {UNSUPPORTED[what]}, but the EMA copy of the weights and the "
        "manual optimisation step (non-finite checks, gradient clipping at global norm 0.1, EMA update) read "
        "full, unsharded parameters on every rank. Use --strategy ddp: every rank then holds the whole model "
        "(model_1: 93 M parameters, 373 MB in fp32) and the activations, which limit training, are reduced by "
        "the memory policy (--memory-policy training)"
    )


def make_strategy(name: Any, timeout_s: Optional[float] = None) -> Any:
    """The Lightning strategy for ``name``: ``"ddp"`` -> ``DDPStrategy`` with
    ``find_unused_parameters=True`` (heads with zero loss weight, e.g. PAE in initial training, get no
    gradient) and a collective timeout of ``timeout_s`` seconds (None: Lightning's 30 min); other
    names and strategy objects pass through.

    Raises:
        ValueError: a sharded strategy (FSDP, DeepSpeed), see :data:`UNSUPPORTED`.
    """
    check_strategy(name)
    if name == "ddp":
        kwargs = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
        return DDPStrategy(find_unused_parameters=True, **kwargs)
    return name


def check_strategy(strategy: Any) -> None:
    """Raise ``ValueError`` for a sharded strategy, given by name or as a Lightning strategy object."""
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    low = name.lower()
    for prefix in UNSUPPORTED:
        if low.startswith(prefix):
            raise ValueError(_refusal(prefix))
