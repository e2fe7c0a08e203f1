"""Plain-PyTorch reference implementations: the executable specification of every kernel.

Each function here has exactly the signature of its Triton counterpart and is what the kernel tests
compare against. They run anywhere PyTorch runs (CPU included).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def _stat_dtype(x: Tensor) -> torch.dtype:
    """fp32 for half-precision inputs; fp64 stays fp64 (statistics are never computed narrower)."""
    return torch.promote_types(x.dtype, torch.float32)


def attention(q: Tensor, k: Tensor, v: Tensor, biases: Sequence[Tensor] = ()) -> Tensor:
    """Multi-head attention core ``softmax(q k^T + sum(biases)) v`` (AF2 Suppl. Alg. 7, 13, 14 core).

    The 1/sqrt(C) scaling is NOT applied here: AF2 (and this project) scales ``q`` before the call.
    The softmax runs in fp32 whatever the input dtype; the result is cast back to ``q.dtype``.

    Args:
        q: queries ``[*, H, Q, C]``.
        k: keys ``[*, H, K, C]``.
        v: values ``[*, H, K, C_v]``.
        biases: up to two additive biases, each broadcastable to ``[*, H, Q, K]`` (typically the key
            mask bias ``[*, 1, 1, K]`` and a pair bias ``[*, H, Q, K]`` shared by the leading rows).

    Returns:
        ``[*, H, Q, C_v]``.

    Raises:
        ValueError: more than two biases, or mismatched head/channel sizes.
    """
    if len(biases) > 2:
        raise ValueError(f"attention takes at most two biases, got {len(biases)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attention shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    logits = torch.matmul(q, k.transpose(-1, -2))  # [*, H, Q, K]
    for b in biases:
        logits = logits + b
    probs = torch.softmax(logits.to(_stat_dtype(logits)), dim=-1).to(v.dtype)  # [*, H, Q, K]
    return torch.matmul(probs, v)  # [*, H, Q, C_v]


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dim, statistics in fp32, output in ``x.dtype``.

    Args:
        x: ``[*, C]``; weight, bias: ``[C]``.
    """
    sd = _stat_dtype(x)
    out = F.layer_norm(x.to(sd), x.shape[-1:], weight.to(sd), bias.to(sd), eps)
    return out.to(x.dtype)
