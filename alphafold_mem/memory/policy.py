"""The memory policy: one frozen object that selects every memory technique. It is bound to a model
from outside (:func:`alphafold_mem.bind`, which reads each module's declaration in
:mod:`alphafold_mem.memory.axes`) and can be re-bound at run time, e.g. between training and
inference. Model forwards take data only; the policy is not an ambient context, because activation
checkpointing recomputes during backward, outside any ``with`` block of the forward.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from ..precision import Precision

#: ``MemoryPolicy.kernels``: the implementation of every op with a fused kernel.
Kernels = Literal["reference", "triton"]
#: ``MemoryPolicy.attention``: the PyTorch attention algorithm where the core is not a kernel.
Attention = Literal["reference", "chunked"]
#: ``MemoryPolicy.checkpoint_granularity``: what one activation checkpoint holds.
Granularity = Literal["block", "update", "nested"]
#: ``MemoryPolicy.offload``: what waits in host memory (the keys of ``OFFLOAD_LEVELS``).
Offload = Literal["none", "idle", "buffers"]
#: ``MemoryPolicy.templates``: how the template pair stack and the pointwise attention run.
TemplateMode = Literal["batched", "streamed"]
#: ``MemoryPolicy.head_logits``: whether the [*, N_res, N_res, bins] head logits are outputs.
HeadLogits = Literal["keep", "drop"]
#: ``MemoryPolicy.outer_product``: how the outer product mean forms its outer product.
OuterProduct = Literal["reference", "recompute"]
#: ``MemoryPolicy.chunk_size``: no chunking, rows per chunk, or chosen by the planner.
ChunkSize = Union[None, int, Literal["auto"]]

ATTENTION_IMPLS = typing.get_args(Attention)
KERNELS = typing.get_args(Kernels)
TEMPLATE_MODES = typing.get_args(TemplateMode)
HEAD_LOGITS = typing.get_args(HeadLogits)
OUTER_PRODUCT_MODES = typing.get_args(OuterProduct)


@dataclass(frozen=True)
class MemoryPolicy:
    """Every memory choice of a run. The default is the reference: the plain computation.

    How kernels are chosen: one field, ``kernels``, names the implementation of every op that has a
    fused kernel in :mod:`kernels` -- LayerNorm, the attention core, the triangle multiplication
    (Alg. 11/12) -- all together: ``"reference"`` (plain PyTorch, the default) or ``"triton"``.
    ``attention`` chooses between the two PyTorch attention algorithms and is read only where the
    attention core is not a kernel, i.e. with ``kernels="reference"``; with ``kernels="triton"`` the
    attention core is the fused kernel, itself low-memory (online softmax, probabilities recomputed
    in backward), so ``MemoryPolicy.training(kernels="triton")`` means checkpointing plus every
    Triton kernel. Per-kernel comparisons are the kernel benchmarks' job (``benchmarks/kernels``).

    Attributes:
        kernels: ``"reference"`` or ``"triton"`` (the fused Triton kernels for LayerNorm, attention
            and triangle multiplication; a forward raises :class:`kernels.KernelUnavailableError`
            where Triton cannot run). With ``"triton"`` the triangle multiplication ignores
            ``chunk_size`` (it never materialises a ``[*, N_res, N_res, c_hidden]`` projection).
        attention: attention core when ``kernels="reference"``: ``"reference"`` (plain PyTorch,
            materialises the ``[*, H, Q, K]`` probabilities) or ``"chunked"`` (low-memory attention,
            Rabe & Staats 2021: query/key chunks with online softmax, probabilities recomputed in
            backward).
        chunk_size: ``None`` (no chunking), an int (rows per chunk for every chunkable op: MSA row
            and column attention, extra-MSA attention, triangle attention and multiplication, outer
            product mean, transitions, template pointwise attention) or ``"auto"`` (the largest
            power of two whose predicted peak fits ``max_memory``, chosen for the input sizes before
            binding by :func:`alphafold_mem.planner.resolve_policy`).
        attention_chunks: ``(q_chunk, kv_chunk)`` of the ``"chunked"`` attention.
        checkpoint_evoformer, checkpoint_extra_msa, checkpoint_template: activation checkpointing,
            in blocks per checkpoint (0: off, 1: every block, n: segments of n blocks).
        checkpoint_granularity: ``"block"`` (segments of blocks, as above) or ``"update"``: inside
            every checkpointed stack, each residual update of each block (attention, transition,
            outer product mean, triangle update) is its own checkpoint. Same single recomputation
            as per-block checkpointing; the stored boundaries are the ~10 update inputs of every
            block instead of one block input, and the recomputed activations are one update's
            instead of one block's. Smaller peak for shallow stacks (2 + 1 blocks: 0.21 instead of
            0.40 of the unchecked peak), larger for deep ones (AF2 initial training, 48 blocks:
            18.8 GB instead of 5.5 GB predicted). ``"nested"``: both: segments of blocks are
            checkpoints, and while a segment is recomputed each of its updates is again a checkpoint,
            so backward holds one segment input per segment, ~10 update inputs of one block and one
            update's activations (instead of one block's), for one more forward of every update.
        precision: ``"fp32"`` (parameter dtype), ``"bf16"`` or ``"bf16-full"`` (autocast entered once in
            ``AlphaFold.forward``, fp32 islands as in :mod:`alphafold_mem.precision`).
        inplace: inference only: residual updates modify the representations in place; with a
            chunk size, each chunk's update is added as soon as it is computed, so no update-sized
            buffer exists (and the triangle multiplication keeps one projection, not two).
        offload: what waits in host memory (inference on an accelerator; a no-op on CPU), one of
            :data:`~alphafold_mem.memory.offload.OFFLOAD_LEVELS`: ``"none"``, ``"idle"``
            (representations while unused) or ``"buffers"`` (also the triangle multiplication's
            pair-sized buffer, streamed back in row blocks). ``True``/``False`` mean ``"idle"``/``"none"``.
        templates: ``"batched"`` (every template through the pair stack, then the pointwise
            attention over the stacked ``[*, N_templ, N_res, N_res, c_t]``; the reference) or
            ``"streamed"`` (one template at a time; the pointwise attention accumulates across
            templates with an online softmax, so the stack never exists).
        head_logits: ``"keep"`` (the distogram and PAE logits ``[*, N_res, N_res, bins]`` are outputs)
            or ``"drop"`` (inference: PAE and pTM are computed from PAE logits in row chunks;
            neither logits tensor is returned; ``distogram_logits`` is not computed). With autograd
            both are kept (the losses read them).
        outer_product: ``"reference"`` (the outer product mean's ``[*, N_res, N_res, C*C]`` product of
            each chunk formed whole, flattened and projected; with autograd the flattened product,
            eight pair representations' worth of elements at AF2's sizes, is saved for backward) or
            ``"recompute"`` (row blocks of at most one pair representation's worth, both copies
            counted; only the two projections are saved and backward forms each block again:
            :func:`alphafold_mem.memory.outer_product.outer_product_linear`).
        max_memory: the memory budget in bytes (``chunk_size="auto"``, and predict's pre-flight);
            ``None``: the free memory of the device plus the weights.
        max_chunk_size: the largest chunk ``chunk_size="auto"`` considers (``None``: no limit below
            the largest axis).
    """

    kernels: Kernels = "reference"
    attention: Attention = "reference"
    chunk_size: ChunkSize = None
    attention_chunks: tuple[int, int] = (1024, 4096)
    checkpoint_evoformer: int = 0
    checkpoint_extra_msa: int = 0
    checkpoint_template: int = 0
    checkpoint_granularity: Granularity = "block"
    precision: Precision = "fp32"
    inplace: bool = False
    offload: Offload = "none"
    templates: TemplateMode = "batched"
    head_logits: HeadLogits = "keep"
    outer_product: OuterProduct = "reference"
    max_memory: Optional[int] = None
    max_chunk_size: Optional[int] = None

    def __post_init__(self) -> None:
        if isinstance(self.offload, bool):
            object.__setattr__(self, "offload", "idle" if self.offload else "none")
        if self.attention == "triton":
            raise ValueError(
                "attention='triton' is kernels='triton' (one field selects every Triton kernel: "
                "LayerNorm, attention and triangle multiplication)"
            )
        for name, valid in field_choices().items():
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(map(str, valid))}")
        if self.max_chunk_size is not None and self.max_chunk_size < 1:
            raise ValueError(f"max_chunk_size must be >= 1, got {self.max_chunk_size}")
        cs = self.chunk_size
        if not (cs is None or cs == "auto" or (isinstance(cs, int) and not isinstance(cs, bool) and cs >= 1)):
            raise ValueError(f"chunk_size must be None, an int >= 1 or 'auto', got {cs!r}")
        if len(self.attention_chunks) != 2 or min(self.attention_chunks) < 1:
            raise ValueError(f"attention_chunks must be two ints >= 1, got {self.attention_chunks!r}")
        for name in ("checkpoint_evoformer", "checkpoint_extra_msa", "checkpoint_template"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (blocks per checkpoint), got {getattr(self, name)}")
        mm = self.max_memory
        if mm is not None and (not isinstance(mm, int) or isinstance(mm, bool) or mm <= 0):
            raise ValueError(
                f"max_memory must be a positive int number of bytes (e.g. 40 * 2**30 for 40 GiB), got {mm!r}"
            )

    # -- presets ------------------------------------------------------------------------------
    @classmethod
    def reference(cls, **overrides: Any) -> "MemoryPolicy":
        """The plain computation: no chunking, no checkpointing, reference attention, fp32."""
        return cls(**overrides)

    @classmethod
    def training(cls, **overrides: Any) -> "MemoryPolicy":
        """Training: every Evoformer, extra-MSA and template block checkpointed (AF2 Suppl. 1.11.8;
        one recomputation per step), and low-memory attention (the probabilities are never stored,
        not even while recomputing). For shallow stacks ``checkpoint_granularity="update"`` has the
        smaller peak (see the field); ``outer_product="recompute"`` lowers it further (see the
        field). Mixed precision: ``precision="bf16"`` (inference and plain
        PyTorch loops) or the Lightning trainer's ``bf16-mixed``."""
        base = dict(attention="chunked", checkpoint_evoformer=1, checkpoint_extra_msa=1, checkpoint_template=1)
        return cls(**{**base, **overrides})

    @classmethod
    def low_memory_inference(cls, **overrides: Any) -> "MemoryPolicy":
        """Inference at a small footprint: every chunkable op in chunks of 16 rows, each chunk's update
        added in place (no update-sized buffers), low-memory attention (its logits block capped
        whatever the chunk), templates streamed one at a time, head logits reduced in row chunks
        and not returned, and on an accelerator idle representations and the triangle
        multiplication's buffer in host memory. The peak is then the representations plus one
        pair-sized buffer at most; smaller chunks save little more and cost time (Python overhead
        per chunk)."""
        base = dict(
            attention="chunked",
            chunk_size=16,
            inplace=True,
            offload="buffers",
            templates="streamed",
            head_logits="drop",
        )
        return cls(**{**base, **overrides})

    def replace(self, **changes: Any) -> "MemoryPolicy":
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @property
    def name(self) -> str:
        """A short description (for tables)."""
        for preset in ("reference", "training", "low_memory_inference"):
            if self == getattr(MemoryPolicy, preset)():
                return preset
        diffs = [
            f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self) if getattr(self, f.name) != f.default
        ]
        return ",".join(diffs) or "reference"


