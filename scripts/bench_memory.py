"""Memory benchmark: measured and predicted peak, time, and deviation from the reference policy, side
by side in one run on the current device, for inference and for one training step.

Default run (model_1 channel sizes, 2 Evoformer blocks + 1
extra-MSA block, no templates, no recycling, N_res 256, N_seq 128, N_extra 1024, CPU)::

    .venv/bin/python scripts/bench_memory.py

The long-sequence benchmark (model_1 channels, 2 + 1 blocks and the template stack with 4 templates,
N_res 1024, 512 clusters, 5120 extra sequences, bf16-full; about an hour on one CPU thread)::

    .venv/bin/python scripts/bench_memory.py --modes inference --policies low_memory_inference \
        --n-res 1024 --n-seq 512 --n-extra 5120 --templates 4 --precision bf16-full --repeats 0 \
        --allocator default mmap

The README's predicted tables (no measurement, nothing allocated; model_1 inference at N_res
256-10,000 with 512 MSA clusters, 5120 extra sequences, 4 templates; initial_training / finetuning
training steps; the longest N_res within 24 / 40 / 80 GB)::

    .venv/bin/python scripts/bench_memory.py --predict

OpenFold's configuration (model_1_ptm, 48 + 4 blocks, 2 templates, 1 thread)::

    .venv/bin/python scripts/bench_memory.py --modes inference --preset model_1_ptm --evo-blocks 48 \
        --extra-blocks 4 --n-seq 16 --n-extra 64 --templates 2 --n-res 128

Columns: ``counter`` is the activation peak by the storage counter (bytes of tensor storages created
during the run, parameters and inputs excluded: :class:`alphafold_mem.memory.tracking.StorageTracker`);
beside it an independent measure by a different mechanism: on CPU the growth of the peak resident
set (VmHWM) of one step in a fresh subprocess (``benchmarks/standalone/rss.py``), once per ``--allocator``
setting; on CUDA ``torch.cuda.max_memory_allocated``. ``pred`` is
:func:`alphafold_mem.planner.estimate_breakdown`'s activation prediction for the device (FakeTensorMode,
nothing allocated), ``pred err`` its relative difference to the counter (what it predicts);
``planned`` what the planner reserves for the step: ``pred`` plus the device margin's terms that
the measure sees (CPU: the host library caches; CUDA: the cuBLAS workspaces,
:mod:`alphafold_mem.planner.margins`), ``planned / meas.`` its ratio to the largest independent
measure (below 1: the planner promised less than the step took); ``peak / reps``
the largest measure over the bytes of the representations (pair + MSA + extra MSA + one template
pair, in the representations' dtype); ``s`` the median wall time of ``--repeats`` runs (interleaved
across the rows); ``dx`` the max |Δ| of the final atom positions (Å), ``dplddt`` of pLDDT, ``grad``
the largest per-tensor relative gradient error (training) — all against the first policy in the
same run. A training step is forward, the real AF2 loss on ground truth of the right shapes
(:mod:`alphafold_mem.planner.training_loss`) and backward.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import statistics
import sys
import time

import torch

from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
from alphafold_mem.memory import track_peak
from alphafold_mem.memory.tracking import StorageTracker
from alphafold_mem.planner import max_length
from alphafold_mem.planner.estimate import estimate_breakdown
from alphafold_mem.planner.margins import device_margin
from alphafold_mem.planner.training_loss import ground_truth_batch, training_loss
from alphafold_mem.testing import random_features

NO_CKPT = dict(checkpoint_evoformer=0, checkpoint_extra_msa=0, checkpoint_template=0)


POLICIES = {
    "inference": [
        ("reference", MemoryPolicy.reference()),
        ("inplace", MemoryPolicy(inplace=True)),
        ("chunk16", MemoryPolicy(chunk_size=16)),
        ("inplace_outer", MemoryPolicy(inplace=True, outer_product="recompute")),
        ("low_memory_inference", MemoryPolicy.low_memory_inference()),
    ],
    "training": [
        ("reference", MemoryPolicy.reference()),
        ("training_no_ckpt", MemoryPolicy.training(**NO_CKPT)),
        ("training_no_ckpt_outer", MemoryPolicy.training(**NO_CKPT, outer_product="recompute")),
        ("training", MemoryPolicy.training()),
        ("training_outer", MemoryPolicy.training(outer_product="recompute")),
        ("training_update", MemoryPolicy.training(checkpoint_granularity="update")),
    ],
}
DESCRIPTIONS = {
    "inplace": "in place, unchunked",
    "chunk16": "reference attention, chunk 16",
    "training_no_ckpt": "training(), no checkpointing",
    "inplace_outer": "in place, unchunked, outer product in row blocks",
    "training_no_ckpt_outer": "training(), no checkpointing, outer product recomputed",
    "training": "training() (every block checkpointed)",
    "training_outer": "training(), outer product in row blocks, recomputed",
    "training_update": "training(), checkpoint every residual update",
}


def _policies(mode: str, names: list[str] | None, precision: str | None = None) -> list[tuple[str, MemoryPolicy]]:
    rows = POLICIES[mode]
    if names:
        unknown = set(names) - {n for n, _ in rows}
        if unknown:
            raise SystemExit(f"unknown {mode} policies {sorted(unknown)}; valid: {[n for n, _ in rows]}")
        rows = [r for r in rows if r[0] in names]
    return [(n, p.replace(precision=precision) if precision else p) for n, p in rows]


def _step(model, batch, training: bool):
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(training):
        out = model(batch)
        if training:  # the real AF2 loss on ground truth of the right shapes, as the planner counts it
            training_loss(model.config, out, batch).backward()
    return {k: out[k].detach() for k in ("final_atom_positions", "plddt")}


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _grad_error(grads, ref):
    floor = 1e-6 * max(g.norm().item() for g in ref.values())
    errs = [((grads[n] - g).norm() / g.norm()).item() for n, g in ref.items() if g.norm().item() > floor]
    return max(errs)


def predict_table() -> None:
    """Print the README tables of predicted peaks (GB = 10^9 bytes, fp32 parameters, on an accelerator:
    what the policy offloads leaves the count). Inference rows: the reference and
    ``low_memory_inference()`` in fp32, bf16 and bf16-full. Training rows: the reference and
    ``training()`` (per-block checkpointing) in fp32, then ``training()`` with
    ``checkpoint_granularity="update"``; extrapolated from 1- and 2-block fake runs
    (``estimate_breakdown(..., exact=False)``), marked †. Then the longest N_res per budget."""
    t0 = time.perf_counter()
    print(
        "| run | N_res | N_seq | N_extra | N_templ | reference | low-memory (fp32) | low-memory (bf16) "
        "| low-memory (bf16-full) | checkpoint per update |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = [("model_1 inference", "model_1", n, 512, 5120, 4, False) for n in (256, 512, 1024, 2048, 4096, 10000)]
    rows += [
        ("initial_training step", "initial_training", 256, 128, 1024, 4, True),
        ("finetuning step", "finetuning", 384, 512, 5120, 4, True),
    ]
    for label, preset, n, s, e, t, training in rows:
        cfg = model_config(preset)
        if training:
            low = MemoryPolicy.training()
            policies = [MemoryPolicy.reference(), low, None, None, low.replace(checkpoint_granularity="update")]
        else:
            low = MemoryPolicy.low_memory_inference()
            policies = [
                MemoryPolicy.reference(),
                low,
                low.replace(precision="bf16"),
                low.replace(precision="bf16-full"),
                None,
            ]
        cells = []
        for p in policies:
            if p is None:
                cells.append("—")
                continue
            est = estimate_breakdown(cfg, p, n, s, e, t, training, exact=not training, device="cuda")
            cells.append(f"{est.total / 1e9:.1f} GB" + ("†" if training else ""))
        print(f"| {label} | {n} | {s} | {e} | {t} | " + " | ".join(cells) + " |", flush=True)
    print()
    print("| budget | fp32 | bf16 | bf16-full |")
    print("|---|---|---|---|")
    cfg = model_config("model_1")
    for budget in (24, 40, 80):
        cells = [
            max_length(cfg, budget * 10**9, p, 512, 5120, 4, device="cuda")[0] for p in ("fp32", "bf16", "bf16-full")
        ]
        print(f"| {budget} GB | " + " | ".join(f"{n:,}" for n in cells) + " |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


def _build(args):
    """The benchmark's model and batch (the same in the main process and in every worker)."""
    cfg = model_config(
        args.preset,
        **{
            "evoformer.num_blocks": args.evo_blocks,
            "extra_msa.num_blocks": args.extra_blocks,
            "template.enabled": args.templates > 0,
            "num_recycles": args.recycles,
        },
    )
    dev = torch.device(args.device)
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval()
    with torch.no_grad():  # AF2 zero-initialises final layers; perturb so no output is trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.to(dev)
    batch = random_features(cfg, args.n_res, args.n_seq, args.n_extra, n_templ=args.templates)
    batch["seq_mask"][-5:] = 0  # padding, so masks hold both values
    batch.update(ground_truth_batch(cfg, args.n_res, args.n_seq))  # read by the training loss only
    return cfg, dev, model, {k: v.to(dev) for k, v in batch.items()}


