"""Models whose Evoformer or extra-MSA stack has no blocks (``num_blocks=0``)."""

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.testing import random_features


@pytest.mark.parametrize("stack", ["extra_msa", "evoformer"])
def test_empty_stack_runs_and_passes_inputs_through(stack):
    cfg = model_config("tiny", **{f"{stack}.num_blocks": 0})
    torch.manual_seed(0)
    model = AlphaFold(cfg)
    batch = random_features(cfg, 9, 3, 4, n_templ=0)
    out = model(batch)
    assert out["final_atom_positions"].shape == (9, 37, 3)
    assert torch.isfinite(out["final_atom_positions"]).all()
    m = torch.randn(3, 9, cfg.c_m)
    z = torch.randn(9, 9, cfg.c_z)
    mask, pair_mask = torch.ones(3, 9), torch.ones(9, 9)
    if stack == "extra_msa":
        e = torch.randn(3, 9, cfg.c_e)
        assert torch.equal(model.extra_msa_stack(e, z, mask, pair_mask), z)
    else:
        m2, z2, s = model.evoformer(m, z, mask, pair_mask)
        assert torch.equal(m2, m) and torch.equal(z2, z) and s.shape == (9, cfg.c_s)
