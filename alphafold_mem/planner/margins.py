"""What a device holds besides the model's tensors: the margins the planner subtracts from a
budget before it calls a policy "fits" (:func:`device_margin`, used by :func:`~alphafold_mem.planner.plan`
and ``alphafold-mem memory-plan``).

On CPU one term:

* **host library caches** (:data:`HOST_LIBRARY_BYTES`): what the process's libraries keep after
  their first call at new shapes, outside every tensor storage: oneDNN's primitive cache and its
  JIT-compiled kernels (bf16 matmuls on CPU run through oneDNN; ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``,
  default 1024 primitives) and PyTorch's own caches. A fresh process's first step at a size grows
  the resident set past the storage counter's peak by part of them; a second step at the same size
  does not. Measured by ``scripts/host_caches.py`` (resident set left after the first step, glibc's
  mmap setting): see the memory-budget page.

On CUDA, each term with its source (values marked *provisional* are to be measured on the first GPU
run, ``scripts/gpu_check.py``):

* **CUDA context** (:data:`CUDA_CONTEXT_BYTES`, provisional): the driver's per-process state and the
  loaded kernels, outside PyTorch's allocator (``torch.cuda.mem_get_info`` sees it,
  ``torch.cuda.memory_allocated`` does not). Its size depends on the GPU, the driver and lazy module
  loading (``CUDA_MODULE_LOADING=LAZY``, PyTorch's default). Not subtracted when the budget is the
  free memory this process measured (its context already exists then).
* **cuBLAS / cuBLASLt workspaces** (:func:`blas_workspace_bytes`): PyTorch allocates one cuBLAS
  workspace per handle and stream through its caching allocator, sized by ``CUBLAS_WORKSPACE_CONFIG``
  (``:SIZE_KiB:COUNT`` pairs; PyTorch's CUDA semantics notes: default ``:4096:2:16:8``, 8 MiB +
  128 KiB; 32 MiB, ``:4096:8``, on compute capability 9.0 and later, cuBLAS's recommendation for
  Hopper), and one cuBLASLt workspace, ``CUBLASLT_WORKSPACE_SIZE`` KiB (PyTorch: 1 MiB, 4 MiB on
  compute capability 8.x with at least 24 GB, 32 MiB on 9.0 and later). Without a device to ask,
  the largest (9.0) sizes are taken, for one stream.
* **cuDNN workspace**: 0. The model calls no cuDNN operation (no convolution, no cuDNN attention:
  attention is matmuls, the low-memory loop or the Triton kernel).
* **NCCL buffers** under DAP (:func:`nccl_bytes`, provisional count of channels): NCCL keeps
  ``NCCL_BUFFSIZE`` bytes (NCCL's environment-variable documentation: default 4 MiB) per channel
  and direction for each connection. The all-to-alls of DAP connect every pair of the P devices
  (point-to-point channels, :data:`NCCL_P2P_CHANNELS` per peer) and the gathers / reduce-scatters
  use rings (:data:`NCCL_RING_CHANNELS`); send and receive buffers each.
* **Caching allocator** (:data:`ALLOCATOR_FRACTION` of the budget, provisional): PyTorch's CUDA
  caching allocator rounds every request up to a multiple of 512 bytes, serves requests up to
  1 MiB from 2 MiB segments and requests up to 10 MiB from 20 MiB segments, rounds larger segments
  to 2 MiB (PyTorch's CUDA semantics notes, "Memory management"; ``c10/cuda/CUDACachingAllocator.cpp``),
  and keeps freed blocks cached; a block of a segment can serve a smaller request only by
  splitting, so free memory fragments. The peak reserved memory therefore exceeds the peak of
  live tensors by a share that depends on the allocation pattern (``expandable_segments:True`` in
  ``PYTORCH_CUDA_ALLOC_CONF`` lowers it).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional

from ..units import format_gib, gib_value

MiB = 2**20

#: CPU: library caches a process keeps after its first step at a size (oneDNN primitives and JIT
#: kernels, PyTorch's caches), outside tensor storages (module docstring; ``scripts/host_caches.py``).
HOST_LIBRARY_BYTES = 32 * MiB

#: CUDA context of one process (provisional: to be measured on the first GPU run).
CUDA_CONTEXT_BYTES = 512 * MiB
#: Share of the budget kept for the caching allocator's rounding and fragmentation (provisional).
ALLOCATOR_FRACTION = 0.05
#: NCCL's default ``NCCL_BUFFSIZE`` (NCCL documentation, environment variables).
NCCL_BUFFSIZE_DEFAULT = 4 * MiB
#: Point-to-point channels per peer the all-to-alls use (provisional: NCCL picks them per topology).
NCCL_P2P_CHANNELS = 2
#: Ring channels of the collectives (all-gather, reduce-scatter, broadcast) (provisional).
NCCL_RING_CHANNELS = 16


@dataclasses.dataclass(frozen=True)
class DeviceMargin:
    """Bytes of a device that the model's tensors cannot use, by cause (module docstring)."""

    context: int = 0
    blas_workspaces: int = 0
    cudnn_workspace: int = 0
    nccl_buffers: int = 0
    allocator: int = 0
    host_caches: int = 0

    @property
    def total(self) -> int:
        return (
            self.context
            + self.blas_workspaces
            + self.cudnn_workspace
            + self.nccl_buffers
            + self.allocator
            + self.host_caches
        )

    def as_dict(self) -> dict[str, int]:
        """The terms and ``total``, in bytes (``memory-plan --json``'s ``config.margin``)."""
        return {**dataclasses.asdict(self), "total": self.total}

    def describe(self) -> str:
        """One line: the total and its terms in GiB."""
        parts = [
            (self.context, "CUDA context"),
            (self.blas_workspaces, "cuBLAS/cuBLASLt workspaces"),
            (self.cudnn_workspace, "cuDNN workspace"),
            (self.nccl_buffers, "NCCL buffers"),
            (self.allocator, "caching-allocator rounding and fragmentation"),
            (self.host_caches, "host library caches"),
        ]
        terms = " + ".join(f"{label} {gib_value(b)}" for b, label in parts if b)
        return format_gib(self.total) + (f" = {terms}" if terms else "")


