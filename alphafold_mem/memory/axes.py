"""The one declaration of what every module does with memory: which input axes an op may be split
along, which operands it needs whole, and which policy seams (kernels, in-place updates, activation
checkpointing, precision) it exposes.

Every module class of the network carries a class attribute ``memory_spec`` (a :class:`MemorySpec`),
written in its own class body, not inherited. Three readers use it:

* :func:`alphafold_mem.bind` binds a :class:`~alphafold_mem.MemoryPolicy`
  to a model by reading the declarations (not a list of classes) and refuses a model holding a module
  that declares nothing (:func:`undeclared_modules`): a new module cannot silently opt out;
* :func:`run_split` is how a module runs one of its declared splittable steps: the row chunks of
  :func:`alphafold_mem.memory.chunking.chunked` are cut along the declared dims, and the memory
  estimator's one-chunk mode reads the same calls;
* device sharding (dynamic axial parallelism, :mod:`alphafold_mem.distributed`) reads the same
  facts: which operands are representations (distributed across devices) and which are inputs every
  device holds whole, where each representation's rows and columns are, and which operands a slice
  needs whole (gathered piece by piece through the step's second axis, ``also``). A module bound to
  a device-sharding runner (attribute ``dap``) runs its steps through it.

Vocabulary (after PyTorch DTensor's placements): :class:`Shard` ``(dim)`` -- a representation
``[*, rows, cols, (channels)]`` read in slices along dim ``dim`` (its rows, or its columns with
``columns=True``); :class:`Slice` ``(dim)`` -- an input every device holds whole (a mask, per-residue
features, the single representation) read in slices along ``dim``; :data:`WHOLE` (a
:class:`Replicate`) -- every slice needs the whole operand (``Replicate(rows=...)`` when that operand
is a representation). Axis names are the field's words (:data:`AXES`). For chunking, Shard and Slice
are the same (the dim is narrowed); they differ for device sharding only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

import torch.nn as nn
from torch import Tensor

from .chunking import Result, chunked

#: The named axes an op may be split along, with what they are.
AXES = MappingProxyType(
    {
        "msa_row": "N_seq: the sequences of an MSA representation [*, N_seq, N_res, c_m]",
        "msa_column": "N_res of an MSA representation: its residue columns",
        "pair_row": "i of a pair representation [*, N_res (i), N_res (j), c_z]",
        "pair_column": "j of a pair representation",
        "row": "the leading axis of whichever representation the op updates (msa_row for m, pair_row for z)",
        "column": "the second axis of whichever representation the op updates (msa_column for m, pair_column for z)",
    }
)

#: The policy seams a module may expose (non-parameter attributes the binder sets).
SEAMS = MappingProxyType(
    {
        "attention": "attention_impl / attention_chunks: the attention core (reference, low-memory, Triton)",
        "kernel": "kernel_impl: a module with a fused kernel in kernels/ (LayerNorm, triangle multiplication) runs "
        "it ('triton') or its PyTorch code ('reference')",
        "inplace": "inplace: residual updates in place when no gradient is recorded",
        "precision": "precision: the one autocast of the forward",
        "offload": "offload: what waits in host memory (alphafold_mem.memory.offload.OFFLOAD_LEVELS)",
        "templates": "templates: the template stack batched or streamed one template at a time",
        "head_logits": "head_logits: the pair-sized head logits kept as outputs or reduced in row chunks",
        "outer_product": "outer_product: the outer product mean's [*, N_res, N_res, C*C] product formed whole "
        "('reference') or in row blocks and recomputed in backward ('recompute')",
        "dropout": "dap: under device sharding the dropout mask is drawn at the global shape, then sliced",
    }
)

#: Checkpointable block stacks: MemorySpec.stack -> the MemoryPolicy field giving blocks per checkpoint.
STACKS = MappingProxyType(
    {
        "evoformer": "checkpoint_evoformer",
        "extra_msa": "checkpoint_extra_msa",
        "template": "checkpoint_template",
    }
)


@dataclass(frozen=True)
class Shard:
    """A representation operand ``[*, rows, cols, (channels)]`` (m, z, a projection of them, a bias
    computed from them) read in slices along its dim ``dim``: its rows, or with ``columns=True`` its
    columns (its rows are then dim ``dim - 1``). A per-residue representation (one residue axis,
    e.g. m[0]) is declared by its columns. Dims are negative, counted from the channels end so that
    leading batch dims do not matter."""

    dim: int
    columns: bool = False

    def __post_init__(self) -> None:
        if self.dim >= 0:
            raise ValueError(f"Shard dims are negative (counted from the end), got {self.dim}")

    @property
    def cols(self) -> int:
        """The dim of the operand's columns (its residue axis)."""
        return self.dim if self.columns else self.dim + 1