def _rep_bytes(cfg, args, policy) -> int:
    """Bytes of one pair + MSA (+ template rows) + extra-MSA (+ one template pair) representation in
    the representations' dtype under ``policy``."""
    size = 2 if policy.precision == "bf16-full" else 4
    rows = args.n_seq + (args.templates if args.templates else 0)
    elems = args.n_res**2 * cfg.c_z + rows * args.n_res * cfg.c_m + args.n_extra * args.n_res * cfg.c_e
    if args.templates:
        elems += args.n_res**2 * cfg.c_t
    return size * elems


def _rss_module():
    """``benchmarks/standalone/rss.py`` (the repository's measurement tree beside ``scripts/``, not installed)."""
    root = str(pathlib.Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.standalone import rss

    return rss


def _worker(args) -> int:
    """One fresh process: warm up at a small size, then the peak RSS growth of one step (JSON line)."""
    import json

    measure_rss = _rss_module().measure_rss

    training = args.worker_mode == "training"
    policy = dict(_policies(args.worker_mode, [args.worker], args.precision))[args.worker]
    cfg, dev, model, batch = _build(args)
    bind(model, policy)
    small = random_features(cfg, 16, 4, 8, n_templ=args.templates)
    small.update(ground_truth_batch(cfg, 16, 4))
    _step(model, {k: v.to(dev) for k, v in small.items()}, training)
    model.zero_grad(set_to_none=True)
    seconds, rss = measure_rss(lambda: _step(model, batch, training))
    print(json.dumps({"seconds": seconds, "rss": rss}))
    return 0


def _rss_in_fresh_process(args, mode: str, name: str, allocator: str) -> float:
    """Peak RSS growth (bytes) of one step in a fresh subprocess (CPU's independent measure)."""
    import json
    import os
    import subprocess

    ALLOCATORS = _rss_module().ALLOCATORS

    argv = [sys.executable, os.path.abspath(__file__), "--worker", name, "--worker-mode", mode]
    for key in (
        "preset",
        "n_res",
        "n_seq",
        "n_extra",
        "evo_blocks",
        "extra_blocks",
        "templates",
        "recycles",
        "threads",
        "precision",
    ):
        value = getattr(args, key)
        if value is not None:
            argv += ["--" + key.replace("_", "-"), str(value)]
    env = {**os.environ, **ALLOCATORS[allocator], "OMP_NUM_THREADS": str(args.threads or 1)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {name} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-3:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["rss"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="model_1")
    ap.add_argument("--n-res", type=int, default=256)
    ap.add_argument("--n-seq", type=int, default=128)
    ap.add_argument("--n-extra", type=int, default=1024)
    ap.add_argument("--evo-blocks", type=int, default=2)
    ap.add_argument("--extra-blocks", type=int, default=1)
    ap.add_argument("--templates", type=int, default=0, help="N_templ (0: template embedding off)")
    ap.add_argument("--recycles", type=int, default=0)
    ap.add_argument(
        "--precision",
        choices=("fp32", "bf16", "bf16-full"),
        default=None,
        help="run every policy in this precision (default: each policy's own, fp32)",
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed runs per row, interleaved across rows (median reported)"
    )
    ap.add_argument("--modes", default="inference,training")
    ap.add_argument(
        "--policies",
        default="",
        help="comma-separated policy names to run (default: all of the mode; "
        "the first one is the reference of the ratio columns)",
    )
    ap.add_argument(
        "--no-predicted",
        dest="predicted",
        action="store_false",
        help="skip the estimate_peak column (slow for deep stacks in training)",
    )
    ap.add_argument(
        "--allocator",
        nargs="+",
        default=["mmap"],
        choices=["default", "mmap"],
        help="CPU: glibc settings of the fresh processes that measure peak RSS (one column each)",
    )
    ap.add_argument("--no-rss", dest="rss", action="store_false", help="CPU: skip the fresh-process RSS columns")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--predict", action="store_true", help="print the README tables of predicted peaks and exit")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (0: leave as is); 1 gives stable timings on shared cores"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-mode", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return _worker(args)
    if args.predict:
        predict_table()
        return 0

    cfg, dev, model, batch = _build(args)
    cuda = dev.type == "cuda"
    print(
        f"# {args.preset}: {args.evo_blocks} Evoformer + {args.extra_blocks} extra-MSA blocks, "
        f"N_res {args.n_res}, N_seq {args.n_seq}, N_extra {args.n_extra}, N_templ {args.templates}, "
        f"recycles {args.recycles}, device {dev}, threads {torch.get_num_threads()}"
    )
    independent = ["CUDA max_memory_allocated"] if cuda else [f"RSS ({a})" for a in args.allocator] if args.rss else []
    reps = "one pair + MSA + extra-MSA representation" + (
        " (+ template rows and one template pair)" if args.templates else ""
    )
    print(f"# {reps} (fp32): {_rep_bytes(cfg, args, MemoryPolicy.reference()) / 2**20:.1f} MiB")
    print(
        "# counter = storage counter (tensor storages created by torch ops); "
        + (f"independent: {', '.join(independent)}" if independent else "no independent measure (--no-rss)")
    )
    print()
    for mode in args.modes.split(","):
        training = mode == "training"
        rows = _policies(mode, args.policies.split(",") if args.policies else None, args.precision)
        results = {}
        ref = None
        for name, policy in rows:  # peaks and deviations, one measured run each
            bind(model, policy)
            model.zero_grad(set_to_none=True)
            tracker = StorageTracker()
            with track_peak(dev) if cuda else contextlib.nullcontext() as cuda_mem, tracker:
                out = _step(model, batch, training)
            grads = _grads(model) if training else None
            others = (
                [cuda_mem.peak]
                if cuda
                else [_rss_in_fresh_process(args, mode, name, a) for a in args.allocator]
                if args.rss
                else []
            )
            pred = (
                estimate_breakdown(
                    cfg, policy, args.n_res, args.n_seq, args.n_extra, args.templates, training, device=dev
                ).activations
                if args.predicted
                else float("nan")
            )
            if ref is None:
                ref = dict(out=out, grads=grads, peak=tracker.peak)
            results[name] = dict(
                peak=tracker.peak,
                others=others,
                pred=pred,
                times=[],
                reps=_rep_bytes(cfg, args, policy),
                dx=(out["final_atom_positions"] - ref["out"]["final_atom_positions"]).abs().max().item(),
                dp=(out["plddt"] - ref["out"]["plddt"]).abs().max().item(),
                grad=_grad_error(grads, ref["grads"]) if training else float("nan"),
            )
            print(
                f"# {mode} {name}: counter {tracker.peak / 2**20:.1f} MiB"
                + "".join(f", {lab} {o / 2**20:.1f} MiB" for lab, o in zip(independent, others)),
                flush=True,
            )
            del out, grads
        for rnd in range(args.repeats):  # timed runs interleaved, so load changes hit every policy alike
            for name, policy in rows:
                bind(model, policy)
                t0 = time.perf_counter()
                _step(model, batch, training)
                if cuda:
                    torch.cuda.synchronize(dev)
                results[name]["times"].append(time.perf_counter() - t0)
                print(f"# {mode} {name}: run {rnd + 1} {results[name]['times'][-1]:.2f} s", flush=True)
        print()
        cols = " | ".join(f"{lab} MiB" for lab in independent)
        print(
            f"| mode | policy | counter MiB | {cols + ' | ' if cols else ''}pred MiB | pred err | planned MiB "
            "| planned / meas. | peak / ref | peak / reps | s (median) | s / ref | dx Å | dplddt | grad rel |"
        )
        print("|---|---|---|" + "---|" * len(independent) + "---|---|---|---|---|---|---|---|---|---|---|")
        ref_sec = statistics.median(results[rows[0][0]]["times"]) if args.repeats else float("nan")
        margin = device_margin(dev.type, 0)
        margin_seen = margin.blas_workspaces + margin.host_caches
        for name, _ in rows:
            r = results[name]
            sec = statistics.median(r["times"]) if r["times"] else float("nan")
            worst = max([r["peak"], *r["others"]])
            err = abs(r["pred"] - r["peak"]) / r["peak"]
            planned = r["pred"] + margin_seen
            ratio = planned / max(r["others"]) if r["others"] else float("nan")
            print(
                f"| {mode} | {DESCRIPTIONS.get(name, name)} | {r['peak'] / 2**20:.1f} | "
                + "".join(f"{o / 2**20:.1f} | " for o in r["others"])
                + f"{r['pred'] / 2**20:.1f} | {100 * err:.1f}% | {planned / 2**20:.1f} | {ratio:.3f} | "
                f"{r['peak'] / ref['peak']:.3f} | "
                f"{worst / r['reps']:.2f} | {sec:.2f} | {sec / ref_sec:.2f} | {r['dx']:.1e} | "
                f"{r['dp']:.1e} | {r['grad']:.1e} |",
                flush=True,
            )
        bind(model, MemoryPolicy.reference())
    return 0


if __name__ == "__main__":
    sys.exit(main())
