"""Side by side with OpenFold: time and memory of the same forward (or training step), same inputs,
same measure, each run in a fresh process.

OpenFold is imported from a checkout the user names (``--openfold-src``; nothing of it is copied
here). It is not pip-installable and its CUDA extension cannot be built on a CPU machine; its one
compiled import on the CPU path, ``attn_core_inplace_cuda`` (an in-place softmax), gets a
pure-PyTorch stand-in written to a temporary directory at run time. OpenFold needs ``ml_collections``
and ``dm-tree``: give a Python that has them with ``--openfold-python`` (e.g. a venv with
``pip install torch==2.13.0 numpy ml-collections dm-tree biopython scipy modelcif``).

Measure, the same for both sides: one forward (inference: ``eval()`` + ``no_grad``; training:
``train()``, forward + backward of a proxy loss) in a fresh subprocess with 1 torch thread, after
one warm-up call at a small size; ``seconds`` is its wall time, ``cpu_s`` the process's CPU time
(user + system) during it; ``rss_mb`` is the growth of the
process's resident set during it (``/proc/self/clear_refs`` reset to the current RSS, then
``VmHWM`` minus ``VmRSS`` before), in MB (10^6 bytes). For our side ``counter_mb`` is the storage
counter of :func:`alphafold_mem.memory.track_peak` in a second run (a different mechanism: tensor
storages created by torch ops, no allocator caching). ``--allocator mmap`` runs both sides with
``MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0`` (glibc returns freed large blocks at
once); ``default`` leaves glibc's dynamic threshold, which keeps freed blocks in the heap.

Settings: ``unchunked`` (OpenFold ``globals.chunk_size=None``; ours ``MemoryPolicy(inplace=True)``:
OpenFold's no-grad forward updates in place, ours then too), ``chunk4`` (chunk size 4 on both sides,
in place; OpenFold's chunk-size tuning off), ``low_memory`` (OpenFold ``globals.use_lma=True``; ours
``MemoryPolicy.low_memory_inference()``); in training both sides checkpoint every block (OpenFold
``globals.blocks_per_ckpt=1``; ours ``MemoryPolicy.training()`` and ``.reference(checkpoint_*=1)``
for ``unchunked``).

Example (model_1_ptm, 48 + 4 blocks, N_seq 16, N_extra 64, 2 templates; several minutes per row)::

    python scripts/compare_openfold.py --openfold-src ../openfold --openfold-python ../of_venv/bin/python \\
        --n-res 64 128 --settings unchunked chunk4 low_memory --allocator default mmap
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import _measure  # noqa: E402  (scripts/_measure.py: RSS growth, allocator settings)

SETTINGS = ("unchunked", "chunk4", "low_memory")
ALLOCATORS = _measure.ALLOCATORS
STAND_IN = '''"""Pure-PyTorch stand-in for OpenFold's compiled in-place softmax (written by compare_openfold.py)."""
import torch


def forward_(x, rows, cols):
    x.copy_(torch.softmax(x, -1))


def backward_(attn, grad_output, v, rows, cols, head_dim):
    """In place: the softmax probabilities ``attn`` become the gradient of the logits, given the
    gradient of ``attn @ v`` (what OpenFold's kernel computes in its training path without LMA)."""
    d_attn = torch.matmul(grad_output, v.transpose(-1, -2))
    attn.copy_(attn * (d_attn - (attn * d_attn).sum(-1, keepdim=True)))
