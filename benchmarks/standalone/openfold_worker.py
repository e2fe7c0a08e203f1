"""One forward (or training step) of OpenFold's model or ours in a fresh process: wall time, CPU time
and peak-RSS growth (and, for ours, the storage counter in a second run). Started by
:mod:`benchmarks.openfold` (for ``scripts/compare_openfold.py``) as
``PYTHON openfold_worker.py --side openfold|ours ...``; prints one JSON line. ``--side both``
(OpenFold's Python, our package on its path) builds both models in one process and times them
alternately ``--alternations`` times (time only).

OpenFold is imported from the checkout ``--openfold-src`` names (nothing of it is copied). Its one
compiled import on the CPU path, ``attn_core_inplace_cuda`` (an in-place softmax), gets the
pure-PyTorch stand-in :data:`STAND_IN`, written by the driver to ``--stand-in-dir``.

Settings (``--setting``): ``unchunked`` (OpenFold ``globals.chunk_size=None``; ours
``MemoryPolicy(inplace=True)``: OpenFold's no-grad forward updates in place), ``chunk4`` (chunk size 4 on both sides,
in place; OpenFold's chunk-size tuning
off), ``low_memory`` (OpenFold ``globals.use_lma=True``; ours ``MemoryPolicy.low_memory_inference()``);
in training both sides checkpoint every block (OpenFold ``globals.blocks_per_ckpt=1``; ours
``MemoryPolicy.training()`` and ``.reference(checkpoint_*=1)`` for ``unchunked``; training's ``nested``
is ours ``MemoryPolicy.training(checkpoint_granularity="nested")`` beside OpenFold's ``low_memory``). Inference is
``eval()`` + ``no_grad``; training is ``train()``, forward + backward of a proxy loss. One warm-up call
at a small size comes first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

try:
    from .rss import measure
except ImportError:  # run by file path, possibly by OpenFold's Python: rss.py sits next to this file
    from rss import measure

STAND_IN = '''"""Pure-PyTorch stand-in for OpenFold's compiled in-place softmax (written by benchmarks.openfold)."""
import torch


def forward_(x, rows, cols):
    x.copy_(torch.softmax(x, -1))


def backward_(attn, grad_output, v, rows, cols, head_dim):
    """In place: the softmax probabilities ``attn`` become the gradient of the logits, given the
    gradient of ``attn @ v`` (what OpenFold's kernel computes in its training path without LMA)."""
    d_attn = torch.matmul(grad_output, v.transpose(-1, -2))
    attn.copy_(attn * (d_attn - (attn * d_attn).sum(-1, keepdim=True)))
