"""``alphafold-mem memory-plan``: will it fit? Predicted peak memory per memory policy, computed
without a GPU (:mod:`alphafold_mem.planner`, FakeTensorMode), and the fastest policy that fits.

Examples::

    alphafold-mem memory-plan --preset model_1 --n-res 2048 --max-memory 80GiB
    alphafold-mem memory-plan --preset model_1 --n-res 10000 --max-memory 48GiB --precision bf16-full --json
    alphafold-mem memory-plan --preset model_1 --max-length --max-memory 24GiB --precision bf16-full
    alphafold-mem memory-plan --preset initial_training --training --max-memory 40GiB
    alphafold-mem memory-plan --preset model_1 --n-res 30000 --dap 8 --precision bf16-full
    alphafold-mem memory-plan --chains 400,400,313 --max-memory 24GB
    alphafold-mem memory-plan --fasta complex.fasta --n-seq 512 --max-memory 24GB

A complex (``--chains`` or ``--fasta``, :mod:`.memory_plan_complex`) is planned under the
AF2-Multimer model with its chain features and MSA sizes.

With ``--dap P`` the peak is the one of each of P devices sharing the protein (dynamic axial
parallelism; communication buffers included, parameters and inputs held whole by every device).

The candidates and the search are those of :func:`alphafold_mem.planner.choose` (the chooser that
``chunk_size="auto"`` and predict's pre-flight use): fastest first, the first that fits is
recommended; runs of chunk sizes are bisected, so only some candidates are estimated (``--all``
estimates every one). Exit status 0 when one fits, 1 when none does, 2 for bad options. Sizes are
printed in GiB (2^30 bytes), ``--json`` holds bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..config import PRESETS
from ..units import format_gib, gib_value
from . import memory_plan_complex
from .options import PRECISIONS, add_max_memory, add_no_progress, non_negative_int, positive_int

#: ``--precision``: the policy's precision values.
PRECISION_CHOICES = PRECISIONS


def _sizes(args: argparse.Namespace, config) -> tuple[int, int, int, int]:
    d = config.data
    n_templ = (
        args.n_templ if args.n_templ is not None else (config.template.max_templates if config.template.enabled else 0)
    )
    return (
        d.crop_size if args.n_res is None else args.n_res,
        d.max_msa_clusters if args.n_seq is None else args.n_seq,
        d.max_extra_msa if args.n_extra is None else args.n_extra,
        n_templ,
    )


def _device_and_budget(args: argparse.Namespace) -> tuple[str, int, str]:
    """``(device, budget bytes, a note saying where both came from)``: ``--device`` or the device this
    process runs on (CUDA when available), ``--max-memory`` or that device's free memory (CUDA:
    ``torch.cuda.mem_get_info``; CPU: MemAvailable)."""
    import torch  # heavy: loaded when the command runs, not for --help or a rejected option

    from ..planner import available_memory  # heavy: the planner loads torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    notes = [f"device {device}" + ("" if args.device else " (this machine's; --device to plan for another)")]
    if args.max_memory is not None:
        budget = args.max_memory
        notes.append(f"budget {format_gib(budget, 1)} (--max-memory)")
    elif args.device is not None and device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda on a machine without CUDA: give --max-memory (e.g. --max-memory 80GiB)")
    else:
        budget = available_memory(device)
        what = "free memory of the CUDA device" if device == "cuda" else "available RAM (MemAvailable)"
        notes.append(f"budget {format_gib(budget, 1)} ({what}; --max-memory to set)")
    return device, budget, "; ".join(notes)


def predict_flags(policy) -> str:
    """The ``predict`` options that bind ``policy``: :func:`alphafold_mem.planner.flags.predict_flags`."""
    from ..planner.flags import predict_flags as flags  # heavy: the planner loads torch

    return flags(policy)


def train_flags(policy) -> str:
    """The ``train`` options that bind ``policy``: :func:`alphafold_mem.planner.flags.train_flags`."""
    from ..planner.flags import train_flags as flags  # heavy: the planner loads torch

    return flags(policy)


def _host_check(host: int) -> tuple[str, bool]:
    """A sentence on the host memory that offload needs against this machine's available RAM, and
    whether it is enough."""
    have = _host_available()
    if have is None:
        return f"needs {format_gib(host, 1)} of host memory for offload (this machine's is unknown)", True
    enough = host <= have
    return (
        f"needs {format_gib(host, 1)} of host memory for offload; this machine has {format_gib(have, 1)} available"
        + ("" if enough else " -- not enough: run on a machine with more RAM, or give a larger --max-memory"),
        enough,
    )


class _Progress:
    """One stderr line per estimate: which candidate, then how long it took and its peak."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.count, self.t0 = quiet, 0, 0.0

    def __call__(self, candidate, row) -> None:
        if self.quiet:
            return
        if row is None:
            self.count += 1
            self.t0 = time.perf_counter()
            print(f"memory-plan: estimating {self.count}: {candidate.label} ...", end="", file=sys.stderr, flush=True)
        else:
            print(
                f" {'over budget, >' if row.estimate.lower_bound else ''}{format_gib(row.estimate.total)} "
                f"({time.perf_counter() - self.t0:.1f} s)",
                file=sys.stderr,
                flush=True,
            )


