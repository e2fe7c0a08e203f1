"""Launch configurations of the Triton kernels per GPU architecture (block sizes, warps, stages).

One table per fused op, keyed by compute capability (``major * 10 + minor``) and by the matmul
operand width (``"16"``: bf16/fp16 operands on tensor cores; ``"32"``: fp32 operands), so that every
kernel fits every listed chip: shared memory per block at most :data:`SHARED_MEMORY_LIMIT` (the
CUDA programming guide's "maximum shared memory per thread block", opt-in), no register spills in the
16-bit path, at most 256 B spilled per thread in the fp32 path. ``python scripts/aot_compile.py``
compiles every launch the model makes with these tables for each architecture and checks the limits
(table in ``docs/kernels.md``). The triangle multiplication's table has, per architecture and width,
entries for narrow pair channels (c_z <= :data:`NARROW_C_Z`, the test presets' sizes) that override
single keys of the general entry, each with the reason it exists.

Key ``None`` is Triton's CPU interpreter: small blocks, so that tests at N ~ 20-40 cross several
blocks. A capability not in the table uses the configuration of the largest listed one not above it
(the smallest-shared-memory table, sm_86, below sm_80 or between listed ones).
The tests run every architecture's configuration in the interpreter
(:func:`kernels._triton_support.target_arch`), since these are only block sizes.

Nothing here imports Triton.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ARCHS", "NARROW_C_Z", "SHARED_MEMORY_LIMIT", "attention_config", "config_arch", "triangle_config"]

#: bytes of shared memory one thread block may use (opt-in maximum; CUDA C++ Programming Guide,
#: "Technical Specifications per Compute Capability"): A100 (8.0), RTX 30xx / A10 (8.6),
#: RTX 40xx / L4 / L40 (8.9), H100 / H200 (9.0)
SHARED_MEMORY_LIMIT: dict[int, int] = {80: 166_912, 86: 101_376, 89: 101_376, 90: 232_448}
#: the architectures with their own configuration (and compiled by scripts/aot_compile.py)
ARCHS: tuple[int, ...] = tuple(sorted(SHARED_MEMORY_LIMIT))

# -- attention (kernels.fused_attention): blocks (BLOCK_Q, BLOCK_K) per kernel ------------------------
_ATTN_INTERPRETER = dict(
    fwd=(16, 16), dq=(16, 16), dkdv=(16, 16), dbias=(16, 16), z_per_program=4, num_warps=1, num_stages=1
)
# 16-bit operands: 64x64 forward tiles keep the fp32 accumulator, the score tile and the operands
# in registers without spilling at 4 warps; the backward kernels hold two more [BLOCK, C] fp32
# accumulators, hence the narrower tiles.
_ATTN_16 = dict(fwd=(64, 32), dq=(64, 32), dkdv=(32, 32), dbias=(32, 32), z_per_program=16, num_warps=4, num_stages=2)
# fp32 operands (IEEE fp32 matmuls run as FMAs, not on tensor cores): smaller tiles, more warps.
_ATTN_32 = dict(fwd=(32, 32), dq=(32, 32), dkdv=(32, 32), dbias=(32, 32), z_per_program=16, num_warps=4, num_stages=1)
_ATTENTION: dict = {(None, w): _ATTN_INTERPRETER for w in ("16", "32")}
_ATTENTION.update({(a, "16"): _ATTN_16 for a in ARCHS})
_ATTENTION.update({(a, "32"): _ATTN_32 for a in ARCHS})

# -- triangle multiplication (kernels.fused_triangle): tile sizes of i, j, k, the hidden channels h,
# the c_z chunk c of the projections and of the output branch, and the rows per block of the output
# branch ---------------------------------------------------------------------------------------------
_TRI_INTERPRETER = dict(i=16, j=16, k=16, h=16, c=16, rows=16, num_warps=1, num_stages=1)
# A program holds at most [BLOCK_I * BLOCK_K, BLOCK_H] fp32 tiles (a projection's and its gate's
# pre-activations, accumulated over c_z chunks of c) next to the [BLOCK_H, BLOCK_I, BLOCK_J]
# contraction accumulator, or [rows, c_z] tiles in the output branch; tl.dot needs tiles of at least
# 16. 8 warps: at 4 the forward and the projection backward spill (registers per thread double).
_TRI_16 = dict(i=16, j=16, k=16, h=16, c=16, rows=16, num_warps=8, num_stages=1)
_TRI_32 = dict(i=16, j=16, k=16, h=16, c=16, rows=16, num_warps=8, num_stages=1)
_TRIANGLE: dict = {(None, w): _TRI_INTERPRETER for w in ("16", "32")}
_TRIANGLE.update({(a, "16"): _TRI_16 for a in ARCHS})
_TRIANGLE.update({(a, "32"): _TRI_32 for a in ARCHS})
#: c_z at most this: the output branch's [rows, BLOCK_CZ] tiles are 16 channels wide
NARROW_C_Z = 16
# Overrides of the entries above for c_z <= NARROW_C_Z, keyed (arch, width); never for the interpreter.
_TRIANGLE_NARROW: dict = {
    # sm_90, 16-bit: ptxas (CUDA 13, run by Triton with --regAllocOptLevel=2) holds the output branch
    # backward (tri_bwd_out_kernel) at 128 registers per thread for 16-row blocks of c_z = 16, c_hidden = 64
    # and spills 16 B; with 32 rows it allocates 176 and spills nothing (the other output-branch kernels
    # stay within the limits at 32 rows).
    (90, "16"): dict(rows=32),
}


def config_arch(arch: Optional[int]) -> Optional[int]:
    """The table key used for compute capability ``arch`` (``None``: the interpreter)."""
    if arch is None or arch in SHARED_MEMORY_LIMIT:
        return arch
    below = [a for a in ARCHS if a <= arch]
    return max(below) if below else 86


def _width(dot_bits: int) -> str:
    if dot_bits not in (16, 32):
        raise ValueError(f"launch_configs: matmul operand width must be 16 or 32 bits, got {dot_bits}")
    return str(dot_bits)


def attention_config(arch: Optional[int], dot_bits: int) -> dict:
    """Blocks of the four attention kernels for compute capability ``arch`` (``None``: interpreter)
    and matmul operands of ``dot_bits`` bits (a copy; the tables are not changed)."""
    return dict(_ATTENTION[(config_arch(arch), _width(dot_bits))])


def triangle_config(arch: Optional[int], dot_bits: int, c_z: Optional[int] = None) -> dict:
    """Tiles of the triangle-multiplication kernels, as :func:`attention_config`; for pair channels
    ``c_z`` <= :data:`NARROW_C_Z` with the narrow entry's overrides, where the table has one."""
    key = (config_arch(arch), _width(dot_bits))
    cfg = dict(_TRIANGLE[key])
    if c_z is not None and c_z <= NARROW_C_Z:
        cfg.update(_TRIANGLE_NARROW.get(key, {}))
    return cfg