'''


# ------------------------------------------------------------------------------------------------
# workers (run in a fresh process each)

def _timed(fn) -> dict:
    """Wall seconds, CPU seconds (user + system of this process: steadier than wall time when
    other jobs share the cores) and RSS growth in MB of ``fn()``
    (:func:`alphafold_mem.memory.host.rss_growth`)."""
    with _measure.host_module().rss_growth() as rss:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_s": cpu, "rss_mb": rss.bytes / 1e6}


def _proxy_loss(out: dict):
    return sum(out[k].float().pow(2).mean() for k in ("final_atom_positions", "distogram_logits") if k in out)


def _batch(path: str, torch):
    import numpy as np

    data = np.load(path)
    return {k: torch.from_numpy(data[k]) for k in data.files}


def _run_model(model, batch, training: bool, torch, call):
    model.train(training)
    with torch.set_grad_enabled(training):
        out = call(model, batch)
        if training:
            _proxy_loss(out).backward()


def worker_openfold(args, torch) -> dict:
    sys.path.insert(0, args.stand_in_dir)
    sys.path.insert(0, os.path.abspath(args.openfold_src))
    from openfold.config import model_config
    from openfold.model.model import AlphaFold

    c = model_config(args.preset, train=args.mode == "training")
    c.globals.chunk_size = 4 if args.setting == "chunk4" else None
    c.globals.use_lma = args.setting == "low_memory"
    c.globals.blocks_per_ckpt = 1 if args.mode == "training" else None
    for stack in (c.model.evoformer_stack, c.model.extra_msa.extra_msa_stack, c.model.template.template_pair_stack):
        stack.tune_chunk_size = False
    c.model.evoformer_stack.no_blocks = args.evo_blocks
    c.model.extra_msa.extra_msa_stack.no_blocks = args.extra_blocks
    torch.manual_seed(0)
    model = AlphaFold(c)
    batch = _batch(args.features, torch)
    small = _batch(args.warmup_features, torch)
    _run_model(model, small, args.mode == "training", torch, lambda m, b: m(b))
    model.zero_grad(set_to_none=True)
    return _timed(lambda: _run_model(model, batch, args.mode == "training", torch, lambda m, b: m(b)))


def worker_ours(args, torch) -> dict:
    from alphafold_mem import AlphaFold, MemoryPolicy, apply_memory_policy, model_config
    from alphafold_mem.memory import track_peak

    cfg = model_config(args.preset, **{"evoformer.num_blocks": args.evo_blocks,
                                       "extra_msa.num_blocks": args.extra_blocks})
    training = args.mode == "training"
    if training:
        policy = {"unchunked": MemoryPolicy.reference(checkpoint_evoformer=1, checkpoint_extra_msa=1,
                                                      checkpoint_template=1),
                  "chunk4": MemoryPolicy.training(chunk_size=4), "low_memory": MemoryPolicy.training()}[args.setting]
    else:  # OpenFold's no-grad forward updates in place; so do these
        policy = {"unchunked": MemoryPolicy(inplace=True), "chunk4": MemoryPolicy(chunk_size=4, inplace=True),
                  "low_memory": MemoryPolicy.low_memory_inference()}[args.setting]
    torch.manual_seed(0)
    model = apply_memory_policy(AlphaFold(cfg), policy)
    batch = _batch(args.features, torch)
    small = _batch(args.warmup_features, torch)
    call = lambda m, b: m(b, recycle_dim=-1)  # noqa: E731
    _run_model(model, small, training, torch, call)
    model.zero_grad(set_to_none=True)
    result = _timed(lambda: _run_model(model, batch, training, torch, call))
    model.zero_grad(set_to_none=True)
    with track_peak() as mem:
        _run_model(model, batch, training, torch, call)
    return {**result, "counter_mb": mem.peak / 1e6}


# ------------------------------------------------------------------------------------------------
# the driver

def write_features(path: str, n_res: int, n_seq: int, n_extra: int, n_templ: int) -> None:
    """Random features of the given sizes in OpenFold's layout (trailing recycling dim of 1)."""
    import numpy as np
    import torch

    from alphafold_mem import model_config
    from alphafold_mem.geometry import all_atom
    from alphafold_mem.testing import random_features

    batch = random_features(model_config("model_1_ptm"), n_res, n_seq, n_extra, n_templ=n_templ, seed=0)
    batch.update({k: v.to(torch.float32) if v.is_floating_point() else v
                  for k, v in all_atom.make_atom14_masks(batch["aatype"]).items()})
    np.savez(path, **{k: v.unsqueeze(-1).numpy() for k, v in batch.items()})


def run_one(args, side: str, n_res: int, setting: str, allocator: str, tmp: str) -> dict:
    features = os.path.join(tmp, f"features_{n_res}.npz")
    if not os.path.exists(features):
        write_features(features, n_res, args.n_seq, args.n_extra, args.templates)
    python = args.openfold_python if side == "openfold" else sys.executable
    cmd = [python, os.path.abspath(__file__), "--worker", side, "--n-res", str(n_res), "--setting", setting,
           "--features", features, "--warmup-features", os.path.join(tmp, "warmup.npz"), "--preset", args.preset,
           "--evo-blocks", str(args.evo_blocks), "--extra-blocks", str(args.extra_blocks), "--mode", args.mode,
           "--stand-in-dir", tmp, "--openfold-src", args.openfold_src or ""]
    env = {**os.environ, **ALLOCATORS[allocator], "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "scripts")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--openfold-src", help="an OpenFold checkout (the directory holding openfold/)")
    ap.add_argument("--openfold-python", default=sys.executable, help="a Python with OpenFold's dependencies")
    ap.add_argument("--preset", default="model_1_ptm")
    ap.add_argument("--n-res", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--n-extra", type=int, default=64)
    ap.add_argument("--templates", type=int, default=2)
    ap.add_argument("--evo-blocks", type=int, default=48)
    ap.add_argument("--extra-blocks", type=int, default=4)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    ap.add_argument("--allocator", nargs="+", default=["default", "mmap"], choices=list(ALLOCATORS))
    ap.add_argument("--mode", default="inference", choices=["inference", "training"])
    ap.add_argument("--repeats", type=int, default=1, help="fresh processes per cell (median reported)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--worker", choices=["ours", "openfold"], help=argparse.SUPPRESS)
    ap.add_argument("--setting", help=argparse.SUPPRESS)
    ap.add_argument("--features", help=argparse.SUPPRESS)
    ap.add_argument("--warmup-features", help=argparse.SUPPRESS)
    ap.add_argument("--stand-in-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        import torch

        torch.set_num_threads(1)
        result = (worker_openfold if args.worker == "openfold" else worker_ours)(args, torch)
        print(json.dumps(result))
        return 0

    sides = ["ours"] + (["openfold"] if args.openfold_src else [])
    if not args.openfold_src:
        print("# no --openfold-src: our side only", file=sys.stderr)
    rows = []
    print(f"# {args.preset}: {args.evo_blocks} Evoformer + {args.extra_blocks} extra-MSA blocks, N_seq {args.n_seq}, "
          f"N_extra {args.n_extra}, N_templ {args.templates}, {args.mode}, 1 thread, fresh process per run, "
          f"median of {args.repeats}")
    print("| N_res | allocator | setting | OpenFold s | ours s | OpenFold CPU s | ours CPU s | OpenFold RSS MB "
          "| ours RSS MB | ours counter MB | ours/OpenFold s | ours/OpenFold CPU s | ours/OpenFold RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        pathlib.Path(tmp, "attn_core_inplace_cuda.py").write_text(STAND_IN)
        write_features(os.path.join(tmp, "warmup.npz"), 16, 4, 8, args.templates)
        for n_res in args.n_res:
            for allocator in args.allocator:
                for setting in args.settings:
                    cell = {"n_res": n_res, "allocator": allocator, "setting": setting}
                    for side in sides:
                        runs = [run_one(args, side, n_res, setting, allocator, tmp) for _ in range(args.repeats)]
                        errors = [r["error"] for r in runs if "error" in r]
                        if errors:
                            cell[side] = {"error": errors[0]}
                            continue
                        cell[side] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                    rows.append(cell)
                    print(_row(cell), flush=True)
    if args.json:
        from alphafold_mem.io import atomic_write

        with atomic_write(args.json) as tmp:
            pathlib.Path(tmp).write_text(json.dumps(rows, indent=1))
    return 0


def _row(cell: dict) -> str:
    of, ours = cell.get("openfold", {}), cell.get("ours", {})

    def f(d, k, spec=".1f"):
        if "error" in d:
            return f"error: {d['error'][:60]}"
        return format(d[k], spec) if k in d else "—"

    def ratio(k):
        return f"{ours[k] / of[k]:.2f}" if k in of and k in ours and of[k] > 0 else "—"

    return (f"| {cell['n_res']} | {cell['allocator']} | {cell['setting']} | {f(of, 'seconds')} | {f(ours, 'seconds')} "
            f"| {f(of, 'cpu_s')} | {f(ours, 'cpu_s')} | {f(of, 'rss_mb', '.0f')} | {f(ours, 'rss_mb', '.0f')} "
            f"| {f(ours, 'counter_mb', '.0f')} | {ratio('seconds')} | {ratio('cpu_s')} | {ratio('rss_mb')} |")


if __name__ == "__main__":
    sys.exit(main())