def run(args: argparse.Namespace) -> int:
    """Run ``memory-plan``; returns the exit status."""
    # heavy: the planner loads torch; imported when the command runs, not for --help or a rejected option
    from ..config import model_config
    from ..planner import choose, max_length, policy_candidates
    from ..planner.chooser import cuda_capability
    from ..planner.margins import device_margin

    try:
        device, budget, source = _device_and_budget(args)
        chains, about = memory_plan_complex.resolve(args)
        config = model_config(args.preset)
    except (ValueError, KeyError, RuntimeError) as err:
        print(f"memory-plan: {err}", file=sys.stderr)
        return 2
    if args.max_length and args.training:
        print("memory-plan: --max-length is for inference", file=sys.stderr)
        return 2
    n_res, n_seq, n_extra, n_templ = _sizes(args, config)
    if args.dap < 1 or (args.dap > 1 and (n_res <= args.dap or args.max_length)):
        print(f"memory-plan: --dap {args.dap} needs 1 <= P < N_res (and no --max-length)", file=sys.stderr)
        return 2
    precisions = [args.precision] if args.precision else list(PRECISION_CHOICES)
    # what the device holds besides the tensors (CUDA context, workspaces, NCCL, allocator): "fits"
    # is decided against what remains (planner/margins.py); the context is already out of free memory
    margin = device_margin(
        device, budget, args.dap, cuda_capability() if device == "cuda" else None, args.max_memory is None
    )
    device_budget, budget = budget, max(0, budget - margin.total)
    conf = {
        "preset": args.preset,
        "n_res": n_res,
        "n_seq": n_seq,
        "n_extra": n_extra,
        "n_templ": n_templ,
        "training": bool(args.training),
        "budget_bytes": device_budget,
        "margin": margin.as_dict(),
        "usable_budget_bytes": budget,
        "device": device,
        "dap": args.dap,
        "chains": memory_plan_complex.as_json(chains),
    }
    say = (lambda *a, **k: None) if args.json else print
    for line in about + [memory_plan_complex.monomer_note(config, chains)]:
        if line:
            say(line)
    progress = _Progress(not args.progress)
    if args.progress:
        print(f"memory-plan: {source}", file=sys.stderr, flush=True)
    conf["margin_line"] = f"margin {margin.describe()}; usable {format_gib(budget)} of {format_gib(device_budget, 1)}"
    t0 = time.perf_counter()
    if args.max_length:
        return _max_length(args, config, budget, precisions, conf, say, t0, max_length)
    kind = "training step" if args.training else "inference"
    say(
        f"{args.preset} {kind}: N_res {n_res}, N_seq {n_seq}, N_extra {n_extra}, N_templ {n_templ}; "
        f"usable budget {format_gib(budget)}; device {device}"
        + (f"; peak per device of {args.dap} (DAP)" if args.dap > 1 else "")
    )
    say(conf.pop("margin_line"))
    rows, recommended = [], None
    table = []
    for precision in precisions:
        cands = policy_candidates(
            args.training, precision, max(n_res, n_seq, n_extra), args.max_chunk_size, device=device
        )
        choice = choose(
            config,
            n_res,
            n_seq,
            n_extra,
            n_templ,
            budget,
            cands,
            training=args.training,
            device=device,
            evaluate_all=args.all,
            frugal_last=not args.training,
            dap=args.dap,
            progress=progress,
            chains=chains,
        )
        for row in choice.rows:
            rows.append(row.as_dict(args.dap))
            table.append(row)
        if choice.chosen is not None and recommended is None:
            recommended = choice.chosen
        if recommended is not None and not args.all:
            break
    seconds = time.perf_counter() - t0
    say(f"{'setting':52s} {'precision':>9s} {'peak GiB':>9s} {'host GiB':>8s} {'fits':>5s}")
    for row in table:
        say(
            f"{row.candidate.label:52s} {row.candidate.policy.precision:>9s} {_peak_cell(row.estimate)} "
            f"{gib_value(row.estimate.host):>8s} {'yes' if row.fits else 'no':>5s}"
        )
    if any(row.estimate.lower_bound for row in table):
        say("(>: the estimate stopped once past the budget; --all for every peak)")
    flags = None
    if recommended is not None:
        policy = recommended.candidate.policy
        flags = ("train " + train_flags(policy)) if args.training else ("predict " + predict_flags(policy))
        if args.dap > 1:  # the peaks are per device of a DAP group: the run needs the same group
            flags += f" --dap {args.dap}" + (f" --devices {args.dap}" if args.training else "")
        if chains is not None and not args.training:
            flags += f" --preset {args.preset}"
    largest = None  # a complex that fits under no policy: the largest like it that would (and its flags)
    if recommended is None and chains is not None and not args.training:
        if args.progress:
            print("memory-plan: searching the largest complex like it that fits ...", file=sys.stderr, flush=True)
        largest = memory_plan_complex.largest(args, config, chains, conf, budget, precisions[-1])
    host_note, host_ok = (
        _host_check(recommended.estimate.host) if recommended and recommended.estimate.host else ("", True)
    )
    if args.json:
        rec = None
        if recommended is not None:
            rec = {**recommended.as_dict(args.dap), "flags": flags, "host_memory_enough": host_ok}
        conf["host_available_bytes"] = _host_available()
        out = {"config": conf, "rows": rows, "recommended": rec}
        if chains is not None:
            out["largest"] = largest[1] if largest else None
        print(json.dumps(out))
    elif recommended is None:
        low = min(rows, key=lambda r: (r["peak_lower_bound"], r["peak_bytes"]))
        need = ("at least " if low["peak_lower_bound"] else "") + format_gib(low["peak_bytes"])
        print(
            f"nothing fits: the smallest predicted need is {need}, the budget {format_gib(budget)}; "
            f"reduce N_res (crop), N_seq or N_extra, or use a larger device (planned in {seconds:.1f} s)"
        )
        if largest:
            print(largest[0])
    else:
        print(
            f"recommended (fastest that fits): {recommended.candidate.label}, {recommended.candidate.policy.precision}"
            + (f"; {host_note}" if host_note else "")
            + f" (planned in {seconds:.1f} s)"
        )
        print(f"flags: alphafold-mem {flags}")
        if args.verbose:
            est = recommended.estimate
            print(
                f"  = parameters {format_gib(est.parameters)} + inputs {format_gib(est.inputs)} + activations "
                f"{format_gib(est.activations)} on the device" + (f"; host {format_gib(est.host)}" if est.host else "")
            )
            print(repr(recommended.candidate.policy))
    return 0 if recommended is not None else 1


