"""``@triton.jit`` helpers shared by the fused_* kernels (imports triton; never imported by ``kernels``).

Triton's CPU interpreter casts fp32 -> bf16 by truncation (a GPU rounds to nearest even) and cannot
multiply bf16 operands (triton-lang/triton issue 11584). The helpers below take an ``EMULATE``
constexpr, true only under the interpreter, that rounds to nearest even by hand and multiplies the
rounded values in fp32, so CPU tests see the numerics of a GPU run (up to summation order).
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
