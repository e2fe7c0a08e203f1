"""Memory policy equivalence: every memory knob computes the reference
function. fp32 on CPU, sizes that chunk sizes do not divide, masks with both values present."""

import pytest
import torch

from alphafold_mem import AlphaFold, MemoryPolicy, bind, kernels, model_config
from alphafold_mem.kernels.low_memory_attention import low_memory_attention
from alphafold_mem.memory import chunked
from alphafold_mem.model.msa import MSAColumnAttention, MSAColumnGlobalAttention, MSARowAttentionWithPairBias
from alphafold_mem.model.outer_product_mean import OuterProductMean
from alphafold_mem.model.primitives import Transition
from alphafold_mem.model.template import TemplatePointwiseAttention
from alphafold_mem.model.triangle import TriangleAttention, TriangleMultiplication
from alphafold_mem.planner.estimate import proxy_loss
from alphafold_mem.testing import random_features

N_RES, N_SEQ, N_EXTRA, N_TEMPL = 19, 7, 9, 2
COORD_TOL, PLDDT_TOL, GRAD_RTOL = 1e-4, 1e-4, 1e-4


def _perturbed(module, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module


def _masked_batch(cfg, seed=0):
    b = random_features(cfg, N_RES, N_SEQ, N_EXTRA, n_templ=N_TEMPL, seed=seed)
    b["seq_mask"][-3:] = 0
    b["msa_mask"][4:, 11:] = 0
    b["extra_msa_mask"][5:, 3:] = 0
    b["template_mask"][-1] = 0 if N_TEMPL > 1 else 1
    return b


def _grad_rel_errors(grads, ref):
    """Per-tensor ||g - g_ref|| / ||g_ref||, for tensors whose reference gradient is not (numerically)
    zero: a few are zero in exact arithmetic (e.g. a LayerNorm bias feeding a bias that is constant
    along the softmax axis) and hold only rounding noise, ~1e-8."""
    floor = 1e-6 * max(g.norm().item() for g in ref.values())
    return {n: ((grads[n] - g).norm() / g.norm()).item() for n, g in ref.items() if g.norm().item() > floor}


# -- the chunking helper ---------------------------------------------------------------------------


def test_chunked_matches_direct_call():
    x = torch.randn(2, 11, 5, 3)
    mask = torch.rand(2, 11, 5)
    w = torch.randn(1, 1, 5, 3)  # broadcast along the chunked axis: passed whole

    def fn(x, mask, w):
        return x * w * mask[..., None], (x.sum(-1) + mask)[..., None]

    ref = fn(x, mask, w)
    for cs in (1, 3, 4, 11, 50, None):
        out = chunked(fn, (x, mask, w), (-3, -2, -3), cs, out_dim=-3)
        torch.testing.assert_close(out[0], ref[0], rtol=0, atol=0)
        torch.testing.assert_close(out[1], ref[1], rtol=0, atol=0)
        out1 = chunked(lambda x, m, w: fn(x, m, w)[1][..., 0], (x, mask, w), (-3, -2, -3), cs, out_dim=-2)
        torch.testing.assert_close(out1, ref[1][..., 0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="disagree"):
        chunked(fn, (x, mask[:, :5], w), (-3, -2, -3), 2)


# -- low-memory attention ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("chunks", [(4, 3), (5, 7), (1024, 4096)])
def test_low_memory_attention_matches_reference(dtype, tol, chunks):
    g = torch.Generator().manual_seed(1)
    B, S, H, Q, K, C = 2, 3, 4, 13, 11, 5
    q = torch.randn(B, S, H, Q, C, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(B, S, H, K, C, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(B, S, H, K, 6, generator=g, dtype=dtype, requires_grad=True)
    mask = (torch.rand(B, S, 1, 1, K, generator=g) > 0.3).to(dtype)
    mask[0, 1] = 0  # a fully masked row (padding): its logits sit near -1e9
    assert 0 < mask.mean() < 1
    mask_bias = (mask - 1) * 1e9
    pair_bias = torch.randn(B, 1, H, Q, K, generator=g, dtype=dtype, requires_grad=True)
    ref = kernels.attention(q, k, v, [mask_bias, pair_bias], impl="reference")
    out = low_memory_attention(q, k, v, [mask_bias, pair_bias], *chunks)
    d_out = torch.randn(ref.shape, generator=g, dtype=dtype)
    g_ref = torch.autograd.grad(ref, (q, k, v, pair_bias), d_out)
    g_out = torch.autograd.grad(out, (q, k, v, pair_bias), d_out)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    for a, b in zip(g_out, g_ref):
        assert ((a - b).abs().max() / b.abs().max()).item() <= tol


# -- every chunkable op: chunked == unchunked, outputs and gradients ------------------------------


def _pair(n=N_RES, c=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(1, n, n, c, generator=g)
    mask = (torch.rand(1, n, n, generator=g) > 0.2).float()
    mask[:, -2:] = 0  # padded residues: fully masked rows
    return z, mask


def _msa(s=N_SEQ, n=N_RES, c=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(1, s, n, c, generator=g)
    mask = (torch.rand(1, s, n, generator=g) > 0.2).float()
    mask[:, :, -2:] = 0  # padded residues: fully masked columns
    return m, mask


def _op_cases():
    z, pm = _pair()
    m, mm = _msa()
    t = torch.randn(1, N_TEMPL, N_RES, N_RES, 6)
    tmask = torch.tensor([[1.0, 0.0]])
    return [
        ("msa_row", MSARowAttentionWithPairBias(8, 8, 4, 2), (m, z, mm)),
        ("msa_col", MSAColumnAttention(8, 4, 2), (m, mm)),
        ("msa_col_global", MSAColumnGlobalAttention(8, 4, 2), (m, mm)),
        ("opm", OuterProductMean(8, 8, 3), (m, mm)),
        ("tri_mul_out", TriangleMultiplication(8, 6, outgoing=True), (z, pm)),
        ("tri_mul_in", TriangleMultiplication(8, 6, outgoing=False), (z, pm)),
        ("tri_att_start", TriangleAttention(8, 4, 2, starting=True), (z, pm)),
        ("tri_att_end", TriangleAttention(8, 4, 2, starting=False), (z, pm)),
        ("pair_transition", Transition(8, 4), (z, pm)),
        ("msa_transition", Transition(8, 4), (m, mm)),
        ("template_pointwise", TemplatePointwiseAttention(8, 6, 4, 2), (z, t, tmask)),
    ]


@pytest.mark.parametrize("attention", ["reference", "chunked"])
def test_every_chunkable_op_matches_unchunked(attention):
    for name, op, inputs in _op_cases():
        _perturbed(op)
        inputs = tuple(x.clone().requires_grad_(x.is_floating_point() and i == 0) for i, x in enumerate(inputs))
        bind(op, MemoryPolicy())
        ref = op(*inputs)
        g = torch.randn_like(ref)
        ref_grads = torch.autograd.grad(ref, [inputs[0], *op.parameters()], g, allow_unused=True)
        for cs in (1, 4, 6):  # 19 and 7 are not multiples of 4 or 6
            bind(op, MemoryPolicy(chunk_size=cs, attention=attention, attention_chunks=(5, 4)))
            out = op(*inputs)
            grads = torch.autograd.grad(out, [inputs[0], *op.parameters()], g, allow_unused=True)
            assert (out - ref).abs().max().item() <= 1e-5, (name, cs)
            for a, b in zip(grads, ref_grads):
                if b is not None and b.norm() > 1e-6:
                    assert ((a - b).norm() / b.norm()).item() <= GRAD_RTOL, (name, cs)


# -- whole model: every preset == reference ------------------------------------------------------


@pytest.fixture(scope="module")
def model_and_batch():
    cfg = model_config("tiny")
    torch.manual_seed(0)  # the initial weights must not depend on which tests ran before in this process
    model = _perturbed(AlphaFold(cfg)).eval()
    return model, _masked_batch(cfg)


def _run(model, batch, policy, grad=True):
    bind(model, policy)
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        out = model(batch)
        if grad:
            proxy_loss(out).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {k: v.detach() for k, v in out.items()}, grads


@pytest.fixture(scope="module")
def reference_run(model_and_batch):
    model, batch = model_and_batch
    return _run(model, batch, MemoryPolicy.reference())


@pytest.mark.parametrize(
    "policy",
    [
        MemoryPolicy.training(),
        MemoryPolicy.training(checkpoint_granularity="update"),
        MemoryPolicy.training(checkpoint_granularity="nested"),
        MemoryPolicy.low_memory_inference(chunk_size=6, attention_chunks=(5, 4)),
        MemoryPolicy(chunk_size=5, checkpoint_evoformer=2, checkpoint_template=1),
        MemoryPolicy.training(outer_product="recompute"),
        MemoryPolicy(inplace=True, outer_product="recompute"),
    ],
    ids=lambda p: p.name,
)
def test_presets_match_reference(model_and_batch, reference_run, policy):
    """Outputs and parameter gradients; the low_memory_inference default (chunk 16) is exercised at
    the same sizes by test_memory_estimate and at N_res 256 by scripts/bench_memory.py."""
    model, batch = model_and_batch
    ref_out, ref_grads = reference_run
    out, grads = _run(model, batch, policy)
    inf_out, _ = _run(model, batch, policy, grad=False)  # in-place / offload paths run without autograd
    bind(model, MemoryPolicy.reference())
    for o in (out, inf_out):
        assert (o["final_atom_positions"] - ref_out["final_atom_positions"]).abs().max() <= COORD_TOL
        assert (o["plddt"] - ref_out["plddt"]).abs().max() <= PLDDT_TOL
    errs = _grad_rel_errors(grads, ref_grads)
    assert len(errs) > 0.9 * len(ref_grads)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= GRAD_RTOL, (worst, errs[worst])


@pytest.mark.parametrize("n_templ", [1, 4])
def test_low_memory_inference_with_templates_and_offload(n_templ):
    """The whole model: low-memory inference (updates in place chunk by chunk, streamed templates,
    head logits reduced) == the reference with 1 and 4 templates (one masked among 4), also with
    offload active (a simulated accelerator: parking and streamed buffers run on CPU), and with two
    recycling iterations (z built in the recycled z's storage). Training with streamed templates:
    the same gradients."""
    from alphafold_mem.memory.offload import simulated_device
    from alphafold_mem.memory.tracking import StorageTracker

    cfg = model_config("tiny", num_recycles=1)
    torch.manual_seed(1)
    model = _perturbed(AlphaFold(cfg), seed=1).eval()
    b = random_features(cfg, 17, 5, 7, n_templ=n_templ, seed=2)
    b["seq_mask"][-2:] = 0
    b["msa_mask"][3:, 9:] = 0
    if n_templ > 1:
        b["template_mask"][1] = 0
    ref_out, ref_grads = _run(model, b, MemoryPolicy.reference())
    for policy, simulate in [
        (MemoryPolicy.low_memory_inference(chunk_size=4, attention_chunks=(5, 4)), False),
        (MemoryPolicy.low_memory_inference(chunk_size=5, offload="idle"), True),
        (MemoryPolicy.low_memory_inference(chunk_size=3), True),
    ]:
        with simulated_device(StorageTracker()) if simulate else torch.no_grad():
            out, _ = _run(model, b, policy, grad=False)
        assert "distogram_logits" not in out and "pae_logits" not in out
        assert (out["final_atom_positions"] - ref_out["final_atom_positions"]).abs().max() <= COORD_TOL, policy
        assert (out["plddt"] - ref_out["plddt"]).abs().max() <= PLDDT_TOL
        assert (out["predicted_aligned_error"] - ref_out["predicted_aligned_error"]).abs().max() <= 1e-3
    _, grads = _run(model, b, MemoryPolicy(templates="streamed", chunk_size=5))
    bind(model, MemoryPolicy.reference())
    errs = _grad_rel_errors(grads, ref_grads)
    assert max(errs.values()) <= GRAD_RTOL


def test_checkpointing_changes_no_bit(model_and_batch):
    """With dropout on (train mode), so the recomputation must replay the RNG."""
    model, batch = model_and_batch
    model.train()
    try:
        results = []
        for every in (0, 1, 2):
            torch.manual_seed(3)
            policy = MemoryPolicy(checkpoint_evoformer=every, checkpoint_extra_msa=every, checkpoint_template=every)
            bind(model, policy)
            model.zero_grad(set_to_none=True)
            loss = proxy_loss(model(batch))
            loss.backward()
            results.append(
                (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
            )
    finally:
        bind(model, MemoryPolicy.reference())
        model.eval()
    (loss0, g0), *others = results
    for loss, g in others:
        assert torch.equal(loss, loss0)
        assert g.keys() == g0.keys() and all(torch.equal(g[n], g0[n]) for n in g0)


def test_apply_policy_is_rebindable_and_keeps_names():
    cfg = model_config("tiny")
    model = AlphaFold(cfg)
    names = list(model.state_dict())
    bind(model, MemoryPolicy.training())
    stacks = (model.evoformer, model.extra_msa_stack, model.template_embedding)
    assert [s.checkpoint_every for s in stacks] == [1, 1, 1] and model._binding_handles == []
    n_blocks = cfg.evoformer.num_blocks + cfg.extra_msa.num_blocks + cfg.template.pair_stack.num_blocks
    bind(
        model, MemoryPolicy.training(checkpoint_granularity="update")
    )  # a checkpoint per residual update: 9 per block, 5 per template block
    assert [s.checkpoint_every for s in stacks] == [0, 0, 0]
    assert len(model._binding_handles) == (
        9 * (n_blocks - cfg.template.pair_stack.num_blocks) + 5 * cfg.template.pair_stack.num_blocks
    )
    n_update_handles = len(model._binding_handles)
    bind(model, MemoryPolicy.training(checkpoint_granularity="nested"))  # both: blocks and updates
    assert [s.checkpoint_every for s in stacks] == [1, 1, 1]
    assert len(model._binding_handles) == n_update_handles
    bind(model, MemoryPolicy.low_memory_inference())
    assert model._binding_handles == [] and list(model.state_dict()) == names
    assert all("forward" not in vars(m) for m in model.modules())  # update checkpoints removed
    tri = model.evoformer.blocks[0].pair_updates.triangle_attention_starting_node
    assert tri.chunk_size == 16 and tri.attention.attention_impl == "chunked"
    assert model.evoformer.blocks[0].inplace and model.offload == "buffers"
    assert model.template_embedding.templates == "streamed" and model.aux_heads.head_logits == "drop"
    bind(model, MemoryPolicy.reference())
    assert tri.chunk_size is None and tri.attention.attention_impl == "reference" and model.offload == "none"


def test_policy_validation():
    with pytest.raises(ValueError, match="attention"):
        MemoryPolicy(attention="flash")
    with pytest.raises(ValueError, match="chunk_size"):
        MemoryPolicy(chunk_size=0)
    with pytest.raises(ValueError, match="precision"):
        MemoryPolicy(precision="fp16")
    assert MemoryPolicy.training(precision="bf16").checkpoint_evoformer == 1


def test_triton_policy_dispatches_to_kernels(monkeypatch):
    """``kernels="triton"`` routes LayerNorm, the attention core and the triangle multiplication through
    :mod:`kernels` with impl="triton", whatever ``attention`` says (recorded here; the kernels themselves
    are tested in test_kernels*.py); ``kernels="reference"`` routes nothing to Triton."""
    from alphafold_mem.kernels import reference

    seen = set()
    monkeypatch.setattr(
        kernels,
        "attention",
        lambda q, k, v, b, impl, *args, **kw: seen.add(("att", impl)) or reference.attention(q, k, v, b),
    )
    monkeypatch.setattr(
        kernels, "layer_norm", lambda x, w, b, eps, impl: seen.add(("ln", impl)) or reference.layer_norm(x, w, b, eps)
    )
    monkeypatch.setattr(
        kernels,
        "triangle_multiplication",
        lambda z, m, w, outgoing, eps, impl, **kw: (
            seen.add(("tri", impl)) or reference.triangle_multiplication(z, m, w, outgoing, eps, **kw)
        ),
    )
    cfg = model_config("tiny")
    for policy, expected in (
        (MemoryPolicy(kernels="triton"), {("att", "triton"), ("ln", "triton"), ("tri", "triton")}),
        (MemoryPolicy.training(kernels="triton"), {("att", "triton"), ("ln", "triton"), ("tri", "triton")}),
        (MemoryPolicy(), {("att", "reference"), ("ln", "reference"), ("tri", "reference")}),
        (MemoryPolicy(attention="chunked"), {("att", "chunked"), ("ln", "reference"), ("tri", "reference")}),
    ):
        seen.clear()
        model = bind(AlphaFold(cfg).eval(), policy)
        with torch.no_grad():
            model(random_features(cfg, 5, 3, 3))
        assert seen == expected, policy
    with pytest.raises(ValueError, match="kernels='triton'"):
        MemoryPolicy(attention="triton")
    with pytest.raises(ValueError, match="unknown kernels"):
        MemoryPolicy(kernels="cuda")


@pytest.mark.parametrize("precision,rep_dtype", [("bf16", torch.float32), ("bf16-full", torch.bfloat16)])
def test_bf16_autocast_with_fp32_islands(model_and_batch, reference_run, precision, rep_dtype):
    model, batch = model_and_batch
    ref_out, _ = reference_run
    out, _ = _run(model, batch, MemoryPolicy.low_memory_inference(precision=precision), grad=False)
    bind(model, MemoryPolicy.reference())
    assert out["pair"].dtype == rep_dtype  # the pair stream: bf16 under bf16-full
    assert out["msa"].dtype == torch.float32  # the MSA streams stay fp32 under both
    assert out["final_atom_positions"].dtype == torch.float32  # structure module: fp32 island
    assert out["plddt"].dtype == torch.float32
    assert torch.isfinite(out["final_atom_positions"]).all()
    mask = batch["seq_mask"].bool()
    ca = (out["final_atom_positions"] - ref_out["final_atom_positions"])[mask, 1]
    assert ca.norm(dim=-1).max() < 2.0  # Å, a random tiny network in bf16; loose sanity bound