@dataclass(frozen=True)
class Slice:
    """An operand every device holds whole -- a mask, per-residue features, the single
    representation -- read in slices along dim ``dim`` (negative). As an output: a per-residue result
    that every device must hold whole (device sharding gathers it)."""

    dim: int

    def __post_init__(self) -> None:
        if self.dim >= 0:
            raise ValueError(f"Slice dims are negative (counted from the end), got {self.dim}")


@dataclass(frozen=True)
class Replicate:
    """Every slice of the op needs the whole operand (non-tensor arguments are passed as they are).

    Attributes:
        rows: for a representation operand, the (negative) dim of its rows (its columns follow):
            device sharding then gathers it piece by piece, through the step's ``also`` split, which
            must slice it. ``None``: an input every device holds whole.
    """

    rows: Optional[int] = None

    def __post_init__(self) -> None:
        if self.rows is not None and self.rows >= -1:
            raise ValueError(f"Replicate rows must be a negative dim below the columns, got {self.rows}")


WHOLE = Replicate()
Placement = Union[Shard, Slice, Replicate]


@dataclass(frozen=True)
class Split:
    """One splittable step of an op: slices along ``axis`` are independent.

    Attributes:
        axis: a name from :data:`AXES`.
        inputs: one placement per positional argument of the step's function.
        output: where each result carries the axis: a dim (a representation's rows), a
            :class:`Shard` (``columns=True``: its columns) or a :class:`Slice` (a per-residue result
            every device must hold whole).
        also: the same step is also independent along a second axis, with these placements (e.g.
            the outgoing triangle multiplication's x_ij along i given all of b, and along j given
            all of a). Chunking uses ``inputs``; device sharding uses ``also`` when the operands'
            layout matches it, and to gather a :class:`Replicate` representation piece by piece.
    """

    axis: str
    inputs: tuple[Placement, ...]
    output: Union[int, Shard, Slice] = -3
    also: Optional["Split"] = None

    def __post_init__(self) -> None:
        if self.axis not in AXES:
            raise ValueError(f"unknown axis '{self.axis}'; valid: {', '.join(AXES)}")
        if not any(isinstance(p, (Shard, Slice)) for p in self.inputs):
            raise ValueError(f"a split along '{self.axis}' must slice at least one input")
        if isinstance(self.output, int):
            object.__setattr__(self, "output", Shard(self.output))
        if self.also is not None and len(self.also.inputs) != len(self.inputs):
            raise ValueError(
                f"a split's 'also' needs one placement per input ({len(self.inputs)}), got {len(self.also.inputs)}"
            )

    @property
    def dims(self) -> tuple[Optional[int], ...]:
        """The chunked dim of each input (``None``: passed whole), as :func:`chunked` takes them."""
        return tuple(p.dim if isinstance(p, (Shard, Slice)) else None for p in self.inputs)

    @property
    def whole(self) -> tuple[int, ...]:
        """Positions of the inputs every slice needs whole."""
        return tuple(i for i, p in enumerate(self.inputs) if isinstance(p, Replicate))

    @property
    def out_dim(self) -> int:
        """The dim of each result that carries the axis."""
        return self.output.dim