'''

SETTINGS = ("unchunked", "chunk4", "low_memory")
#: training also has ``nested``: ours ``MemoryPolicy.training(checkpoint_granularity="nested")`` beside
#: OpenFold's lowest-memory training setting (``low_memory``'s: LMA, every block checkpointed)
TRAINING_SETTINGS = SETTINGS + ("nested",)


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


def _timed(model, args, torch, call) -> dict:
    training = args.mode == "training"
    _run_model(model, _batch(args.warmup_features, torch), training, torch, call)
    model.zero_grad(set_to_none=True)
    batch = _batch(args.features, torch)
    result = measure(lambda: _run_model(model, batch, training, torch, call))  # seconds, cpu_s, rss_bytes
    model.zero_grad(set_to_none=True)
    return result


def build_openfold(args, torch):
    """OpenFold's model for the setting, and how to call it."""
    sys.path.insert(0, args.stand_in_dir)
    sys.path.insert(0, os.path.abspath(args.openfold_src))
    from openfold.config import model_config
    from openfold.model.model import AlphaFold

    c = model_config(args.preset, train=args.mode == "training")
    c.globals.chunk_size = 4 if args.setting == "chunk4" else None
    c.globals.use_lma = args.setting in ("low_memory", "nested")
    c.globals.blocks_per_ckpt = 1 if args.mode == "training" else None
    for stack in (c.model.evoformer_stack, c.model.extra_msa.extra_msa_stack, c.model.template.template_pair_stack):
        stack.tune_chunk_size = False
    c.model.evoformer_stack.no_blocks = args.evo_blocks
    c.model.extra_msa.extra_msa_stack.no_blocks = args.extra_blocks
    torch.manual_seed(0)
    return AlphaFold(c), lambda m, b: m(b)


def worker_openfold(args, torch) -> dict:
    model, call = build_openfold(args, torch)
    return _timed(model, args, torch, call)


def build_ours(args, torch):
    """Our model for the setting (the memory policy applied), and how to call it."""
    from alphafold_mem import bind
    from alphafold_mem.config import model_config
    from alphafold_mem.memory import MemoryPolicy
    from alphafold_mem.model import AlphaFold

    cfg = model_config(
        args.preset, **{"evoformer.num_blocks": args.evo_blocks, "extra_msa.num_blocks": args.extra_blocks}
    )
    training = args.mode == "training"
    if training:
        policy = {
            "unchunked": MemoryPolicy.reference(checkpoint_evoformer=1, checkpoint_extra_msa=1, checkpoint_template=1),
            "chunk4": MemoryPolicy.training(chunk_size=4),
            "low_memory": MemoryPolicy.training(),
            "nested": MemoryPolicy.training(checkpoint_granularity="nested"),
        }[args.setting]
    else:  # OpenFold's no-grad forward updates in place; so do these
        policy = {
            "unchunked": MemoryPolicy(inplace=True),
            "chunk4": MemoryPolicy(chunk_size=4, inplace=True),
            "low_memory": MemoryPolicy.low_memory_inference(),
        }[args.setting]
    torch.manual_seed(0)
    return bind(AlphaFold(cfg), policy), lambda m, b: m(b, recycle_dim=-1)


def worker_ours(args, torch) -> dict:
    from alphafold_mem.memory import track_peak
    from alphafold_mem.memory.host import apply_malloc_setting

    # what `alphafold-mem train/predict` do by default (--malloc trim, or $ALPHAFOLD_MEM_MALLOC); a no-op
    # when the environment sets MALLOC_*_THRESHOLD_ (allocator "mmap") or ALPHAFOLD_MEM_MALLOC=default
    # (allocator "glibc")
    malloc = apply_malloc_setting()
    model, call = build_ours(args, torch)
    training = args.mode == "training"
    result = _timed(model, args, torch, call)
    with track_peak() as mem:
        _run_model(model, _batch(args.features, torch), training, torch, call)
    from alphafold_mem.hugepages import huge_pages_status

    return {**result, "counter_bytes": mem.peak, "malloc": malloc, "huge_pages": huge_pages_status()}


def worker_both(args, torch) -> dict:
    """Both models in this one process, timed alternately ``args.alternations`` times (the order
    swapped every round), so that both see the same machine at nearly the same moment: wall seconds
    per run for each side. Time only (one process has one resident set), under one allocator for
    both (plain glibc: our ``--malloc trim`` thread is not started)."""
    import time

    training = args.mode == "training"
    sides = {"openfold": build_openfold(args, torch), "ours": build_ours(args, torch)}
    for model, call in sides.values():  # the same warm-up as a fresh-process cell
        _run_model(model, _batch(args.warmup_features, torch), training, torch, call)
        model.zero_grad(set_to_none=True)
    batch = _batch(args.features, torch)
    seconds = {side: [] for side in sides}
    for i in range(args.alternations):
        for side in ("openfold", "ours") if i % 2 == 0 else ("ours", "openfold"):
            model, call = sides[side]
            start = time.perf_counter()
            _run_model(model, batch, training, torch, call)
            seconds[side].append(time.perf_counter() - start)
            model.zero_grad(set_to_none=True)
    return {f"{side}_seconds": v for side, v in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--side",
        choices=["ours", "openfold", "both"],
        required=True,
        help="both: the two models in this process, timed alternately (--alternations)",
    )
    ap.add_argument("--alternations", type=int, default=3)
    ap.add_argument("--setting", choices=TRAINING_SETTINGS, required=True)
    ap.add_argument("--mode", choices=["inference", "training"], default="inference")
    ap.add_argument("--features", required=True, help="npz of the inputs (OpenFold layout, trailing recycling dim)")
    ap.add_argument("--warmup-features", required=True)
    ap.add_argument("--preset", default="model_1_ptm")
    ap.add_argument("--evo-blocks", type=int, default=48)
    ap.add_argument("--extra-blocks", type=int, default=4)
    ap.add_argument("--stand-in-dir", default="")
    ap.add_argument("--openfold-src", default="")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.setting not in SETTINGS and args.mode != "training":
        ap.error(f"setting {args.setting!r} is a training setting")
    if args.side == "ours":  # as the command line does, before the first CPU tensor (alphafold_mem.hugepages)
        from alphafold_mem.hugepages import request_huge_pages

        request_huge_pages()
    import torch

    torch.set_num_threads(args.threads)
    worker = {"openfold": worker_openfold, "ours": worker_ours, "both": worker_both}[args.side]
    print(json.dumps(worker(args, torch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
