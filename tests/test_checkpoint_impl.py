"""Which PyTorch checkpoint implementation run_blocks uses (alphafold_mem.memory.checkpoint): the
reentrant one on CPU when an input needs a gradient, the non-reentrant one otherwise; gradients equal
the unchecked run either way (bit for bit: same ops, same order)."""

import pytest
import torch
import torch.nn as nn

import alphafold_mem.memory.checkpoint as ckpt
from alphafold_mem.memory import checkpoint_module, run_blocks


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.dropout = nn.Dropout(0.3)

    def forward(self, x, mask):
        return x + self.dropout(torch.tanh(self.linear(x))) * mask


class _Stack(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(n))
        self.checkpoint_every = 0

    def forward(self, x, mask):
        return run_blocks(self, x, mask)


def _grads(stack, x, mask, every):
    stack.checkpoint_every = every
    stack.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    out = stack(x, mask)
    out.pow(2).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in stack.named_parameters()}


@pytest.mark.parametrize("input_grad", [True, False])
def test_checkpointed_stack_equals_unchecked_and_picks_the_implementation(monkeypatch, input_grad):
    torch.manual_seed(0)
    stack = _Stack().train()
    mask = torch.ones(3, 6)
    x = torch.randn(3, 6, requires_grad=input_grad)
    used = []
    real = ckpt.checkpoint

    def spy(fn, *args, use_reentrant, **kwargs):
        used.append(use_reentrant)
        return real(fn, *args, use_reentrant=use_reentrant, **kwargs)

    monkeypatch.setattr(ckpt, "checkpoint", spy)
    out0, g0 = _grads(stack, x, mask, 0)
    out1, g1 = _grads(stack, x, mask, 1)
    # one checkpoint per block; the first block's output needs a gradient (its parameters do)
    assert used == [input_grad, True, True, True]
    assert torch.equal(out0, out1)
    # without an input that needs a gradient the reentrant checkpoint would leave these empty
    assert g1.keys() == g0.keys() and all(torch.equal(g1[n], g0[n]) for n in g0)


def test_checkpoint_module_passes_keyword_arguments_through_the_reentrant_path():
    torch.manual_seed(0)
    block = _Block().eval()
    x = torch.randn(3, 6, requires_grad=True)
    ref = block(x, mask=torch.ones(3, 6))
    handle = checkpoint_module(block)
    try:
        out = block(x, mask=torch.ones(3, 6))
    finally:
        handle.remove()
    assert torch.equal(out, ref)
    (g_ref,) = torch.autograd.grad(ref.sum(), x)
    out.sum().backward()
    assert torch.equal(x.grad, g_ref)
