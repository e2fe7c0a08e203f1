"""Building blocks shared by every AF2 module: Linear with AF2's named initialisers, LayerNorm,
gated multi-head attention, global attention, shared dropout.

Sources: Jumper et al. 2021, Suppl. 1.11.4 (initialisation), Alg. 7-8 / 13-14 (gated attention),
Alg. 19 (global attention), Suppl. 1.11.6 (shared dropout).

The attention *core* (``softmax(q k^T + biases) v``) and LayerNorm are delegated to
:mod:`alphafold_mem.kernels`, the one dispatch point between the plain PyTorch reference, the
low-memory (chunked, online-softmax) attention and the fused Triton kernels. Which implementation
runs, and every chunk size, is a runtime memory choice bound to the modules from outside by
:func:`alphafold_mem.bind` (non-parameter attributes), never a forward argument; each
class states what it takes in its ``memory_spec`` (:mod:`alphafold_mem.memory.axes`).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from alphafold_mem import kernels
from alphafold_mem.kernels.reference import holds, recording, sigmoid_gate

from ..memory.axes import Shard, Slice, Split, declare, exempt, run_split
from ..memory.chunking import estimating
from ..precision import fp32_island

INITS = ("default", "relu", "glorot", "gating", "final")


class Linear(nn.Linear):
    """``nn.Linear`` with AF2's initialisers (Suppl. 1.11.4).

    Args:
        c_in: input channels.
        c_out: output channels.
        bias: whether to use a bias.
        init: ``"default"`` (LeCun, truncated normal, fan-in), ``"relu"`` (He, truncated normal),
            ``"glorot"`` (Xavier uniform), ``"gating"`` (weights 0, bias 1) or ``"final"`` (zeros).

    Raises:
        ValueError: unknown ``init``.
    """

    memory_spec = exempt("pointwise over its last dim; the modules that call it chunk it")

    def __init__(self, c_in: int, c_out: int, bias: bool = True, init: str = "default"):
        if init not in INITS:
            raise ValueError(f"unknown init '{init}'; valid: {', '.join(INITS)}")
        self.init = init
        super().__init__(c_in, c_out, bias=bias)

    def reset_parameters(self) -> None:
        init = getattr(self, "init", "default")
        with torch.no_grad():
            if init in ("default", "relu"):
                scale = 1.0 if init == "default" else 2.0
                # truncated normal at 2 std, corrected to keep the variance (AF2 / Haiku)
                std = math.sqrt(scale / max(1, self.in_features)) / 0.87962566103423978
                nn.init.trunc_normal_(self.weight, std=std, a=-2 * std, b=2 * std)
            elif init == "glorot":
                nn.init.xavier_uniform_(self.weight)
            else:
                self.weight.zero_()
            if self.bias is not None:
                self.bias.fill_(1.0 if init == "gating" else 0.0)


class LayerNorm(nn.LayerNorm):
    """LayerNorm over the last dim ``[*, C]`` with fp32 statistics (eps 1e-5 as in AF2/Haiku).

    The implementation (plain PyTorch or the fused Triton kernel) is chosen by ``kernel_impl``,
    set from outside by the memory policy.
    """

    memory_spec = declare(seams=["kernel"])
    kernel_impl: str = "reference"

    def __init__(self, c: int, eps: float = 1e-5):
        super().__init__(c, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return kernels.layer_norm(x, self.weight, self.bias, self.eps, impl=self.kernel_impl)


def residual(x: Tensor, update: Tensor, inplace: bool = False) -> Tensor:
    """The residual update ``x + update``; with ``inplace`` (memory policy, inference) and no
    gradient being recorded, ``x`` is updated in place so no second representation is allocated.
    The values are identical either way."""
    if inplace and not torch.is_grad_enabled():
        return x.add_(update)
    return x + update


def residual_update(
    x: Tensor, module: nn.Module, dropout: Optional[nn.Module], *args: Tensor, inplace: bool = False
) -> Tensor:
    """``x + dropout(module(*args))`` (a residual update of Alg. 6 / 16 / 18). With ``inplace``, no
    gradient recorded and dropout inactive (eval), the module adds its update into ``x`` chunk by
    chunk (``module.add_to_(x, *args)``): no update-sized buffer exists. Same values either way
    (up to the summation order of the triangle multiplication's in-place path). A module sharded
    across devices (``module.dap``, DAP) adds the same way: its declared steps write each chunk's
    result into its share of ``x`` (:meth:`alphafold_mem.distributed.runner.DapRunner.run_into`)."""
    chunkwise = inplace
    if chunkwise and not torch.is_grad_enabled() and (dropout is None or not dropout.training or dropout.p == 0.0):
        return module.add_to_(x, *args)
    update = module(*args)
    return residual(x, update if dropout is None else dropout(update), inplace)


def masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x * mask[..., None]``; x ``[*, C]``, mask ``[*]``. ``x`` must be fresh (a Linear's output):
    with autograd recording nothing and the dtypes allowing, x is masked in place (same values)."""
    m = mask[..., None]
    if recording(x, m) or not holds(x, m):
        return x * m
    return x.mul_(m)


def relu(x: Tensor) -> Tensor:
    """``relu(x)``; in place on ``x`` (which must be fresh, a Linear's output) when autograd records
    nothing. Same values."""
    return F.relu(x) if recording(x) else x.relu_()


def mask_bias(mask: Tensor, inf: float = 1e9) -> Tensor:
    """Additive attention bias ``inf * (mask - 1)``: 0 where mask is 1, ``-inf`` where it is 0."""
    return (mask - 1.0) * inf


class Attention(nn.Module):
    """Gated multi-head attention (Suppl. Alg. 7, 8, 13, 14, 17 share this core).

    Args:
        c_q: query channels; c_kv: key/value channels; c_hidden: per-head channels C; num_heads: H;
        gating: sigmoid gating of the output per head channel (off for template pointwise attention).

    Forward:
        q_x ``[*, Q, c_q]``, kv_x ``[*, K, c_kv]``, biases: tensors broadcastable to ``[*, H, Q, K]``
        (mask and pair biases). Returns ``[*, Q, c_q]``.

    Memory attributes (set by the memory policy): ``attention_impl``, ``"reference"``, ``"chunked"``
    (low-memory attention with ``attention_chunks = (q_chunk, kv_chunk)``) or ``"triton"``, and
    ``attention_chunks``: passed to :func:`alphafold_mem.kernels.attention`, which runs it.
    """

    memory_spec = declare(seams=["attention"])
    attention_impl: str = "reference"
    attention_chunks: tuple[int, int] = (1024, 4096)

    def __init__(self, c_q: int, c_kv: int, c_hidden: int, num_heads: int, gating: bool = True):
        super().__init__()
        self.c_hidden = c_hidden
        self.num_heads = num_heads
        self.linear_q = Linear(c_q, c_hidden * num_heads, bias=False, init="glorot")
        self.linear_k = Linear(c_kv, c_hidden * num_heads, bias=False, init="glorot")
        self.linear_v = Linear(c_kv, c_hidden * num_heads, bias=False, init="glorot")
        self.linear_o = Linear(c_hidden * num_heads, c_q, init="final")
        self.linear_g = Linear(c_q, c_hidden * num_heads, init="gating") if gating else None

    def forward(self, q_x: Tensor, kv_x: Tensor, biases: Sequence[Tensor] = ()) -> Tensor:
        h, c = self.num_heads, self.c_hidden
        q = self.linear_q(q_x).unflatten(-1, (h, c)).transpose(-2, -3)  # [*, H, Q, C]
        k = self.linear_k(kv_x).unflatten(-1, (h, c)).transpose(-2, -3)  # [*, H, K, C]
        v = self.linear_v(kv_x).unflatten(-1, (h, c)).transpose(-2, -3)  # [*, H, K, C]
        q = q * (c**-0.5)
        o = kernels.attention(
            q, k, v, list(biases), self.attention_impl, self.attention_chunks, first_chunks_only=estimating()
        )  # [*, H, Q, C]
        o = o.transpose(-2, -3)  # [*, Q, H, C]
        if self.linear_g is not None:
            o = sigmoid_gate(o, self.linear_g(q_x).unflatten(-1, (h, c)))  # [*, Q, H, C]
        return self.linear_o(o.flatten(-2))  # [*, Q, c_q]


class GlobalAttention(nn.Module):
    """Global (single-query) gated attention over sequences (Suppl. Alg. 19).

    Forward:
        m ``[*, N_res, N_seq, C_in]`` (attention runs over N_seq for every residue),
        mask ``[*, N_res, N_seq]``. Returns ``[*, N_res, N_seq, C_in]``.
    """

    memory_spec = exempt(
        "one query per residue: its logits [*, N_res, H, N_seq] are the size of its input; "
        "MSAColumnGlobalAttention chunks it"
    )

    def __init__(self, c_in: int, c_hidden: int, num_heads: int, inf: float = 1e9, eps: float = 1e-10):
        super().__init__()
        self.c_hidden, self.num_heads, self.inf, self.eps = c_hidden, num_heads, inf, eps
        self.linear_q = Linear(c_in, c_hidden * num_heads, bias=False, init="glorot")
        self.linear_k = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_v = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_g = Linear(c_in, c_hidden * num_heads, init="gating")
        self.linear_o = Linear(c_hidden * num_heads, c_in, init="final")

    def forward(self, m: Tensor, mask: Tensor) -> Tensor:
        h, c = self.num_heads, self.c_hidden
        q_avg = (m * mask[..., None]).sum(-2) / (mask.sum(-1)[..., None] + self.eps)  # [*, N_res, C_in]
        q = self.linear_q(q_avg).unflatten(-1, (h, c)) * (c**-0.5)  # [*, N_res, H, C]
        k = self.linear_k(m)  # [*, N_res, N_seq, C]
        v = self.linear_v(m)  # [*, N_res, N_seq, C]
        bias = mask_bias(mask, self.inf)[..., None, :]  # [*, N_res, 1, N_seq]
        logits = torch.matmul(q, k.transpose(-1, -2)) + bias  # [*, N_res, H, N_seq]
        a = torch.softmax(fp32_island(logits), dim=-1).to(v.dtype)
        o = torch.matmul(a, v)  # [*, N_res, H, C]
        o = sigmoid_gate(o[..., None, :, :], self.linear_g(m).unflatten(-1, (h, c)))  # [*, N_res, N_seq, H, C]
        return self.linear_o(o.flatten(-2))


class SharedDropout(nn.Module):
    """Dropout whose mask is shared along one dim (Suppl. 1.11.6: row-/column-wise dropout).

    Args:
        p: drop probability.
        shared_dim: the dim (negative, counted on ``[*, I, J, C]``) along which the mask is shared:
            -3 shares across rows (``DropoutRowwise``), -2 across columns (``DropoutColumnwise``).

    Seam ``dropout``: under device sharding (``dap``, bound from outside) the mask is drawn at the
    global shape and sliced, so every device draws what a single device would.
    """

    memory_spec = declare(seams=["dropout"])
    dap = None

    def __init__(self, p: float, shared_dim: int):
        super().__init__()
        self.p, self.shared_dim = p, shared_dim

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = list(x.shape)
        shape[self.shared_dim] = 1
        if self.dap is not None:
            keep = self.dap.dropout_mask(x, shape, 1.0 - self.p)
        else:
            keep = torch.bernoulli(x.new_full(shape, 1.0 - self.p))
        return x * keep / (1.0 - self.p)


class Transition(nn.Module):
    """Transition layer (Suppl. Alg. 9 / 15): LayerNorm, Linear(c -> n c), ReLU, Linear(n c -> c).

    Forward: x ``[*, R, N, C]``, mask ``[*, R, N]`` (the output is zeroed at masked positions).
    Returns ``[*, R, N, C]``. ``chunk_size`` (memory policy) chunks the rows R; it is pointwise, so
    also independent along the columns N.
    """

    memory_spec = declare(
        splits={
            "rows": Split(
                "row",
                (Shard(-3), Slice(-2)),
                output=-3,
                also=Split("column", (Shard(-2, columns=True), Slice(-1)), output=Shard(-2, columns=True)),
            )
        }
    )
    chunk_size: Optional[int] = None

    def __init__(self, c: int, n: int):
        super().__init__()
        self.layer_norm = LayerNorm(c)
        self.linear_1 = Linear(c, n * c, init="relu")
        self.linear_2 = Linear(n * c, c, init="final")

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return run_split(self, "rows", self._rows, x, mask)

    def add_to_(self, target: Tensor, x: Tensor, mask: Tensor) -> Tensor:
        """``target += self(x, mask)`` in place, row chunk by row chunk (inference; ``target`` may be
        x). Returns ``target``."""
        return run_split(self, "rows", self._rows, x, mask, out=target, accumulate=True)

    def _rows(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.layer_norm(x)
        return masked(self.linear_2(relu(self.linear_1(x))), mask)
