"""The low-memory inference paths equal the reference: updates added in place chunk by chunk
(``add_to_``), the triangle multiplication's one-buffer path (also with its buffer streamed from host
memory), streamed templates (online softmax; outputs and gradients), query-chunked invariant point
attention, row-chunked heads and embedders, host parking. fp32 on CPU, sizes that the chunk sizes do
not divide, masks with both values."""

import contextlib

import pytest
import torch

from alphafold_mem import MemoryPolicy, bind
from alphafold_mem.memory import chunked
from alphafold_mem.memory.offload import Parked, offload_active, simulated_device, stream, to_host
from alphafold_mem.memory.tracking import StorageTracker
from alphafold_mem.model.embedders import ExtraMsaEmbedder, InputEmbedder, RecyclingEmbedder
from alphafold_mem.model.heads import DistogramHead, PredictedAlignedErrorHead, compute_ptm
from alphafold_mem.model.msa import MSAColumnAttention, MSAColumnGlobalAttention, MSARowAttentionWithPairBias
from alphafold_mem.model.outer_product_mean import OuterProductMean
from alphafold_mem.model.primitives import Transition
from alphafold_mem.model.template_attention import TemplatePointwiseAttention
from alphafold_mem.model.triangle import TriangleAttention, TriangleMultiplication

N, S, C = 13, 5, 8
TOL = 1e-5


