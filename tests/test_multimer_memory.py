"""Every memory technique on the AF2-Multimer model: the parity weights (model_1_multimer_v3 layout)
on the parity complex (3 chains, A2B, templates) cropped to a few residues per chain, so that the
gradients are cheap, and recycled three times instead of 13 (``RECYCLE_STOP_TOLERANCE``). Each
policy equals the plain path (the reference policy) in outputs (atom positions, pLDDT, PAE, pTM,
ipTM) and parameter gradients within the monomer's tolerances (tests/test_memory.py); device
sharding (DAP, 2 gloo processes, the early stop after the second iteration) equals one process;
bf16 and bf16-full stay within 0.5 Å of fp32 on the whole complex."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.distributed as dist

from alphafold_mem import MemoryPolicy, bind
from alphafold_mem.config import model_config
from alphafold_mem.distributed import init_mesh, run_local
from alphafold_mem.memory.offload import simulated_device
from alphafold_mem.memory.tracking import StorageTracker
from alphafold_mem.model import AlphaFold
from alphafold_mem.testing import random_features
from alphafold_mem.weights import load_af2_params

from .conftest import TEST_DATA
from .kernel_checks import REASON as TRITON_REASON

PARITY = TEST_DATA / "parity_multimer"
COORD_TOL, PLDDT_TOL, GRAD_RTOL = 1e-4, 1e-4, 1e-4
COMPARED = ("final_atom_positions", "plddt", "predicted_aligned_error", "ptm", "iptm", "ranking_confidence")
#: residues kept of each chain (chain 1: 0-22, chain 2: 23-39, chain 3: 40-62), the first iteration
CROP = list(range(0, 7)) + list(range(23, 30)) + list(range(40, 46))


#: Å: the parity weights recycle 13 times at their own tolerance (0.5 Å); here the model runs three
#: iterations instead: the first check (Cα change 20.8 Å) continues, the second (~4-5 Å, cropped or
#: whole) stops: every path still recycles twice (and offload parks the recycled state), takes a
#: continue and a stop (under DAP: both ranks agree on each), at ~1/4 of the cost of 13
RECYCLE_STOP_TOLERANCE = 15.0


def _model():
    model = load_af2_params(PARITY / "params.npz", preset="model_1_multimer_v3")
    model.config = dataclasses.replace(model.config, recycle_early_stop_tolerance=RECYCLE_STOP_TOLERANCE)
    return model


def _inputs(residues=None):
    """The parity features of the first recycling iteration, without the recycling dim, cropped to
    ``residues`` (the residue axis is the one of length 63)."""
    out = {}
    for k, v in np.load(PARITY / "inputs.npz").items():
        t = torch.from_numpy(v[..., 0])
        if residues is not None and 63 in t.shape:
            t = t.index_select(list(t.shape).index(63), torch.tensor(residues))
        out[k] = t
    return out


def _loss(out) -> torch.Tensor:
    return (
        out["final_atom_positions"].square().mean()
        + out["plddt"].mean() / 100
        + out["predicted_aligned_error"].mean() / 10
        + out["iptm"]
        + out["masked_msa_logits"].square().mean()
    )


def _run(model, batch, policy, grad=True):
    bind(model, policy)
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        out = model(batch)
        if grad:
            _loss(out).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {k: v.detach() for k, v in out.items()}, grads


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture(scope="module")
def reference(model):
    return _run(model, _inputs(CROP), MemoryPolicy.reference())


def _check(out, ref_out, label):
    for k in COMPARED:
        tol = PLDDT_TOL if k == "plddt" else COORD_TOL
        assert (out[k] - ref_out[k]).abs().max().item() <= tol, (label, k)


def _grad_errors(grads, ref):
    floor = 1e-6 * max(g.norm().item() for g in ref.values())
    return {n: ((grads[n] - g).norm() / g.norm()).item() for n, g in ref.items() if g.norm().item() > floor}


@pytest.mark.parametrize(
    "policy",
    [
        MemoryPolicy.training(),
        MemoryPolicy.training(checkpoint_granularity="update"),
        MemoryPolicy.training(checkpoint_granularity="nested"),
        MemoryPolicy.low_memory_inference(chunk_size=6, attention_chunks=(5, 4)),
        MemoryPolicy(chunk_size=5, checkpoint_evoformer=2, checkpoint_template=1),
        MemoryPolicy(templates="streamed", chunk_size=4),
        MemoryPolicy.training(outer_product="recompute"),
        MemoryPolicy(inplace=True, outer_product="recompute"),
    ],
    ids=lambda p: p.name,
)
def test_policy_equals_the_plain_path(model, reference, policy):
    ref_out, ref_grads = reference
    batch = _inputs(CROP)
    out, grads = _run(model, batch, policy)
    inf_out, _ = _run(model, batch, policy, grad=False)  # in-place / offload paths run without autograd
    bind(model, MemoryPolicy.reference())
    _check(out, ref_out, "training")
    _check(inf_out, ref_out, "inference")
    errs = _grad_errors(grads, ref_grads)
    assert len(errs) > 0.9 * len(ref_grads)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= GRAD_RTOL, (worst, errs[worst])


def test_low_memory_inference_with_offload_equals_the_plain_path(model, reference):
    """Updates in place chunk by chunk, streamed templates, head logits reduced by rows, and the
    parked state of offload on a simulated accelerator (parking runs on the CPU)."""
    ref_out, _ = reference
    for policy, simulate in [
        (MemoryPolicy.low_memory_inference(chunk_size=4, attention_chunks=(5, 4)), False),
        (MemoryPolicy.low_memory_inference(chunk_size=5, offload="idle"), True),
        (MemoryPolicy.low_memory_inference(chunk_size=3, offload="buffers"), True),
    ]:
        with simulated_device(StorageTracker()) if simulate else torch.no_grad():
            out, _ = _run(model, _inputs(CROP), policy, grad=False)
        assert "pae_logits" not in out and "distogram_logits" not in out
        _check(out, ref_out, policy.name)
        assert torch.allclose(out["chain_pair_iptm"], ref_out["chain_pair_iptm"], atol=1e-5)
    bind(model, MemoryPolicy.reference())


def test_checkpointing_changes_no_bit(model):
    """Dropout on (train mode): the recomputation replays the random numbers."""
    batch = _inputs(CROP)
    model.train()
    try:
        results = []
        for every in (0, 1, 2):
            torch.manual_seed(3)
            bind(model, MemoryPolicy(checkpoint_evoformer=every, checkpoint_extra_msa=every, checkpoint_template=every))
            model.zero_grad(set_to_none=True)
            loss = _loss(model(batch))
            loss.backward()
            results.append(
                (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
            )
    finally:
        bind(model, MemoryPolicy.reference())
        model.eval()
    (loss0, g0), *others = results
    n_extra = len(model.extra_msa_stack.blocks)
    for loss, g in others:
        assert torch.equal(loss, loss0)
        assert g.keys() >= g0.keys() and all(torch.equal(g[n], g0[n]) for n in g0)
        # the outer product mean comes first in a multimer block, so the last extra-MSA block's MSA
        # updates feed nothing: without checkpointing they get no gradient, through a checkpoint a zero one
        unused = g.keys() - g0.keys()
        assert all(n.startswith(f"extra_msa_stack.blocks.{n_extra - 1}.msa_") for n in unused)
        assert all(not g[n].any() for n in unused)


@pytest.mark.skipif(TRITON_REASON is not None, reason=str(TRITON_REASON))
def test_triton_kernels_equal_the_plain_path():
    """The fused Triton kernels (LayerNorm, attention, triangle multiplication; Triton's interpreter
    on CPU) on the ``tiny_multimer`` model with random weights, 3 chains of 2 residues (A2B) with a
    template: outputs and gradients. The interpreter runs every program in Python, so the widths are
    the tiny preset's, the Evoformer has one block (the preset's second repeats the first's kernel
    calls) and there is one template (the multimer template stack embeds each template on its own: a
    second repeats the first's kernel calls at the same shapes; 2 cost 1.35x); the multimer modules
    and their kernel calls are the full model's. 6 residues (were 9, at 1.5x the cost: the residue
    axis sets the programs of the column and triangle kernels) are one partial, masked 16-wide
    interpreter tile per axis, as 9 were."""
    torch.manual_seed(0)
    cfg = model_config("tiny_multimer", **{"evoformer.num_blocks": 1})
    model = AlphaFold(cfg).eval()  # no dropout: both runs see the same function
    batch = random_features(model.config, n_res=6, n_seq=4, n_extra_seq=5, n_templ=1, seed=1)
    ref_out, ref_grads = _run(model, batch, MemoryPolicy.reference())
    out, grads = _run(model, batch, MemoryPolicy(kernels="triton"))
    _check(out, ref_out, "triton")
    for name, g in ref_grads.items():
        rel = ((g - grads[name]).norm() / max(g.norm().item(), 1e-12)).item()
        assert rel <= 1e-3 or (g - grads[name]).abs().max() <= 1e-6, f"{name}: relative gradient error {rel:.2e}"


@pytest.fixture(scope="module")
def fp32_complex(model):
    """The fp32 prediction of the whole complex that both bf16 precisions are compared with (run once)."""
    out, _ = _run(model, _inputs(), MemoryPolicy.low_memory_inference(), grad=False)
    bind(model, MemoryPolicy.reference())
    return out


@pytest.mark.parametrize("precision", ["bf16", "bf16-full"])
def test_bf16_within_half_an_angstrom(model, fp32_complex, precision):
    """The whole complex (63 residues), first iteration: Cα within 0.5 Å of fp32."""
    ref_out = fp32_complex
    out, _ = _run(model, _inputs(), MemoryPolicy.low_memory_inference(precision=precision), grad=False)
    bind(model, MemoryPolicy.reference())
    ca = (out["final_atom_positions"] - ref_out["final_atom_positions"])[:, 1]
    assert torch.isfinite(ca).all()
    assert ca.norm(dim=-1).max().item() <= 0.5, precision


# -- device sharding --------------------------------------------------------------------------------
DAP_TIMEOUT_S = 240


def _dap_worker(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    mesh = init_mesh(world, "cpu")
    model, batch = _model(), _inputs(CROP)
    policy = MemoryPolicy.low_memory_inference(chunk_size=4)
    bind(model, policy, mesh, gather_outputs=True)
    with torch.no_grad():
        out = model(batch)
    result = {k: out[k] for k in COMPARED + ("chain_pair_iptm", "num_recycles")}
    bind(model, MemoryPolicy.training(), mesh, gather_outputs=True)
    model.zero_grad(set_to_none=True)
    _loss(model(batch)).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    for g in grads.values():  # what DDP does over the processes: the mean
        dist.all_reduce(g)
        g /= world
    return {"inference": result, "grads": grads} if rank == 0 else {}


def test_dap_2_equals_one_process(model, reference):
    """The gradients are compared with the module's reference (the plain path, one process)."""
    _, ref_grads = reference
    bind(model, MemoryPolicy.low_memory_inference(chunk_size=4))
    with torch.no_grad():
        single = model(_inputs(CROP))
    bind(model, MemoryPolicy.reference())
    res = run_local(_dap_worker, 2, start_method="fork", timeout=DAP_TIMEOUT_S)[0]
    assert int(res["inference"]["num_recycles"]) == int(single["num_recycles"]) == 3  # continue, then stop
    for k in COMPARED + ("chain_pair_iptm",):
        got = torch.as_tensor(np.asarray(res["inference"][k]))
        tol = PLDDT_TOL if k == "plddt" else COORD_TOL
        assert (got - single[k]).abs().max().item() <= tol, k
    errs = _grad_errors({n: torch.as_tensor(np.asarray(g)) for n, g in res["grads"].items()}, ref_grads)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= GRAD_RTOL, (worst, errs[worst])