def _peak_cell(est) -> str:
    """The table's peak column in GiB, ``>`` before a lower bound (the estimate stopped past the budget)."""
    return f"{'>' if est.lower_bound else ''}{gib_value(est.total)}".rjust(9)


def _host_available() -> int | None:
    """This machine's available RAM in bytes, ``None`` where it cannot be read."""
    from ..planner import available_memory  # heavy: the planner loads torch

    try:
        return available_memory("cpu")
    except RuntimeError:
        return None


def _max_length(args, config, budget, precisions, conf, say, t0, max_length) -> int:
    n_seq, n_extra, n_templ = conf["n_seq"], conf["n_extra"], conf["n_templ"]
    say(
        f"{args.preset} inference: the largest N_res within {format_gib(budget, 1)} (N_seq {n_seq}, N_extra {n_extra}, "
        f"N_templ {n_templ}; the most frugal setting; device {conf['device']})"
    )
    say(conf.pop("margin_line"))
    rows, best = [], None
    for precision in precisions:
        if args.progress:
            print(f"memory-plan: bisecting N_res for {precision} ...", file=sys.stderr, flush=True)
        n, row = max_length(config, budget, precision, n_seq, n_extra, n_templ, device=conf["device"])
        say(
            f"  {precision:9s} N_res {n}"
            + (
                f" ({format_gib(row.estimate.total)}, host {format_gib(row.estimate.host)}; {row.candidate.label})"
                if row
                else ""
            )
        )
        if row is not None:
            rows.append({**row.as_dict(), "n_res": n})
            best = best if best is not None and best["n_res"] >= n else rows[-1]
    if args.json:
        print(
            json.dumps(
                {
                    "config": {
                        **conf,
                        "n_res": best["n_res"] if best else 0,
                        "max_length": True,
                        "host_available_bytes": _host_available(),
                    },
                    "rows": rows,
                    "recommended": best,
                }
            )
        )
    else:
        if best is not None and best["host_bytes"]:
            say(f"  {_host_check(best['host_bytes'])[0]}")
        print(f"({time.perf_counter() - t0:.1f} s)")
    return 0 if best is not None else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``memory-plan`` subcommand."""
    p = sub.add_parser(
        "memory-plan",
        help="predict peak memory per memory policy and recommend one that fits",
        description="Predict the peak memory of inference (or a training step) for memory-policy candidates "
        "without allocating it (FakeTensorMode), and recommend the fastest one that fits the budget.",
        epilog="Sizes default to the preset's data config (crop size, MSA clusters, extra MSA, max templates). "
        "Exit status 0 if a policy fits, 1 if none does, 2 for bad options.",
    )
    p.add_argument(
        "--preset",
        default=None,
        choices=PRESETS,
        metavar="NAME",
        help=f"model config preset (default: {memory_plan_complex.CHAIN_PRESET}; "
        f"{memory_plan_complex.COMPLEX_PRESET} for a complex)",
    )
    memory_plan_complex.add_options(p)
    p.add_argument("--n-res", type=positive_int, default=None, help="N_res (default: the preset's crop size)")
    p.add_argument("--n-seq", type=positive_int, default=None, help="N_seq, MSA clusters (default: preset)")
    p.add_argument("--n-extra", type=positive_int, default=None, help="N_extra, extra MSA sequences (default: preset)")
    p.add_argument("--n-templ", type=non_negative_int, default=None, help="N_templ (default: preset's max templates)")
    add_max_memory(
        p,
        "default: the free memory of --device on this machine (torch.cuda.mem_get_info on CUDA, available RAM on CPU)",
        old=("--budget",),
    )
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default=None,
        help="only this precision (default: fp32, then bf16, then bf16-full)",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="cuda: an accelerator (host offload frees device memory); cpu: offload is a no-op "
        "(default: cuda when this machine has it, else cpu)",
    )
    p.add_argument(
        "--max-chunk-size", type=positive_int, default=None, help="largest chunk size considered (default 256)"
    )
    p.add_argument("--training", action="store_true", help="a training step (forward + backward) instead of inference")
    p.add_argument(
        "--dap",
        type=positive_int,
        default=1,
        metavar="P",
        help="the peak of each of P devices sharing the protein (dynamic axial parallelism; default: 1)",
    )
    p.add_argument(
        "--max-length",
        action="store_true",
        help="print the largest N_res that fits --max-memory under the most frugal policy",
    )
    p.add_argument("--all", action="store_true", help="estimate every candidate, not just what the search needs")
    p.add_argument("--json", action="store_true", help="print one JSON object (config, rows, recommended)")
    add_no_progress(p, "no progress lines on stderr", old=("--quiet", "-q"))
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also print the recommended estimate's parts (parameters, inputs, activations, host) and its MemoryPolicy",
    )
    p.set_defaults(func=run)


__all__ = ["PRECISION_CHOICES", "predict_flags", "register", "run", "train_flags"]