@dataclass(frozen=True)
class MemorySpec:
    """What one module class declares (see the module docstring).

    Attributes:
        splits: named splittable steps (:class:`Split`), run through :func:`run_split`.
        seams: policy seams from :data:`SEAMS` the module exposes.
        stack: for a stack of blocks in ``self.blocks``: its name in :data:`STACKS` (activation
            checkpointing applies to those blocks).
        outputs: for a module returning a dict: its representation-shaped outputs, by the dim of
            their rows (device sharding leaves them distributed unless asked to gather them).
        exempt: why a module has nothing to declare (``None`` for a declaring module).
    """

    splits: Mapping[str, Split] = field(default_factory=dict)
    seams: frozenset[str] = frozenset()
    stack: Optional[str] = None
    outputs: Mapping[str, int] = field(default_factory=dict)
    exempt: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "splits", MappingProxyType(dict(self.splits)))
        object.__setattr__(self, "outputs", MappingProxyType(dict(self.outputs)))
        object.__setattr__(self, "seams", frozenset(self.seams))
        unknown = self.seams - set(SEAMS)
        if unknown:
            raise ValueError(f"unknown seams {sorted(unknown)}; valid: {', '.join(SEAMS)}")
        if self.stack is not None and self.stack not in STACKS:
            raise ValueError(f"unknown stack '{self.stack}'; valid: {', '.join(STACKS)}")
        declares = bool(self.splits or self.seams or self.stack)
        if declares == (self.exempt is not None):
            raise ValueError("a MemorySpec either declares splits/seams/stack or gives an exempt reason, not both")

    @property
    def chunkable(self) -> bool:
        """Whether the module has splittable steps (it then takes a ``chunk_size``)."""
        return bool(self.splits)


def declare(
    *,
    splits: Optional[Mapping[str, Split]] = None,
    seams: Sequence[str] = (),
    stack: Optional[str] = None,
    outputs: Optional[Mapping[str, int]] = None,
) -> MemorySpec:
    """A declaring :class:`MemorySpec`."""
    return MemorySpec(splits=splits or {}, seams=frozenset(seams), stack=stack, outputs=outputs or {})


def exempt(reason: str) -> MemorySpec:
    """An explicit exemption, with the reason (e.g. a pointwise layer its caller chunks)."""
    if not reason.strip():
        raise ValueError("an exemption needs a reason")
    return MemorySpec(exempt=reason)


#: PyTorch's own classes the model uses, exempt with the reason (they cannot carry a declaration).
TORCH_EXEMPT = MappingProxyType(
    {
        nn.ModuleList: "a container: computes nothing",
        nn.ModuleDict: "a container: computes nothing",
        nn.Sequential: "a container: its members declare",
        nn.Dropout: "elementwise; its mask is the size of its input",
    }
)


class UndeclaredModuleError(TypeError):
    """A module class of the model declares no ``memory_spec`` in its own class body."""


def spec_of(module: nn.Module) -> MemorySpec:
    """The declaration of ``module``'s own class.

    Raises:
        UndeclaredModuleError: the class (not a base class) defines no ``memory_spec``.
    """
    if type(module) in TORCH_EXEMPT:
        return MemorySpec(exempt=TORCH_EXEMPT[type(module)])
    spec = vars(type(module)).get("memory_spec")
    if not isinstance(spec, MemorySpec):
        raise UndeclaredModuleError(
            f"{type(module).__module__}.{type(module).__qualname__} declares no memory_spec: add "
            "`memory_spec = declare(...)` (its splittable axes and policy seams) or `memory_spec = exempt(reason)` "
            "to its class body (alphafold_mem.memory.axes)"
        )
    return spec


def undeclared_modules(root: nn.Module) -> list[str]:
    """``"path: Class"`` of every submodule of ``root`` (itself included) whose class declares nothing."""
    bad = []
    for name, module in root.named_modules():
        try:
            spec_of(module)
        except UndeclaredModuleError:
            bad.append(f"{name or '<root>'}: {type(module).__qualname__}")
    return bad


