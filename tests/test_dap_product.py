"""The triangle multiplication's inference path under device sharding
(:mod:`alphafold_mem.distributed.product`: projections computed block by block, no share-sized
projection) against one device's module and against the declared-steps path it replaces, for the
outgoing and incoming edges, on P = 2 and P = 3 local processes (gloo), with N_res = 10 (P = 3: the
last device holds 2 true rows and 2 padding rows), a batch dim of 2 (as the template stack's
templates), a mask holding zeros and a chunk size that does not divide the share. fp32: tolerance
1e-5 relative to the largest entry (the incoming edges add P partial sums, so only the summation
order differs); bf16 (module and z in bf16, the partial sums reduced in bf16): 2e-2 relative to the
largest entry against the bf16 single-device module (a few bf16 roundings). Also: the bytes received equal the
analytic count of
:func:`alphafold_mem.planner.dap.block_comm_terms` (``(P - 1) L N_res C`` per multiplication)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alphafold_mem import MemoryPolicy, bind
from alphafold_mem.distributed import comm, init_mesh, run_local
from alphafold_mem.distributed.product import applies
from alphafold_mem.model.triangle import TriangleMultiplication

N, C_Z, C_HIDDEN, CHUNK = 10, 8, 6, 3
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _case(outgoing: bool, dtype: torch.dtype = torch.float32):
    torch.manual_seed(3)
    module = TriangleMultiplication(C_Z, C_HIDDEN, outgoing)
    with torch.no_grad():  # AF2 zero-initialises the output projection; perturb every weight
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    module.chunk_size = CHUNK
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(2, N, N, C_Z, generator=gen)
    mask = torch.ones(N, N)
    mask[-2:, :] = 0
    mask[:, 3] = 0
    return module.to(dtype), z.to(dtype), mask.to(dtype)


def _worker(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    mesh = init_mesh(world, "cpu")
    out = {}
    for outgoing in (True, False):
        module, z, mask = _case(outgoing)
        bind(module, MemoryPolicy(), mesh)
        sh = module.dap_sharding
        sh.set_residues(N)
        with torch.no_grad():
            out[(outgoing, "bf16")] = module.to(torch.bfloat16)(
                sh.take(z, -3).to(torch.bfloat16), mask.to(torch.bfloat16)
            )[:, : sh.span(N)[1]].float()
        module, z, mask = _case(outgoing)
        bind(module, MemoryPolicy(), mesh)
        sh = module.dap_sharding
        sh.set_residues(N)
        start, valid = sh.span(N)
        share = sh.take(z, -3)
        with torch.no_grad():
            assert applies(sh, share)
            comm.COUNTER.reset()
            fast = module(share, mask)
            received = comm.COUNTER.total()
        with torch.enable_grad():  # the declared steps (by_pieces), which autograd takes
            steps = module(share, mask).detach()
        out[outgoing] = (fast[:, :valid], steps[:, :valid], received, tuple(fast.shape))
    return out


@pytest.fixture(scope="module", params=[2, 3])
def sharded(request):
    return request.param, run_local(_worker, request.param, start_method="fork", timeout=120)


@pytest.mark.parametrize("outgoing", [True, False], ids=["outgoing", "incoming"])
def test_inference_path_equals_one_device(sharded, outgoing):
    p, results = sharded
    module, z, mask = _case(outgoing)
    with torch.no_grad():
        ref = module(z, mask).numpy()
    fast = np.concatenate([r[outgoing][0] for r in results], axis=1)
    steps = np.concatenate([r[outgoing][1] for r in results], axis=1)
    local = -(-N // p)
    assert all(r[outgoing][3] == (2, local, N, C_Z) for r in results)  # the share's shape, padding included
    scale = np.abs(ref).max()
    assert np.abs(fast - ref).max() <= TOL[torch.float32] * scale
    assert np.abs(fast - steps).max() <= TOL[torch.float32] * scale


@pytest.mark.parametrize("outgoing", [True, False], ids=["outgoing", "incoming"])
def test_inference_path_communication_matches_the_analytic_count(sharded, outgoing):
    from alphafold_mem.planner.dap import product_comm_elements

    p, results = sharded
    expected = product_comm_elements(N, C_HIDDEN, p, outgoing, rank=0) * 2 * 4  # batch 2, fp32
    assert results[0][outgoing][2] == expected


@pytest.mark.parametrize("outgoing", [True, False], ids=["outgoing", "incoming"])
def test_inference_path_in_bf16(sharded, outgoing):
    _, results = sharded
    module, z, mask = _case(outgoing, torch.bfloat16)
    with torch.no_grad():
        ref = module(z, mask).float().numpy()
    fast = np.concatenate([r[(outgoing, "bf16")] for r in results], axis=1)
    assert np.abs(fast - ref).max() <= TOL[torch.bfloat16] * np.abs(ref).max()
