"""``@triton.jit`` helpers shared by the fused_* kernels (imports triton; never imported by ``kernels``).

Triton's CPU interpreter (checked with Triton 3.9) holds bf16 tensors as uint16 bit patterns. It
casts fp32 -> bf16 by dropping the low 16 bits (truncation; a GPU rounds to nearest even), and
``tl.dot`` on bf16 operands multiplies the bit patterns as integers instead of the values, giving
results around 1e10 for inputs of order 1 (https://github.com/triton-lang/triton/issues/11584:
the interpreter's dot converts only 8-bit float operands before its numpy matmul). The helpers
below take an ``EMULATE`` constexpr, true only under the interpreter, that rounds to nearest even
by hand and multiplies the rounded values in fp32, so CPU tests see the numerics of a GPU run (up
to summation order).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_to(x, DTYPE: tl.constexpr, EMULATE: tl.constexpr):
    """Cast fp32 ``x`` to DTYPE with round-to-nearest-even (also under the interpreter)."""
    if EMULATE and DTYPE == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000  # RTNE on the 16 dropped bits
        x = bits.to(tl.float32, bitcast=True)
    return x.to(DTYPE)


@triton.jit
def mm(a, b, DOT_DTYPE: tl.constexpr, EMULATE: tl.constexpr, IEEE: tl.constexpr):
    """fp32 ``a @ b`` with both operands rounded to DOT_DTYPE first (tensor cores on a GPU)."""
    a = round_to(a, DOT_DTYPE, EMULATE)
    b = round_to(b, DOT_DTYPE, EMULATE)
    if EMULATE:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if IEEE:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out
