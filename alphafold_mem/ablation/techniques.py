"""The techniques an ablation compares, one row each: a named :class:`~alphafold_mem.MemoryPolicy`
(its precision and kernel fields included) and, for dynamic axial parallelism, a device count.

The list is derived from the declared policy fields and presets (:func:`derive_techniques`), so a
field or preset added to :mod:`alphafold_mem.memory.policy` appears without editing this module:

* ``reference``: ``MemoryPolicy.reference()``.
* Fields are grouped by the first word of their name (``checkpoint_evoformer``,
  ``checkpoint_extra_msa``, ``checkpoint_template`` and ``checkpoint_granularity`` form the group
  ``checkpoint``). A group's *switch* is what the presets set in it: every field of the group that a
  preset sets to a non-default value, with that value (first preset in :data:`PRESETS` order). A
  non-empty switch is one technique (``checkpoint_*=1``, ``chunk_size=16``, ``attention=chunked``).
* On top of the switch, every other value a field of the group can take is one technique. An
  enumerated field's values come from its type (:func:`alphafold_mem.memory.policy.field_choices`:
  the ``Literal`` values; a bool's two values). Every value is a row except those
  :data:`EXCLUDED_VALUES` lists with the reason.
* Fields without a finite set of values (:data:`NOT_ENUMERATED`, each with its treatment):
  ``chunk_size`` gets the presets' size and the sizes ``sweeps`` gives (default 64, 16, 4;
  ``"auto"`` is left out: it resolves to one of the fixed sizes); the ``checkpoint_*`` block counts
  get the presets' switch (1: every block); ``attention_chunks``, ``max_memory`` and
  ``max_chunk_size`` tune other techniques: no row of their own. A field added to the policy must
  be typed with a ``Literal`` or listed there (``tests/test_ablation.py`` checks both).
* Each preset other than the reference: ``preset:<name>`` (the combinations in use).
* ``dap=2``, ``dap=4``: the reference policy sharded over P processes. They run through
  ``alphafold_mem.predict(..., dap=P)`` once :mod:`alphafold_mem.distributed` exists and
  ``predict`` takes ``dap``; until then they are rows with that reason.

A technique that cannot run here is a row with the reason (:meth:`Technique.skip_reason`), never a
crash: Triton kernels on CPU (only Triton's interpreter runs there), checkpointing in an inference
forward (no autograd graph: nothing to recompute), inference-only fields in training, offload on a
CPU device (a no-op there), ``bf16-full`` in training (training's mixed precision is Lightning's
``bf16-mixed``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
from dataclasses import dataclass
from typing import Callable, ContextManager, Optional, Sequence

import torch
import torch.nn as nn

from ..kernels import KernelUnavailableError, layer_norm
from ..memory.policy import PRESETS, MemoryPolicy, field_choices, preset
from ..predict import predict

__all__ = [
    "Technique",
    "derive_techniques",
    "select_techniques",
    "quick_techniques",
    "dap_unavailable_reason",
    "TRAINER_PRECISION",
    "INFERENCE_ONLY_FIELDS",
    "TRAINING_ONLY_GROUPS",
    "ACCELERATOR_ONLY_FIELDS",
    "EXCLUDED_VALUES",
    "NOT_ENUMERATED",
]

#: Policy precision -> the Lightning trainer precision a training run uses for it.
TRAINER_PRECISION = {"fp32": "32", "bf16": "bf16-mixed"}
#: Fields that act only without autograd (MemoryPolicy docstring: "inference only").
INFERENCE_ONLY_FIELDS = ("inplace", "offload", "head_logits")
#: Groups that act only with autograd: checkpointing recomputes in backward.
TRAINING_ONLY_GROUPS = ("checkpoint",)
#: Fields that are no-ops on a CPU device (offload moves tensors to host memory: already there).
ACCELERATOR_ONLY_FIELDS = ("offload",)
#: ``sweeps`` default: extra values tried for a field on top of its group switch.
DEFAULT_SWEEPS = {"chunk_size": (64, 16, 4)}
#: ``(field, value)`` that never gets a row of its own -> why.
EXCLUDED_VALUES: dict[tuple[str, object], str] = {
    ("chunk_size", "auto"): "a planner choice: it resolves to one of the fixed sizes, which have rows",
}
#: Policy fields without a ``Literal`` type -> the rows they get.
NOT_ENUMERATED = {
    "chunk_size": "the presets' size and the sweep (DEFAULT_SWEEPS, ablate --chunk-sizes)",
    "attention_chunks": "the query/key chunks of attention='chunked': tunes that row, no row of its own",
    "checkpoint_evoformer": "blocks per checkpoint: the presets' switch (1, every block)",
    "checkpoint_extra_msa": "blocks per checkpoint: the presets' switch (1, every block)",
    "checkpoint_template": "blocks per checkpoint: the presets' switch (1, every block)",
    "max_memory": "the budget of chunk_size='auto': no row of its own",
    "max_chunk_size": "the cap of chunk_size='auto': no row of its own",
}
_DAP_SIZES = (2, 4)


def _no_prepare(model: nn.Module) -> ContextManager:
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Technique:
    """One row of the ablation.
    Attributes:
        name: row key (``reference``, ``chunk_size=16``, ``preset:training``, ``dap=2``...).
        policy: the memory policy bound to the model.
        group: ``reference``, a field group (``checkpoint``), ``preset``, ``dap`` or ``test``.
        description: one line for the report.
        dap: devices one protein is sharded over (1: none).
        prepare: ``prepare(model)`` returns a context manager active while this technique runs
            (e.g. a test-only weight perturbation); it must leave the model as it found it.
        fixed_reason: why the technique cannot run at all here (e.g. DAP not installed), or None.
    """

    name: str
    policy: MemoryPolicy
    group: str
    description: str = ""
    dap: int = 1
    prepare: Callable[[nn.Module], ContextManager] = _no_prepare
    fixed_reason: Optional[str] = None

    @property
    def perturbed(self) -> bool:
        """True when ``prepare`` changes the model (a test-only technique)."""
        return self.prepare is not _no_prepare

    @property
    def changed_fields(self) -> dict:
        """The policy fields that differ from the reference, with their values."""
        ref = MemoryPolicy.reference()
        return {
            f.name: getattr(self.policy, f.name)
            for f in dataclasses.fields(MemoryPolicy)
            if getattr(self.policy, f.name) != getattr(ref, f.name)
        }

    def policy_json(self) -> dict:
        """The exact configuration of this row (every policy field, the DAP size)."""
        return {**dataclasses.asdict(self.policy), "dap": self.dap}

    def skip_reason(self, mode: str, device: str) -> Optional[str]:
        """Why this technique does not run in ``mode`` (``"inference"``/``"training"``/``"scaling"``)
        on ``device`` (``"cpu"``/``"cuda"``), or None when it runs."""
        if self.fixed_reason:
            return self.fixed_reason
        fields = self.changed_fields
        if self.dap > 1 and mode != "inference":
            return f"DAP rows run prediction only (alphafold-mem predict --dap); {mode} is not measured by ablate"
        if uses_triton(self.policy):
            reason = _triton_reason(device)
            if reason:
                return reason
        if mode == "training":
            if self.policy.precision not in TRAINER_PRECISION:
                return (
                    f"precision {self.policy.precision!r} has no training form: training's mixed precision is "
                    "Lightning's bf16-mixed (the 'bf16' row); the policy's precision stays fp32 in training"
                )
            if fields and all(f in INFERENCE_ONLY_FIELDS for f in fields):
                return f"{', '.join(fields)}: inference-only (no effect when gradients are recorded)"
        elif fields and all(f.split("_")[0] in TRAINING_ONLY_GROUPS for f in fields):
            return "activation checkpointing acts only in training (an inference forward records no graph to recompute)"
        if device == "cpu" and fields and all(f in ACCELERATOR_ONLY_FIELDS for f in fields):
            return (
                f"{', '.join(fields)}: moves tensors to host memory, a no-op on a CPU device (run with --device cuda)"
            )
        return None


def uses_triton(policy) -> bool:
    """Whether ``policy`` selects the Triton kernels (``kernels="triton"``; older policies:
    ``attention="triton"``)."""
    return getattr(policy, "kernels", None) == "triton" or getattr(policy, "attention", None) == "triton"


def _triton_reason(device: str) -> Optional[str]:
    if device == "cpu":
        return (
            "Triton kernels are GPU kernels: on CPU only Triton's interpreter runs them (a correctness "
            "tool, far too slow to time a full model); run with --device cuda"
        )

    try:  # the kernels' own availability check, on a tiny input
        layer_norm(
            torch.zeros(1, 8, device=device), torch.ones(8, device=device), torch.zeros(8, device=device), impl="triton"
        )
    except KernelUnavailableError as exc:
        return str(exc)
    return None


def dap_unavailable_reason() -> Optional[str]:
    """Why DAP rows cannot run here, or None when ``alphafold_mem.distributed`` exists and
    :func:`alphafold_mem.predict` takes ``dap``."""
    try:
        importlib.import_module("alphafold_mem.distributed")
    except ImportError as exc:
        return f"dynamic axial parallelism is not in this checkout (alphafold_mem.distributed: {exc})"

    if "dap" not in inspect.signature(predict).parameters:
        return "alphafold_mem.distributed exists but predict() takes no 'dap' argument yet"
    return None


# -- derivation ------------------------------------------------------------------------------------


def _values(field: dataclasses.Field, sweeps: dict) -> list:
    """Non-default values of ``field`` worth a row (see the module docstring)."""
    values = list(field_choices().get(field.name, ()))
    values += [v for v in sweeps.get(field.name, ()) if v not in values]
    return [v for v in values if v != field.default and (field.name, v) not in EXCLUDED_VALUES]


def _name(changes: dict) -> str:
    """``checkpoint_*=1,checkpoint_granularity=update`` style name of a set of field changes."""
    parts: list[str] = []
    by_value: dict[tuple, list[str]] = {}
    for f, v in changes.items():
        by_value.setdefault((f.split("_")[0], repr(v)), []).append(f)
    done: set[str] = set()
    for f, v in changes.items():
        if f in done:
            continue
        same = by_value[(f.split("_")[0], repr(v))]
        if len(same) > 1:
            parts.append(f"{f.split('_')[0]}_*={v}")
            done.update(same)
        else:
            parts.append(f"{f}={v}")
            done.add(f)
    return ",".join(parts)


def derive_techniques(sweeps: Optional[dict] = None, dap_sizes: Sequence[int] = _DAP_SIZES) -> list[Technique]:
    """Every technique the declared policy fields and presets give (see the module docstring), the
    reference first, each policy once.

    Args:
        sweeps: field -> extra values (default :data:`DEFAULT_SWEEPS`: chunk sizes 64, 16, 4).
        dap_sizes: device counts of the DAP rows.
    """
    sweeps = DEFAULT_SWEEPS if sweeps is None else sweeps
    ref = MemoryPolicy.reference()
    presets = {name: preset(name) for name in PRESETS}
    fields = dataclasses.fields(MemoryPolicy)
    groups: dict[str, list[dataclasses.Field]] = {}
    for f in fields:
        groups.setdefault(f.name.split("_")[0], []).append(f)
    out = [Technique("reference", ref, "reference", "MemoryPolicy.reference(): the plain computation")]
    seen = {ref}

    def add(changes: dict, group: str, description: str, name: Optional[str] = None) -> None:
        policy = ref.replace(**changes)
        if policy not in seen:
            seen.add(policy)
            out.append(Technique(name or _name(changes), policy, group, description))

    for group, members in groups.items():
        switch: dict = {}
        for p in presets.values():
            for f in members:
                if f.name not in switch and getattr(p, f.name) != getattr(ref, f.name):
                    switch[f.name] = getattr(p, f.name)
        if switch:
            add(switch, group, "the presets' setting of " + ", ".join(switch))
        for f in members:
            for v in _values(f, sweeps):
                if switch.get(f.name) != v:
                    changes = {**switch, f.name: v}
                    add(changes, group, ", ".join(f"{k}={x!r}" for k, x in changes.items()))
    for name, p in presets.items():
        if p != ref and p not in seen:
            seen.add(p)
            out.append(Technique(f"preset:{name}", p, "preset", f"MemoryPolicy.{name}()"))
    reason = dap_unavailable_reason()
    for size in dap_sizes:
        out.append(
            Technique(
                f"dap={size}",
                ref,
                "dap",
                f"reference policy, one protein sharded over {size} processes",
                dap=size,
                fixed_reason=reason,
            )
        )
    return out


def quick_techniques(techniques: Sequence[Technique]) -> list[Technique]:
    """The ``--quick`` subset: the reference, the presets, and the rows that cannot run here (their
    reasons cost nothing)."""
    return [t for t in techniques if t.group in ("reference", "preset") or t.fixed_reason or uses_triton(t.policy)]


def select_techniques(techniques: Sequence[Technique], names: Optional[Sequence[str]]) -> list[Technique]:
    """The techniques named in ``names`` (all when empty), the reference always first.
    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if not names:
        return list(techniques)
    by_name = {t.name: t for t in techniques}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown technique(s) {', '.join(unknown)}; valid: {', '.join(by_name)}")
    chosen = [by_name["reference"]] + [by_name[n] for n in names if n != "reference"]
    return list(dict.fromkeys(chosen))