def declared_splits(root: nn.Module) -> Iterator[tuple[str, nn.Module, str, Split]]:
    """``(module path, module, step name, Split)`` for every splittable step in ``root``."""
    for name, module in root.named_modules():
        for step, split in spec_of(module).splits.items():
            yield name, module, step, split


def run_split(
    module: nn.Module,
    step: str,
    fn: Callable[..., Result],
    *args,
    out: Optional[Result] = None,
    accumulate: bool = False,
    collect: bool = False,
    min_rows: int = 1,
) -> Union[Result, list]:
    """Run the declared step ``step`` of ``module``: ``fn(*args)``, in slices of ``module.chunk_size``
    rows along the declared axis (``None``: one call on the whole tensors, the reference computation);
    with ``min_rows``, of the smallest multiple of ``module.chunk_size`` that holds at least
    ``min_rows`` (a step whose slices must be larger than the policy's, e.g. to keep a batched product
    efficient).
    A module bound to a device-sharding runner (``module.dap``, set by
    :func:`alphafold_mem.bind` with a mesh) runs the step through it instead.

    ``out`` / ``accumulate`` / ``collect`` are passed to :func:`~alphafold_mem.memory.chunking.chunked`:
    results written (or, with ``accumulate``, added) into existing tensors slice by slice, e.g. a
    residual update in place; or the slices' results returned as a list. An operand the declaration marks
    :data:`WHOLE` must not alias ``out`` (every
    slice reads all of it, so it would see rows already updated).

    Raises:
        KeyError: ``module`` declares no such step.
        ValueError: wrong number of arguments, or a whole operand aliases ``out``.
    """
    splits = type(module).memory_spec.splits
    if step not in splits:
        raise KeyError(
            f"{type(module).__qualname__} declares no splittable step '{step}' "
            f"(declared: {', '.join(splits) or 'none'})"
        )
    split = splits[step]
    if len(args) != len(split.inputs):
        raise ValueError(
            f"{type(module).__qualname__}.{step}: {len(args)} arguments for {len(split.inputs)} declared placements"
        )
    if out is not None:
        written = {id(o.untyped_storage()) for o in ((out,) if isinstance(out, Tensor) else out)}
        for i in split.whole:
            if isinstance(args[i], Tensor) and id(args[i].untyped_storage()) in written:
                raise ValueError(
                    f"{type(module).__qualname__}.{step}: whole operand {i} aliases the output "
                    "it would be read while being written"
                )
    runner = getattr(module, "dap", None)
    if runner is not None:  # device sharding (alphafold_mem.distributed), bound from outside
        if out is not None and not collect and runner.run_into(module, step, split, fn, args, out, accumulate):
            return out  # written slice by slice into this device's share of out
        return _deliver(runner.run(module, step, split, fn, args), out, accumulate, collect)
    chunk_size = getattr(module, "chunk_size", None)
    if chunk_size is not None and chunk_size < min_rows:
        chunk_size = -(-min_rows // chunk_size) * chunk_size
    return chunked(
        fn, args, split.dims, chunk_size, out_dim=split.out_dim, out=out, accumulate=accumulate, collect=collect
    )


def _deliver(res: Result, out: Optional[Result], accumulate: bool, collect: bool) -> Union[Result, list]:
    """A whole result delivered as :func:`~alphafold_mem.memory.chunking.chunked` would deliver its slices."""
    if collect:
        return [res]
    if out is None:
        return res
    for o, r in zip((out,) if isinstance(out, Tensor) else out, (res,) if isinstance(res, Tensor) else res):
        o.add_(r) if accumulate else o.copy_(r)
    return out


__all__ = [
    "AXES",
    "MemorySpec",
    "Placement",
    "Replicate",
    "SEAMS",
    "STACKS",
    "Shard",
    "Slice",
    "Split",
    "TORCH_EXEMPT",
    "UndeclaredModuleError",
    "WHOLE",
    "declare",
    "declared_splits",
    "exempt",
    "run_split",
    "spec_of",
    "undeclared_modules",
]
