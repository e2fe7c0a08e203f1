"""The memory options of the command line, turned into the one memory argument of a run (a
:class:`~alphafold_mem.MemoryPolicy`, or the planner's choice: :class:`~alphafold_mem.AutoPolicy`)
here and nowhere else: ``predict``'s ``--memory-policy``, ``--chunk-size``, ``--low-memory``,
``--precision``, ``--max-memory`` and ``--memory-set FIELD=VALUE``; ``train``'s ``--memory-set``.
The precisions offered are :data:`alphafold_mem.cli.options.PRECISIONS` (the policy's).
"""

from __future__ import annotations

import argparse
import ast
from typing import TYPE_CHECKING, Any

from .options import PRECISIONS, add_max_memory

if TYPE_CHECKING:  # annotations only: the memory package loads torch
    from ..memory.policy import PolicyRequest


def parse_assignments(items: list[str], what: str) -> dict[str, Any]:
    """``["KEY=VALUE", ...]`` -> ``{KEY: VALUE}``, each value read as a Python literal when it is one
    (``7``, ``None``, ``True``), else kept as text (``auto``, ``chunked``).

    Raises:
        ValueError: an item without ``=`` (the message names the option ``what``).
    """
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"{what} expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


def _chunk_size(text: str):
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}")
    return value


def add_predict_memory_arguments(p: argparse.ArgumentParser) -> None:
    """``predict``'s memory options (read back by :func:`predict_request`)."""
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="bf16: bf16 matmuls, fp32 representations; bf16-full: bf16 representations too "
        "(half their memory, predictions move more). Default: fp32",
    )
    p.add_argument(
        "--chunk-size",
        type=_chunk_size,
        metavar="N|auto",
        help="chunk every chunkable op into N rows, or 'auto' (largest chunk predicted to fit "
        "the free memory); same results, lower peak memory (default: no chunking)",
    )
    p.add_argument(
        "--low-memory",
        action="store_true",
        help="low-memory inference policy: low-memory attention, chunk size 16 unless --chunk-size "
        "is given, in-place updates, streamed templates, offload to host memory (GPU)",
    )
    p.add_argument(
        "--memory-policy",
        default="auto",
        choices=("auto", "reference", "low_memory_inference"),
        help="auto (default): before each target, the fastest policy predicted to fit the memory "
        "budget; a target that fits under none fails at once and the others run. Or a preset.",
    )
    p.add_argument(
        "--memory-set",
        dest="memory_overrides",
        action="append",
        metavar="FIELD=VALUE",
        help="set a MemoryPolicy field, e.g. chunk_size=7 or attention=chunked (repeatable); the policy is "
        "then fixed: the preset of --memory-policy (reference for auto) with these fields",
    )
    add_max_memory(p, "default: the device's free memory")


def predict_request(args: argparse.Namespace) -> PolicyRequest:
    """The memory argument of ``predict`` from its options: ``--memory-policy auto`` alone is the
    planner's choice (:class:`AutoPolicy` in ``--precision`` within ``--max-memory``); ``--chunk-size``,
    ``--low-memory`` or ``--memory-set`` fix the policy (``--low-memory``: ``low_memory_inference``;
    otherwise the ``--memory-policy`` preset, ``reference`` for ``auto``), with the given fields.

    Raises:
        ValueError: contradictory options, a field given twice, or an invalid field value (one line).
    """
    from ..memory.policy import AutoPolicy, preset  # heavy: the memory package loads torch

    fields = parse_assignments(args.memory_overrides, "--memory-set")
    flags = {
        "precision": args.precision,
        "max_memory": args.max_memory,
        "chunk_size": args.chunk_size,
    }
    for name, value in flags.items():
        if value is not None:
            if name in fields:
                raise ValueError(f"--{name.replace('_', '-')} and --memory-set {name}=...: give {name} once")
            fields[name] = value
    if args.low_memory and args.memory_policy != "auto":
        raise ValueError("give either --memory-policy or --low-memory, not both")
    if args.chunk_size is not None and args.memory_policy != "auto":
        raise ValueError("give either --memory-policy or --chunk-size, not both (or --memory-set chunk_size=N)")
    fixed = (
        args.low_memory or args.memory_policy != "auto" or set(fields) - {"precision", "max_memory", "max_chunk_size"}
    )
    try:
        if not fixed:
            return AutoPolicy(**fields)
        name = "low_memory_inference" if args.low_memory else args.memory_policy
        return preset("reference" if name == "auto" else name, **fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"memory options: {exc}") from None


def train_request(name: str, overrides: list[str]) -> PolicyRequest:
    """``train``'s policy: the preset ``name`` with the ``--memory-set`` fields, or for ``"auto"`` the
    planner's choice (:class:`AutoPolicy`, fields ``max_memory`` and ``max_chunk_size`` only).

    Raises:
        ValueError: an unknown preset, field or field value.
    """
    from ..memory.policy import AutoPolicy, preset  # heavy: the memory package loads torch

    try:
        fields = parse_assignments(overrides, "--memory-set")
        return AutoPolicy(**fields) if name == "auto" else preset(name, **fields)
    except TypeError as exc:
        raise ValueError(f"--memory-set: {exc}") from None


__all__ = ["add_predict_memory_arguments", "parse_assignments", "predict_request", "train_request"]
