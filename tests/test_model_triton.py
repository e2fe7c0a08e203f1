"""Triton kernels at model level: the tiny model with kernels="triton" (LayerNorm, attention and triangle
multiplication kernels; Triton's interpreter on CPU) matches the reference policy: outputs within 1e-4
(Å for coordinates), parameter gradients within 1e-3 relative."""

import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
from alphafold_mem.testing import random_features

kernels = pytest.importorskip("alphafold_mem.kernels")


def _triton_reason():
    from alphafold_mem.kernels._triton_support import triton_unavailable_reason

    return triton_unavailable_reason()


@pytest.mark.skipif(_triton_reason() is not None, reason=f"Triton cannot run here: {_triton_reason()}")
def test_tiny_model_triton_matches_reference():
    cfg = model_config("tiny", num_recycles=0, **{"evoformer.num_blocks": 1, "structure_module.num_layers": 2})
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval()  # no dropout: both runs must see the same network
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    batch = random_features(cfg, 11, 5, 6, n_templ=1, seed=3)
    batch["msa_mask"][2, 4:7] = 0  # masks with both values

    def run(policy):
        bind(model, policy)
        model.zero_grad()
        out = model(batch)
        loss = out["final_atom_positions"].square().mean() + out["plddt"].mean() + out["distogram_logits"].mean()
        loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_out, ref_grads = run(MemoryPolicy.reference())
    tri_out, tri_grads = run(MemoryPolicy(kernels="triton"))
    bind(model, MemoryPolicy.reference())
    for k in ("final_atom_positions", "plddt", "pair", "msa"):
        assert (ref_out[k] - tri_out[k]).abs().max().item() <= 1e-4, k
    assert ref_grads.keys() == tri_grads.keys()
    for n, g in ref_grads.items():
        rel = (g - tri_grads[n]).norm() / max(g.norm().item(), 1e-12)
        assert rel <= 1e-3 or (g - tri_grads[n]).abs().max() <= 1e-6, f"{n}: relative gradient error {rel:.2e}"