def _perturbed(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return module


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(1, N, N, C, generator=g)
    pm = (torch.rand(1, N, N, generator=g) > 0.2).float()
    pm[:, -2:] = 0
    m = torch.randn(1, S, N, C, generator=g)
    mm = (torch.rand(1, S, N, generator=g) > 0.2).float()
    mm[:, :, -2:] = 0
    return z, pm, m, mm


def _cases():
    z, pm, m, mm = _inputs()
    return [  # (name, module, target, forward args)
        ("tri_mul_out", TriangleMultiplication(C, 6, outgoing=True), z, (z, pm)),
        ("tri_mul_in", TriangleMultiplication(C, 6, outgoing=False), z, (z, pm)),
        ("tri_att_start", TriangleAttention(C, 4, 2, starting=True), z, (z, pm)),
        ("tri_att_end", TriangleAttention(C, 4, 2, starting=False), z, (z, pm)),
        ("pair_transition", Transition(C, 2), z, (z, pm)),
        ("msa_row", MSARowAttentionWithPairBias(C, C, 4, 2), m, (m, z, mm)),
        ("msa_col", MSAColumnAttention(C, 4, 2), m, (m, mm)),
        ("msa_col_global", MSAColumnGlobalAttention(C, 4, 2), m, (m, mm)),
        ("opm", OuterProductMean(C, C, 3), z, (m, mm)),
    ]


@pytest.mark.parametrize("attention", ["reference", "chunked"])
def test_add_to_equals_residual_update(attention):
    """``target.add_to_`` (in place, chunk by chunk, the target may be the input) == target + forward."""
    for name, op, target, args in _cases():
        _perturbed(op)
        bind(op, MemoryPolicy())
        with torch.no_grad():
            ref = target + op(*args)
            for cs in (None, 1, 4, 6):
                bind(op, MemoryPolicy(chunk_size=cs, attention=attention, attention_chunks=(5, 4)))
                args_c = tuple(a.clone() for a in args)
                target_c = args_c[0] if target is args[0] else target.clone()
                out = op.add_to_(target_c, *args_c)
                assert out is target_c, name
                assert (out - ref).abs().max().item() <= TOL, (name, cs)


@pytest.mark.parametrize("outgoing", [True, False])
def test_triangle_multiplication_streamed_buffer(outgoing):
    """offload="buffers" under an (simulated) accelerator: the second projection lives in host row
    blocks, streamed back for every chunk; same update."""
    z, pm, _, _ = _inputs(1)
    op = _perturbed(TriangleMultiplication(C, 6, outgoing=outgoing))
    with torch.no_grad():
        ref = z + op(z, pm)
        tracker = StorageTracker()
        for cs in (3, 5):
            bind(op, MemoryPolicy(chunk_size=cs, offload="buffers"))
            with simulated_device(tracker):
                assert offload_active(z.device)
                out = op.add_to_(z.clone(), z.clone(), pm)
            assert (out - ref).abs().max().item() <= TOL, cs


@pytest.mark.parametrize("outgoing", [True, False])
def test_triangle_multiplication_blocks_of_rows(outgoing):
    """The in-place multiplicative update takes its product over blocks of at least MATMUL_ROWS rows
    (columns), each computed chunk_size rows at a time: at N_res 37 (several blocks, a short last
    one, every remainder of chunk_size) it equals z + forward, also with b streamed from host blocks,
    and in bf16-full bit for bit."""
    from alphafold_mem.model import triangle

    g = torch.Generator().manual_seed(3)
    n = 37
    assert n > 2 * triangle.MATMUL_ROWS
    z = torch.randn(1, n, n, C, generator=g)
    pm = (torch.rand(1, n, n, generator=g) > 0.2).float()
    pm[:, -3:] = 0
    op = _perturbed(TriangleMultiplication(C, 6, outgoing=outgoing))
    with torch.no_grad():
        ref = z + op(z, pm)
        for cs, offload in (
            (1, "none"),
            (4, "none"),
            (5, "none"),
            (7, "none"),
            (16, "none"),
            (40, "none"),
            (4, "buffers"),
            (5, "buffers"),
        ):
            bind(op, MemoryPolicy(chunk_size=cs, offload=offload))
            with simulated_device(StorageTracker()) if offload == "buffers" else contextlib.nullcontext():
                out = op.add_to_(z.clone(), z.clone(), pm)
            assert (out - ref).abs().max().item() <= TOL, (cs, offload)
    # bf16-full (bf16 stream and mask under the bf16 autocast): bit for bit, as at one block
    zb, pmb = z.bfloat16(), pm.bfloat16()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        bind(op, MemoryPolicy(precision="bf16-full"))
        ref = zb + op(zb, pmb)
        for cs, offload in ((4, "none"), (5, "none"), (4, "buffers"), (7, "buffers")):
            bind(op, MemoryPolicy(chunk_size=cs, inplace=True, offload=offload, precision="bf16-full"))
            with simulated_device(StorageTracker()) if offload == "buffers" else contextlib.nullcontext():
                out = op.add_to_(zb.clone(), zb.clone(), pmb)
            assert out.dtype == torch.bfloat16 and torch.equal(out, ref), (cs, offload)


def test_add_to_equals_residual_update_bf16_full():
    """bf16-full (bf16 streams and masks under the bf16 autocast): the in-place paths round where the
    reference does (each element of the stream gets one bf16 add of its bf16 update), so they equal
    ``target + forward`` bit for bit; the triangle multiplication also with its buffer streamed from
    host memory (offload="buffers", simulated accelerator), whose partial sums over the blocks of k
    stay in fp32 (summed in bf16 they differed from the reference in about half the elements)."""
    for name, op, target, args in _cases():
        _perturbed(op)
        on_input = target is args[0]  # the update goes into its own input (all but the outer product mean)
        args = tuple(a.bfloat16() for a in args)
        target = args[0] if on_input else target.bfloat16()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            bind(op, MemoryPolicy(precision="bf16-full"))
            ref = target + op(*args)
            assert ref.dtype == torch.bfloat16, name
            for cs in (None, 4, 5):
                offloads = ("none", "buffers") if isinstance(op, TriangleMultiplication) and cs else ("none",)
                for offload in offloads:
                    bind(op, MemoryPolicy(chunk_size=cs, inplace=True, offload=offload, precision="bf16-full"))
                    args_c = tuple(a.clone() for a in args)
                    target_c = args_c[0] if target is args[0] else target.clone()
                    if offload == "buffers":
                        with simulated_device(StorageTracker()):
                            out = op.add_to_(target_c, *args_c)
                    else:
                        out = op.add_to_(target_c, *args_c)
                    assert out.dtype == torch.bfloat16 and torch.equal(out, ref), (name, cs, offload)


def _templates(n_templ, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(1, N, N, C, generator=g)
    t = torch.randn(1, n_templ, N, N, 6, generator=g)
    mask = torch.ones(1, n_templ)
    if n_templ > 1:
        mask[0, 1] = 0  # a masked template among unmasked ones
    return z, t, mask


@pytest.mark.parametrize("n_templ", [1, 4])
@pytest.mark.parametrize("chunk", [None, 4])
def test_streamed_template_attention_equals_batched(n_templ, chunk):
    """Online softmax over templates, one at a time == attention over the stacked templates, in
    outputs and in gradients (training path), and in place (inference)."""
    op = _perturbed(TemplatePointwiseAttention(C, 6, 4, 2))
    bind(op, MemoryPolicy(chunk_size=chunk))
    z, t, mask = _templates(n_templ)
    z.requires_grad_(True)
    t.requires_grad_(True)
    ref = op(z, t, mask)
    g = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, [z, t, *op.parameters()], g)
    q, state = op.queries(z), None
    for i in range(n_templ):
        state = op.fold(state, q, t[:, i], mask[:, i])
    out = op.output(state[0], torch.ones(1, 1, 1, 1))
    # one template: the softmax weight is 1 whatever the query, so z and the query projection get
    # no gradient (the reference's is exactly 0)
    grads = torch.autograd.grad(out, [z, t, *op.parameters()], g, allow_unused=True)
    assert (out - ref).abs().max().item() <= TOL
    for a, b in zip(grads, ref_grads):
        if a is None:
            assert n_templ == 1 and b.abs().max() == 0
        elif b.norm() > 0:
            assert ((a - b).norm() / b.norm()).item() <= 1e-4
    with torch.no_grad():  # in place
        q, state = op.queries(z), None
        for i in range(n_templ):
            state = op.fold(state, q, t[:, i], mask[:, i], inplace=True)
        target = z.detach().clone()
        op.output(state[0], torch.ones(1, 1, 1, 1), target=target)
        assert (target - (z + ref)).abs().max().item() <= TOL


def test_streamed_template_attention_bf16_error():
    """Under bf16 the streamed state ``o`` (pair-sized) is kept in bf16 and rounded after each template
    (an fp32 state would double it); the reference rounds the probabilities and the output once.
    The streamed error to the fp32 result stays that of the batched reference: mean within 10 %
    (+4 % here; +1.4 % on a 29-residue case, where an fp32 state gives -1.5 %)."""
    op = _perturbed(TemplatePointwiseAttention(C, 6, 4, 2), seed=1)
    z, t, mask = _templates(4, seed=2)
    mask[:] = 1
    with torch.no_grad():
        ref = op(z, t, mask)
        zb, tb, mb = z.bfloat16(), t.bfloat16(), mask.bfloat16()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            batched = op(zb, tb, mb)
            q, state = op.queries(zb), None
            for i in range(4):
                state = op.fold(state, q, tb[:, i], mb[:, i], inplace=True)
            streamed = op.output(state[0], torch.ones(1, 1, 1, 1, dtype=torch.bfloat16))
    assert streamed.dtype == batched.dtype == torch.bfloat16
    err_b, err_s = ((x.float() - ref).abs().mean().item() for x in (batched, streamed))
    assert err_s <= 1.1 * err_b, (err_s, err_b)


def test_all_templates_masked_gives_finite_zero_update():
    op = _perturbed(TemplatePointwiseAttention(C, 6, 4, 2))
    z, t, _ = _templates(3)
    mask = torch.zeros(1, 3)
    with torch.no_grad():
        q, state = op.queries(z), None
        for i in range(3):
            state = op.fold(state, q, t[:, i], mask[:, i])
        out = op.output(state[0], torch.zeros(1, 1, 1, 1))
    assert torch.isfinite(state[0]).all() and out.abs().max() == 0


def test_heads_in_row_chunks():
    z, pm, _, _ = _inputs(2)
    seq_mask = torch.ones(1, N)
    seq_mask[:, -3:] = 0
    dist = _perturbed(DistogramHead(C, 16))
    pae = _perturbed(PredictedAlignedErrorHead(C, 16, 31.0))
    with torch.no_grad():
        ref_d = dist(z)
        ref_p = pae(z, seq_mask)
        for cs in (3, 4):
            dist.chunk_size = pae.chunk_size = cs
            assert (dist(z) - ref_d).abs().max() <= TOL
            for keep in (True, False):
                out = pae(z, seq_mask, keep_logits=keep)
                assert (out["predicted_aligned_error"] - ref_p["predicted_aligned_error"]).abs().max() <= TOL
                assert (out["ptm"] - ref_p["ptm"]).abs().max() <= 1e-6
                assert ("pae_logits" in out) == keep
                if keep:
                    assert torch.equal(out["pae_logits"], ref_p["pae_logits"])
    assert (ref_p["ptm"] - compute_ptm(ref_p["pae_logits"], 31.0, seq_mask)).abs().max() <= 1e-6


def test_embedders_chunked_and_by_lookup():
    g = torch.Generator().manual_seed(3)
    emb = _perturbed(InputEmbedder(22, 49, C, C, relpos_k=4))
    tf = torch.randn(1, N, 22, generator=g)
    ri = torch.arange(N)[None] * 2
    msa_feat = torch.randn(1, S, N, 49, generator=g)
    rec = _perturbed(RecyclingEmbedder(C, C, 15, 3.25, 20.75))
    z_prev = torch.randn(1, N, N, C, generator=g)
    x_prev = torch.randn(1, N, 3, generator=g) * 10
    extra = _perturbed(ExtraMsaEmbedder(C))
    tokens = torch.randint(0, 22, (1, S, N), generator=g)
    has_del, del_val = (torch.rand(1, S, N, generator=g) > 0.5).float(), torch.rand(1, S, N, generator=g)
    with torch.no_grad():
        m_ref, z_ref = emb(tf, ri, msa_feat)
        z_upd_ref = rec(torch.zeros(1, N, C), z_prev, x_prev)[1]
        onehot = torch.nn.functional.one_hot(tokens, 23).float()
        e_ref = extra.extra_msa_activations(torch.cat([onehot, has_del[..., None], del_val[..., None]], -1))
        for cs in (None, 4):
            emb.chunk_size = rec.chunk_size = extra.chunk_size = cs
            z = torch.zeros_like(z_ref)
            assert (emb.add_pair_(z, tf, ri) - z_ref).abs().max() <= TOL
            assert (emb.msa(tf, msa_feat, out=torch.empty_like(m_ref)) - m_ref).abs().max() <= TOL
            assert (rec.pair_update(z_prev.clone(), x_prev, out=None) - z_upd_ref).abs().max() <= TOL
            zp = z_prev.clone()
            assert (rec.pair_update(zp, x_prev, out=zp) - z_upd_ref).abs().max() <= TOL  # in place
            assert (extra(tokens, has_del, del_val) - e_ref).abs().max() <= TOL
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the lookup rounds as the autocast matmul does
            e_bf, e_ref_bf = (
                extra(tokens, has_del, del_val),
                extra.extra_msa_activations(torch.cat([onehot, has_del[..., None], del_val[..., None]], -1)),
            )
        assert e_bf.dtype == e_ref_bf.dtype == torch.bfloat16
        assert (e_bf.float() - e_ref_bf.float()).abs().max() <= 2**-7 * e_ref_bf.float().abs().max()


def test_chunked_accumulate_collect_and_alias_check():
    x = torch.randn(2, 9, 4)
    target = torch.randn(2, 9, 4)
    ref = target + 2 * x
    out = chunked(lambda a: 2 * a, (x,), (-2,), 4, out_dim=-2, out=target.clone(), accumulate=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    blocks = chunked(lambda a: 2 * a, (x,), (-2,), 4, out_dim=-2, collect=True)
    assert [b.shape[-2] for b in blocks] == [4, 4, 1]
    torch.testing.assert_close(torch.cat(blocks, -2), 2 * x, rtol=0, atol=0)
    op = TriangleMultiplication(C, 6, outgoing=True)
    z, pm, _, _ = _inputs()
    from alphafold_mem.memory import run_split

    with pytest.raises(ValueError, match="whole operand"):
        run_split(op, "outgoing_inplace", lambda *a: a[0], z, z, pm, out=z, accumulate=True)


def test_parking_round_trip_and_simulated_counts():
    x = torch.randn(6, 7)
    view = x[2:4]
    ref = x.clone()
    parked = Parked(view, force=True)  # the accelerator path: the storage is emptied, then refilled
    assert x.untyped_storage().nbytes() == 0
    assert parked.restore() is view and torch.equal(x, ref)
    tracker = StorageTracker()
    with tracker, simulated_device(tracker):
        a = torch.empty(1000)  # 4000 bytes
        b = to_host(torch.empty(500))  # straight to host memory
        assert tracker.live == 4000 and tracker.host == 2000
        p = Parked(a)
        assert tracker.live == 0 and tracker.host == 6000
        p.restore()
        blocks = [to_host(torch.empty(250)) for _ in range(3)]  # 1000 bytes each
        seen = []
        for blk in stream(blocks, torch.device("cpu")):
            seen.append(tracker.live)
        assert seen == [5000, 5000, 5000] and tracker.peak == 6000  # two blocks at once, while fetching
        assert tracker.live == 4000
        del a, b, p, blocks, blk
    assert tracker.live == 0 and tracker.host == 0 and tracker.peak == 6000


def test_bench_triangle_blocks_prints_one_row_per_block_size(capsys):
    """scripts/bench_triangle_blocks.py: a row per (N_res, edges, MATMUL_ROWS), the same update at every
    block size (max |Δ| <= 1e-5), and the module constant restored afterwards."""
    import importlib.util
    from pathlib import Path

    from alphafold_mem.model import triangle

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_triangle_blocks.py"
    spec = importlib.util.spec_from_file_location("bench_triangle_blocks", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = triangle.MATMUL_ROWS
    threads = torch.get_num_threads()
    try:
        assert (
            bench.main(
                [
                    "--n-res",
                    "21",
                    "--chunk-size",
                    "2",
                    "--rows",
                    "0",
                    "8",
                    "--channels",
                    "8",
                    "--repeats",
                    "1",
                    "--threads",
                    str(threads),
                ]
            )
            == 0
        )
    finally:
        torch.set_num_threads(threads)
    assert triangle.MATMUL_ROWS == before
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| 21 ")]
    assert [(r[1].strip(), r[2].strip(), r[3].strip()) for r in rows] == [
        ("outgoing", "0", "2"),
        ("outgoing", "8", "8"),
        ("incoming", "0", "2"),
        ("incoming", "8", "8"),
    ]
    assert all(float(r[7]) <= 1e-5 for r in rows)  # the product split differently: rounding only
    assert all(float(r[6]) > 0 for r in rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gating_in_place_without_autograd_is_the_plain_formula(dtype):
    """sigmoid_gate / masked / relu compute into the fresh projection when autograd records nothing:
    the same values bit for bit as the plain formula; with autograd recording they run the plain
    formula (inputs untouched, gradients as the formula's); a mask of a wider dtype promotes the
    result as the formula does (no in-place cast)."""
    from alphafold_mem.model.primitives import masked, relu, sigmoid_gate

    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 7, 5, generator=g).to(dtype)
    logits = torch.randn(3, 7, 5, generator=g).to(dtype)
    mask = (torch.rand(3, 7, generator=g) > 0.3).to(dtype)
    with torch.no_grad():
        fresh = logits.clone()
        out = sigmoid_gate(x, fresh, mask)
        assert out.data_ptr() == fresh.data_ptr()  # computed in the projection: no new tensor
        assert torch.equal(out, x * torch.sigmoid(logits) * mask[..., None])
        head = x[:, :1]  # broadcast along dim -2, as the global attention's output is
        assert torch.equal(sigmoid_gate(head, logits.clone()), head * torch.sigmoid(logits))
        fresh = x.clone()
        assert masked(fresh, mask).data_ptr() == fresh.data_ptr()
        assert torch.equal(fresh, x * mask[..., None])
        fresh = logits.clone()
        out = relu(fresh)
        assert torch.equal(out, torch.relu(logits)) and out.data_ptr() == fresh.data_ptr()
        wide = mask.double()  # the formula promotes to float64: so must the helper
        assert sigmoid_gate(x, logits.clone(), wide).dtype == torch.float64
        assert torch.equal(masked(x.clone(), wide), x * wide[..., None])
    xr, lr = x.clone().requires_grad_(), logits.clone().requires_grad_()
    xp, lp = x.clone().requires_grad_(), logits.clone().requires_grad_()
    out = sigmoid_gate(xr, lr, mask)
    ref = xp * torch.sigmoid(lp) * mask[..., None]
    assert torch.equal(out, ref) and torch.equal(lr.detach(), logits)  # the input was not overwritten
    weights = torch.randn(out.shape, generator=g).to(dtype)
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    assert torch.equal(xr.grad, xp.grad) and torch.equal(lr.grad, lp.grad)