@functools.cache
def field_choices() -> dict[str, tuple]:
    """Field name -> the values its ``Literal`` type allows, for every enumerated field of
    :class:`MemoryPolicy` (``bool`` fields: ``(False, True)``). Validation, the command line's choices,
    the ablation's technique rows and the docs read this, not a docstring."""
    hints = typing.get_type_hints(MemoryPolicy)
    out: dict[str, tuple] = {}
    for f in dataclasses.fields(MemoryPolicy):
        hint = hints[f.name]
        if typing.get_origin(hint) is Literal:
            out[f.name] = typing.get_args(hint)
        elif hint is bool:
            out[f.name] = (False, True)
    return out


@dataclass(frozen=True)
class AutoPolicy:
    """A request for the planner to choose the whole policy for each input size: the fastest policy
    of its ladder (:func:`alphafold_mem.planner.policy_candidates`) whose predicted peak fits
    ``max_memory``, resolved before binding by :func:`alphafold_mem.planner.resolve_policy` (predict's
    pre-flight, per target). The string ``"auto"`` is ``AutoPolicy()``.

    Attributes:
        precision: the precision of every candidate (it changes the results, so it is not chosen).
        max_memory: the memory budget in bytes; ``None``: the device's free memory plus the weights.
        max_chunk_size: the largest chunk a candidate may have (``None``: the chooser's default).
    """

    precision: Precision = "fp32"
    max_memory: Optional[int] = None
    max_chunk_size: Optional[int] = None

    def __post_init__(self) -> None:
        MemoryPolicy(precision=self.precision, max_memory=self.max_memory, max_chunk_size=self.max_chunk_size)

    @property
    def name(self) -> str:
        return "auto"


