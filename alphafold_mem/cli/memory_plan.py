"""``alphafold-mem memory-plan``: will it fit? Predicted peak memory for each memory-policy preset and
chunk size, computed without a GPU (:func:`alphafold_mem.planner.estimate_peak`, FakeTensorMode).

Examples::

    alphafold-mem memory-plan --preset model_1 --n-res 2048 --budget 80GB
    alphafold-mem memory-plan --preset model_1_ptm --n-res 3000 --budget 40GB --n-seq 512 --n-extra 1024
    alphafold-mem memory-plan --preset initial_training --training --budget 40GB
    alphafold-mem memory-plan --preset model_1 --n-res 30000 --dap 8 --precision bf16-full

With ``--dap P`` the peak is the one of each of P devices sharing the protein (dynamic axial
parallelism; communication buffers included, parameters and inputs held whole by every device).

Candidates are listed from the cheapest in time to the most expensive (a fixed cost order: larger
chunks before smaller, fp32 before bf16, no checkpointing before checkpointing); the recommendation
is the first that fits. Exit status 0 when one fits, 1 when none does, 2 for bad options.
"""

from __future__ import annotations

import argparse
import re
import sys
import time


def parse_bytes(text: str) -> int:
    """``"80GB"``, ``"40 GiB"``, ``"512MB"``, ``"1e9"`` -> bytes (GB = 10^9, GiB = 2^30)."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", text)
    if not m:
        raise ValueError(f"cannot parse a memory size from '{text}' (examples: 80GB, 40GiB, 512MB)")
    value, unit, binary = float(m.group(1)), m.group(2).upper(), m.group(3)
    power = " KMGT".index(unit) if unit else 0
    return int(value * (1024 if binary else 1000) ** power)


def candidates(training: bool, n_max: int, precision: str | None = None) -> list[tuple[str, "object"]]:
    """``(label, MemoryPolicy)`` pairs in increasing time cost (``precision``: only that precision)."""
    from ..memory import MemoryPolicy

    chunks = [c for c in (256, 64, 16, 4, 1) if c < n_max]
    if training:
        no_ckpt = dict(checkpoint_evoformer=0, checkpoint_extra_msa=0, checkpoint_template=0)
        rows = [("reference", MemoryPolicy.reference()),
                ("training, no checkpointing", MemoryPolicy.training(**no_ckpt)),
                ("training (checkpoint per block)", MemoryPolicy.training()),
                ("training, checkpoint per update", MemoryPolicy.training(checkpoint_granularity="update"))]
        rows += [(f"training, chunk {c}", MemoryPolicy.training(chunk_size=c)) for c in chunks]
    else:
        rows = [("reference", MemoryPolicy.reference()),
                ("low_memory_inference, unchunked", MemoryPolicy.low_memory_inference(chunk_size=None))]
        rows += [(f"low_memory_inference, chunk {c}", MemoryPolicy.low_memory_inference(chunk_size=c)) for c in chunks]
    rows += [(f"{label}, {p}", policy.replace(precision=p)) for p in ("bf16", "bf16-full") for label, policy in rows[1:]]
    if precision is not None:
        rows = [(label, policy) for label, policy in rows if policy.precision == precision]
    return rows


def run(args: argparse.Namespace) -> int:
    from ..config import model_config
    from ..planner.estimate import estimate_breakdown

    try:
        budget = parse_bytes(args.budget)
        config = model_config(args.preset)
    except (ValueError, KeyError) as err:
        print(f"memory-plan: {err}", file=sys.stderr)
        return 2
    d = config.data
    n_res = args.n_res or d.crop_size
    n_seq = args.n_seq or d.max_msa_clusters
    n_extra = args.n_extra or d.max_extra_msa
    n_templ = args.n_templ if args.n_templ is not None else (config.template.max_templates if config.template.enabled else 0)
    if args.dap < 1 or (args.dap > 1 and n_res <= args.dap):
        print(f"memory-plan: --dap {args.dap} needs 1 <= P < N_res", file=sys.stderr)
        return 2
    kind = "training step" if args.training else "inference"
    per = f", per device of {args.dap} (DAP)" if args.dap > 1 else ""
    print(f"{args.preset} {kind}: N_res {n_res}, N_seq {n_seq}, N_extra {n_extra}, N_templ {n_templ}; "
          f"budget {budget / 1e9:.1f} GB{per}")
    print(f"{'policy':44s} {'peak GB':>9s} {'fits':>5s}")
    best = None
    for label, policy in candidates(args.training, max(n_res, n_seq, n_extra), args.precision):
        t0 = time.perf_counter()
        est = estimate_breakdown(config, policy, n_res, n_seq, n_extra, n_templ, training=args.training,
                                 dap=args.dap)
        fits = est.total <= budget
        print(f"{label:44s} {est.total / 1e9:9.2f} {'yes' if fits else 'no':>5s}"
              + (f"   ({time.perf_counter() - t0:.0f} s to estimate)" if args.verbose else ""), flush=True)
        if fits and best is None:
            best = (label, policy)
            if not args.all:
                break
    if best is None:
        print("nothing fits: reduce N_res (crop), N_seq or N_extra, or use a larger device")
        return 1
    print(f"recommended (cheapest in time that fits): {best[0]}: {best[1]!r}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``memory-plan`` subcommand."""
    p = sub.add_parser(
        "memory-plan", help="predict peak memory per memory policy and recommend one that fits",
        description="Predict the peak memory of inference (or a training step) for each memory-policy "
                    "preset and chunk size without allocating it (FakeTensorMode), and recommend the "
                    "cheapest-in-time policy that fits the budget.",
        epilog="Sizes default to the preset's data config (crop size, MSA clusters, extra MSA, max templates). "
               "Exit status 0 if a policy fits, 1 if none does, 2 for bad options.")
    p.add_argument("--preset", default="model_1", help="model config preset (default: model_1)")
    p.add_argument("--n-res", type=int, default=None, help="N_res (default: the preset's crop size)")
    p.add_argument("--n-seq", type=int, default=None, help="N_seq, MSA clusters (default: preset)")
    p.add_argument("--n-extra", type=int, default=None, help="N_extra, extra MSA sequences (default: preset)")
    p.add_argument("--n-templ", type=int, default=None, help="N_templ (default: preset's max templates)")
    p.add_argument("--budget", default="80GB", help="device memory, e.g. 80GB, 40GiB (default: 80GB)")
    p.add_argument("--training", action="store_true", help="a training step (forward + backward) instead of inference")
    p.add_argument("--dap", type=int, default=1, metavar="P",
                   help="the peak of each of P devices sharing the protein (dynamic axial parallelism; default: 1)")
    p.add_argument("--precision", choices=("fp32", "bf16", "bf16-full"), default=None,
                   help="only policies of this precision (default: fp32, then bf16, then bf16-full)")
    p.add_argument("--all", action="store_true", help="estimate every candidate, not just up to the first that fits")
    p.add_argument("--verbose", "-v", action="store_true", help="show how long each estimate took")
    p.set_defaults(func=run)


__all__ = ["candidates", "parse_bytes", "register", "run"]
