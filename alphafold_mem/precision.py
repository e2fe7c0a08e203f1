"""Where precision is decided: bf16 autocast is entered once, at the model's edge, and a few named
fp32 islands keep the numerically delicate parts wide (Jumper et al. 2021 trained in bf16 with the
same islands; AF2 ``alphafold/model/utils.py``).

Precisions (``MemoryPolicy.precision``):

* ``"fp32"``: no autocast; the model runs in its parameter dtype (fp32, or fp64 in parity tests).
* ``"bf16"``: :func:`autocast` wraps the whole forward (``AlphaFold.forward`` enters it once): matmuls
  and linears run in bf16, so every transient (projections, attention inputs, transition hidden
  layers) and every activation saved for backward by a linear is bf16. The residual streams (the
  MSA, pair and extra-MSA representations) stay fp32, and the embedders that write them first
  (input, recycling and extra-MSA embedders) are fp32 islands: the standard mixed-precision
  arrangement (as Lightning's ``bf16-mixed``). Rounding the streams to bf16 after each of the ~10
  residual updates per block is what moves the demo model's coordinates by up to 0.57-0.68 Å
  (``scripts/compare_precision_inference.py``, worst shipped example; the figure depends on the
  CPU's bf16 kernels, see docs/benchmarks/precision.md); with fp32 streams the worst moves about 0.4 Å.
* ``"bf16-full"``: as ``"bf16"`` but the pair representation z itself is bf16 (AF2's own bfloat16
  mode for it: the embedders' pair outputs and the pair mask are bf16, so its residual adds stay
  bf16), which halves it, the largest stream (``[*, N_res, N_res, c_z]``). The MSA streams (the MSA
  and extra-MSA representations, their masks, the recycled first row) stay in the parameter dtype
  (:func:`representation_dtype`): they grow only linearly with N_res, and rounding them after each
  residual update was most of bf16-full's deviation from fp32 (per-module errors against fp32 on the
  ablation chains; ``scripts/precision_modules.py`` prints them).

The fp32 islands, each expressed by one helper here:

* softmax statistics: the attention cores compute logits -> softmax (or the online log-sum-exp) in
  fp32 (:func:`alphafold_mem.kernels.reference.attention`,
  :func:`alphafold_mem.kernels.low_memory_attention.low_memory_attention`); the reference core also
  accumulates ``q k^T``, adds the biases and takes ``probs v`` in fp32, rounding only its output;
* LayerNorm statistics: mean / variance in fp32 (:func:`alphafold_mem.kernels.reference.layer_norm`);
* the structure module and all rigid geometry: :func:`fp32_region` disables autocast and
  :func:`fp32_island` casts its inputs (``StructureModule.forward``);
* confidence heads (pLDDT, PAE, pTM) and losses: :func:`fp32_island` on their logits / inputs.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Literal, Optional, get_args

import torch
from torch import Tensor

#: Numeric precision of a run (see the module docstring).
Precision = Literal["fp32", "bf16", "bf16-full"]
PRECISIONS = get_args(Precision)


def fp32_island(x: Tensor) -> Tensor:
    """Cast half-precision tensors to fp32 (fp32/fp64 pass through): the named fp32 islands of
    AF2 (softmax statistics, the structure module, geometry, confidence heads, losses)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def autocast_dtype(x: Tensor) -> Optional[torch.dtype]:
    """The dtype autocast runs a matmul of ``x`` in: autocast's when it is on for ``x``'s device,
    ``None`` when it is off or ``x`` is fp64 (autocast leaves fp64 alone). For code that runs its
    own matmuls with autocast off and must round as autocast would."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type) and x.dtype != torch.float64:
        return torch.get_autocast_dtype(device_type)
    return None


@contextlib.contextmanager
def fp32_region(device_type: str) -> Iterator[None]:
    """Run the enclosed code without autocast (an fp32 island such as the structure module); inputs
    must be cast with :func:`fp32_island`. A no-op when autocast is off."""
    if torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            yield
    else:
        yield


#: The residual streams: ``"pair"`` (z ``[*, N_res, N_res, c_z]``) and ``"msa"`` (the MSA and
#: extra-MSA representations ``[*, N_seq, N_res, c_m]``, their masks and the recycled first row).
Stream = Literal["pair", "msa"]


def representation_dtype(precision: str, param_dtype: torch.dtype, stream: Stream = "pair") -> torch.dtype:
    """dtype of a residual stream: the pair stream is bf16 only for ``"bf16-full"``; the MSA streams
    always keep the parameter dtype (see the module docstring: O(N_res) memory, most of the error).

    Raises:
        ValueError: unknown ``stream``.
    """
    if stream not in get_args(Stream):
        raise ValueError(f"unknown stream '{stream}'; valid: {', '.join(get_args(Stream))}")
    return torch.bfloat16 if precision == "bf16-full" and stream == "pair" else param_dtype


def embedder_region(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """The embedders' context: an fp32 island under ``"bf16"`` (raw features and the fp32 streams
    are not rounded on the way in); plain autocast otherwise."""
    return fp32_region(device_type) if precision == "bf16" else contextlib.nullcontext()


def autocast(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """The one autocast context of a forward: bf16 for ``"bf16"`` and ``"bf16-full"``, nothing for ``"fp32"``.

    Raises:
        ValueError: unknown precision.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision '{precision}'; valid: {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16)


__all__ = [
    "PRECISIONS",
    "Precision",
    "autocast",
    "embedder_region",
    "fp32_island",
    "fp32_region",
    "representation_dtype",
]