def _cublas_config_bytes(config: str) -> Optional[int]:
    pairs = re.findall(r":(\d+):(\d+)", config)
    return sum(int(size) * 1024 * int(count) for size, count in pairs) if pairs else None


def blas_workspace_bytes(capability: Optional[int] = None, environ: Optional[dict] = None) -> int:
    """cuBLAS plus cuBLASLt workspace bytes of one stream for a device of compute ``capability``
    (e.g. 80, 90; ``None``: unknown, the largest defaults) under the environment ``environ``
    (default ``os.environ``): ``CUBLAS_WORKSPACE_CONFIG`` and ``CUBLASLT_WORKSPACE_SIZE`` when set."""
    env = os.environ if environ is None else environ
    hopper = capability is None or capability >= 90
    cublas = _cublas_config_bytes(env.get("CUBLAS_WORKSPACE_CONFIG", ""))
    if cublas is None:
        cublas = 4096 * 1024 * 8 if hopper else 4096 * 1024 * 2 + 16 * 1024 * 8
    try:
        lt = int(env["CUBLASLT_WORKSPACE_SIZE"]) * 1024
    except (KeyError, ValueError):
        lt = 32 * MiB if hopper else (4 * MiB if capability is not None and capability >= 80 else MiB)
    return cublas + lt


def nccl_bytes(dap: int, environ: Optional[dict] = None) -> int:
    """NCCL buffer bytes of one of ``dap`` devices (0 without DAP): ``NCCL_BUFFSIZE`` (default 4 MiB)
    for sending and for receiving, on :data:`NCCL_P2P_CHANNELS` channels to each of the ``dap - 1``
    peers and on :data:`NCCL_RING_CHANNELS` ring channels."""
    if dap <= 1:
        return 0
    env = os.environ if environ is None else environ
    try:
        buffsize = int(env["NCCL_BUFFSIZE"])
    except (KeyError, ValueError):
        buffsize = NCCL_BUFFSIZE_DEFAULT
    return 2 * buffsize * (NCCL_P2P_CHANNELS * (dap - 1) + NCCL_RING_CHANNELS)


def device_margin(
    device: str,
    budget: int,
    dap: int = 1,
    capability: Optional[int] = None,
    context_included: bool = False,
    environ: Optional[dict] = None,
) -> DeviceMargin:
    """The margin to subtract from ``budget`` bytes of ``device`` (``"cuda"``: the CUDA terms;
    ``"cpu"``: the host library caches; anything else: none) for one of ``dap`` devices;
    ``context_included``: the budget is free memory measured by this process, whose CUDA context is
    already out of it."""
    if device == "cpu":
        return DeviceMargin(host_caches=HOST_LIBRARY_BYTES)
    if device != "cuda":
        return DeviceMargin()
    return DeviceMargin(
        context=0 if context_included else CUDA_CONTEXT_BYTES,
        blas_workspaces=blas_workspace_bytes(capability, environ),
        nccl_buffers=nccl_bytes(dap, environ),
        allocator=int(ALLOCATOR_FRACTION * budget),
    )


__all__ = [
    "ALLOCATOR_FRACTION",
    "CUDA_CONTEXT_BYTES",
    "DeviceMargin",
    "HOST_LIBRARY_BYTES",
    "NCCL_BUFFSIZE_DEFAULT",
    "blas_workspace_bytes",
    "device_margin",
    "nccl_bytes",
]
