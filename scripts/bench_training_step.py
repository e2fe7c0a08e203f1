"""One real training step (forward, the AF2 loss on ground truth, backward) measured four ways beside
the planner's prediction, each configuration in fresh processes.

Usage (from the repository root; one thread, several minutes per model_1 row)::

    python scripts/bench_training_step.py [--configs demo model1_2blocks] [--policies training reference]
        [--allocators default remedy trim] [--json FILE]

Configurations: ``demo`` (the demo preset at its training sizes: crop 96, 32 MSA clusters, 128
extra sequences) and ``model1_2blocks`` (model_1 channel sizes, 2 Evoformer + 1 extra-MSA block, no
templates, N_res 128, N_seq 64, N_extra 512). One recycling iteration (the last one, the only one
with autograd, sets the step's peak).

Columns (GiB = 2^30 bytes; "act" = bytes allocated during the step above what existed before it,
i.e. without parameters and inputs):

* ``pred``: ``estimate_breakdown(..., training=True).activations`` (what ``memory-plan --training``
  adds to parameters and inputs; FakeTensorMode, nothing allocated);
* ``counter``: :func:`alphafold_mem.memory.track_peak` (live tensor storages, the README's measure);
* ``malloc``: :class:`alphafold_mem.memory.host.MallocPeak` (glibc's bytes in use, sampled after
  every op: an independent accounting that also sees kernel buffers and graph nodes);
* ``RSS``: growth of the peak resident set during the step (what the machine sees), in a fresh
  process after a warm-up step at N_res 16, under the given allocator (``default``: glibc as is;
  ``remedy``: :func:`alphafold_mem.memory.host.apply_malloc_remedy`, the CLI's ``--malloc release``;
  ``trim``: :func:`alphafold_mem.memory.host.start_malloc_trim`, the CLI's default ``--malloc trim``);
* ``s``: wall time of that step.

``pred err`` = pred / counter - 1 and pred / malloc - 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CONFIGS = {
    "demo": ("demo", {}, 96, 32, 128),
    "model1_2blocks": (
        "model_1",
        {"evoformer.num_blocks": 2, "extra_msa.num_blocks": 1, "template.enabled": False},
        128,
        64,
        512,
    ),
}
POLICIES = ("training", "reference")


def _setup(config_name: str, policy_name: str):
    import torch

    from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
    from alphafold_mem.planner.training_loss import ground_truth_batch
    from alphafold_mem.testing import random_features

    preset, overrides, n_res, n_seq, n_extra = CONFIGS[config_name]
    cfg = model_config(preset, **{**overrides, "num_recycles": 0})
    policy = getattr(MemoryPolicy, policy_name)()
    torch.manual_seed(0)
    model = bind(AlphaFold(cfg), policy).train()

    def batch(n, s, e):
        b = random_features(cfg, n, s, e)
        b.update(ground_truth_batch(cfg, n, s))
        return b

    return cfg, policy, model, batch, (n_res, n_seq, n_extra)


def worker(args) -> dict:
    """Runs in a fresh process: RSS-measured step (after a small warm-up), then malloc and counter."""
    import time

    from alphafold_mem.memory.host import MallocPeak, apply_malloc_setting, rss_growth

    remedy = apply_malloc_setting({"remedy": "release", "trim": "trim"}.get(args.allocator, "default"))
    import torch

    from alphafold_mem.memory import track_peak
    from alphafold_mem.planner.training_loss import training_loss

    torch.set_num_threads(1)
    cfg, _, model, make_batch, sizes = _setup(args.config, args.policy)

    def step(b):
        model.zero_grad(set_to_none=True)
        out = model(b)
        training_loss(cfg, out, b).backward()
        del out

    step(make_batch(16, 4, 8))  # warm-up: libraries, thread pools, caches
    batch = make_batch(*sizes)
    model.zero_grad(set_to_none=True)
    with rss_growth() as rss:
        t0 = time.perf_counter()
        step(batch)
        seconds = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    with MallocPeak() as mall:
        step(batch)
    model.zero_grad(set_to_none=True)
    with track_peak() as mem:
        step(batch)
    return {"rss": rss.bytes, "seconds": seconds, "malloc": mall.peak, "counter": mem.peak, "remedy": remedy}


def predict(config_name: str, policy_name: str) -> dict:
    from alphafold_mem.planner.estimate import estimate_breakdown

    _, _, n_res, n_seq, n_extra = CONFIGS[config_name]
    cfg, policy, _, _, _ = _setup(config_name, policy_name)
    est = estimate_breakdown(cfg, policy, n_res, n_seq, n_extra, 0, training=True)
    return {"pred": est.activations, "pred_total": est.total, "params": est.parameters, "inputs": est.inputs}


def run_worker(config: str, policy: str, allocator: str, timeout: float) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    }
    for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        env.pop(key, None)
    proc = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            "--configs",
            config,
            "--policies",
            policy,
            "--allocators",
            allocator,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--policies", nargs="+", default=["training"], choices=list(POLICIES))
    ap.add_argument("--allocators", nargs="+", default=["default", "remedy"], choices=["default", "remedy", "trim"])
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.config, args.policy, args.allocator = args.configs[0], args.policies[0], args.allocators[0]
        print(json.dumps(worker(args)))
        return 0
    import torch

    torch.set_num_threads(1)
    print(
        "| config | policy | allocator | pred GiB | counter GiB | malloc GiB | RSS GiB | pred/counter - 1 "
        "| pred/malloc - 1 | RSS/counter | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for config in args.configs:
        for policy in args.policies:
            p = predict(config, policy)
            for allocator in args.allocators:
                m = run_worker(config, policy, allocator, args.timeout)
                row = {"config": config, "policy": policy, "allocator": allocator, **p, **m}
                rows.append(row)
                print(
                    f"| {config} | {policy} | {allocator} | {p['pred'] / 2**30:.4f} | {m['counter'] / 2**30:.4f} | "
                    f"{m['malloc'] / 2**30:.4f} | {m['rss'] / 2**30:.4f} | "
                    f"{100 * (p['pred'] / m['counter'] - 1):+.2f}% | "
                    f"{100 * (p['pred'] / m['malloc'] - 1):+.2f}% | {m['rss'] / m['counter']:.2f} | "
                    f"{m['seconds']:.1f} |",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
