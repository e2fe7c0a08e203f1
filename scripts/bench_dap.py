"""Dynamic axial parallelism benchmark: per-device measured and predicted peak, time, and bytes
communicated per block (counted in the collectives, beside the analytic count), for P = 1, 2, 4
local processes (gloo on CPU, NCCL on CUDA), side by side in one run.

Default run (model_1 channel sizes, 2 Evoformer + 1 extra-MSA block, no templates, no recycling,
N_res 256, N_seq 128, N_extra 1024; inference under ``low_memory_inference()``, one training step
under ``training()``; one thread per process)::

    .venv/bin/python scripts/bench_dap.py

Smaller / other runs::

    .venv/bin/python scripts/bench_dap.py --n-res 64 --n-seq 16 --n-extra 64 --dap 1,2 --modes inference
    .venv/bin/python scripts/bench_dap.py --no-predicted        # skip the (slow) FakeTensorMode estimates

Columns: ``peak`` is the largest activation peak over the P processes (bytes allocated during the
run beyond parameters and inputs; CPU: :func:`alphafold_mem.memory.track_peak`'s storage accounting,
CUDA: allocator statistics); ``pred`` the planner's per-device prediction
(``estimate_breakdown(..., dap=P)``, one simulated device, FakeTensorMode); ``s`` the wall time of
one untracked run (the slowest process); ``comm/block`` the bytes one device receives in the forward
of one Evoformer / extra-MSA block, counted by :data:`alphafold_mem.distributed.COUNTER`, beside
:func:`alphafold_mem.planner.dap.block_comm_bytes` (derived by hand from the layouts); ``step comm``
everything one device receives in the whole run (forward, recomputation, backward). A training step
is forward, the real AF2 loss on ground truth of the right shapes
(:mod:`alphafold_mem.planner.training_loss`, what the planner counts; the outputs are gathered on
every device, so each computes the loss whole) and backward.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
from alphafold_mem.distributed import COUNTER, init_mesh, run_local
from alphafold_mem.memory import track_peak
from alphafold_mem.planner.dap import block_comm_bytes
from alphafold_mem.planner.estimate import estimate_breakdown
from alphafold_mem.planner.training_loss import ground_truth_batch, training_loss
from alphafold_mem.testing import random_features

POLICIES = {"inference": MemoryPolicy.low_memory_inference(), "training": MemoryPolicy.training()}


def _config(args):
    return model_config(
        args.preset,
        **{
            "evoformer.num_blocks": args.evo_blocks,
            "extra_msa.num_blocks": args.extra_blocks,
            "template.enabled": False,
            "num_recycles": 0,
        },
    )


def _block_counter(block, into: dict, key: str):
    """Forward hooks adding the bytes received inside ``block``'s forward to ``into[key]`` (not its
    recomputation by activation checkpointing)."""
    start = {}

    def before(module, inputs):
        start["bytes"] = COUNTER.total()

    def after(module, inputs, output):
        if torch._C._current_graph_task_id() == -1:  # the forward, not its recomputation in backward
            into[key] = into.get(key, 0) + COUNTER.total() - start["bytes"]

    return [block.register_forward_pre_hook(before), block.register_forward_hook(after)]


def _run(model, batch, training: bool) -> None:
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(training):
        out = model(batch)
        if training:  # the real AF2 loss, as the planner counts it (outputs gathered on every device)
            training_loss(model.config, out, batch).backward()


def worker(rank: int, world: int, args, mode: str) -> dict:
    torch.set_num_threads(args.threads)
    training = mode == "training"
    cfg = _config(args)
    torch.manual_seed(0)
    model = AlphaFold(cfg)
    with torch.no_grad():  # AF2 zero-initialises final layers; perturb so no output is trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    dev = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    model.to(dev).train(training)
    batch = random_features(cfg, args.n_res, args.n_seq, args.n_extra)
    batch["seq_mask"][-5:] = 0
    if training:
        batch.update(ground_truth_batch(cfg, args.n_res, args.n_seq))  # read by the training loss only
    batch = {k: v.to(dev) for k, v in batch.items()}
    bind(model, POLICIES[mode], init_mesh(world, dev.type) if world > 1 else None, gather_outputs=training)
    blocks: dict[str, int] = {}
    handles = _block_counter(model.evoformer.blocks[0], blocks, "evoformer") + _block_counter(
        model.extra_msa_stack.blocks[0], blocks, "extra_msa"
    )
    COUNTER.reset()
    start = time.perf_counter()
    with track_peak(dev) as mem:
        _run(model, batch, training)
    tracked = time.perf_counter() - start
    step = COUNTER.total()
    for h in handles:
        h.remove()
    times = []
    for _ in range(args.repeats):
        if world > 1:
            torch.distributed.barrier()
        start = time.perf_counter()
        _run(model, batch, training)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - start)
    return {"peak": mem.peak, "seconds": min(times) if times else tracked, "blocks": blocks, "step": step}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="model_1")
    for flag, default in (
        ("--n-res", 256),
        ("--n-seq", 128),
        ("--n-extra", 1024),
        ("--evo-blocks", 2),
        ("--extra-blocks", 1),
    ):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--dap", default="1,2,4", help="DAP sizes (processes), comma-separated")
    ap.add_argument("--modes", default="inference,training")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="timed runs per row (the fastest is reported; 0: the time of the tracked run)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--no-predicted", dest="predicted", action="store_false", help="skip the planner's estimates")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    cfg = _config(args)
    sizes = [int(p) for p in args.dap.split(",")]
    c = cfg
    print(
        f"# {args.preset} channels: {args.evo_blocks} Evoformer + {args.extra_blocks} extra-MSA blocks, N_res "
        f"{args.n_res}, "
        f"N_seq {args.n_seq}, N_extra {args.n_extra}; {args.threads} thread(s) per process, device {args.device}"
    )
    rep = 4 * (args.n_res**2 * c.c_z + args.n_seq * args.n_res * c.c_m + args.n_extra * args.n_res * c.c_e)
    print(f"# one pair + MSA + extra-MSA representation (fp32): {rep / 2**20:.1f} MiB")
    rows = []
    for mode in args.modes.split(","):
        training = mode == "training"
        base = None
        for p in sizes:
            t0 = time.perf_counter()
            results = run_local(worker, p, args, mode, device_type=args.device, start_method="spawn")
            peak = max(r["peak"] for r in results)
            pred = (
                estimate_breakdown(
                    cfg, POLICIES[mode], args.n_res, args.n_seq, args.n_extra, 0, training, dap=p
                ).activations
                if args.predicted
                else float("nan")
            )
            base = base or peak
            blocks = results[0]["blocks"]
            analytic = {
                stack: block_comm_bytes(cfg, stack, args.n_res, rows, p, inference=not training)
                for stack, rows in (("evoformer", args.n_seq), ("extra_msa", args.n_extra))
            }
            rows.append(
                (
                    mode,
                    p,
                    peak,
                    pred,
                    peak / base,
                    max(r["seconds"] for r in results),
                    blocks,
                    analytic,
                    max(r["step"] for r in results),
                )
            )
            print(f"# {mode} P={p}: peak {peak / 2**20:.1f} MiB, {time.perf_counter() - t0:.0f} s", flush=True)
    print()
    print(
        "| mode | P | peak MiB / device | pred MiB | pred err | peak / P=1 | s | Evoformer block comm MiB "
        "(measured / analytic) | extra-MSA block comm MiB (measured / analytic) | run comm MiB / device |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, p, peak, pred, ratio, sec, blocks, analytic, step in rows:
        comm = " | ".join(
            f"{blocks.get(k, 0) / 2**20:.2f} / {analytic[k] / 2**20:.2f}"
            + (f" ({100 * (blocks.get(k, 0) - analytic[k]) / analytic[k]:+.1f}%)" if analytic[k] else "")
            for k in ("evoformer", "extra_msa")
        )
        err = f"{100 * (pred - peak) / peak:+.1f}%" if pred == pred else "—"
        print(
            f"| {mode} | {p} | {peak / 2**20:.1f} | {pred / 2**20:.1f} | {err} | {ratio:.3f} | {sec:.1f} | {comm} | "
            f"{step / 2**20:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