#: What a run asks for: a policy as it is (``chunk_size="auto"``: sized by the planner), or the
#: planner's choice (:class:`AutoPolicy`, or ``"auto"`` for ``AutoPolicy()``).
PolicyRequest = Union[MemoryPolicy, AutoPolicy, Literal["auto"]]


def as_request(request: PolicyRequest) -> Union[MemoryPolicy, AutoPolicy]:
    """``request`` with ``"auto"`` spelled :class:`AutoPolicy` ``()``.

    Raises:
        ValueError: anything else than a MemoryPolicy, an AutoPolicy or ``"auto"``.
    """
    if isinstance(request, (MemoryPolicy, AutoPolicy)):
        return request
    if request == "auto":
        return AutoPolicy()
    raise ValueError(
        f"a memory policy request is a MemoryPolicy, an AutoPolicy or 'auto', got {request!r} "
        "(a preset by name: alphafold_mem.memory.preset(name))"
    )


PRESETS = ("reference", "training", "low_memory_inference")


def preset(name: str, **overrides: Any) -> MemoryPolicy:
    """A named preset (``reference``, ``training``, ``low_memory_inference``) with overrides."""
    if name not in PRESETS:
        raise ValueError(f"unknown memory policy preset '{name}'; valid: {', '.join(PRESETS)}")
    return getattr(MemoryPolicy, name)(**overrides)


__all__ = [
    "ATTENTION_IMPLS",
    "Attention",
    "AutoPolicy",
    "ChunkSize",
    "Granularity",
    "HeadLogits",
    "Kernels",
    "Offload",
    "OuterProduct",
    "PolicyRequest",
    "TemplateMode",
    "as_request",
    "field_choices",
    "HEAD_LOGITS",
    "KERNELS",
    "MemoryPolicy",
    "OUTER_PRODUCT_MODES",
    "PRESETS",
    "TEMPLATE_MODES",
    "preset",
]
