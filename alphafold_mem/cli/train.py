r"""alphafold-mem train: train or fine-tune AlphaFold2 with Lightning.

Examples:

    alphafold-mem train --data data/                       # demo preset on the shipped example set
    alphafold-mem train --preset initial_training --data /pdb --devices 8 --strategy ddp \
        --precision bf16 --max-steps 100000 --out runs/af2
    alphafold-mem train --data data/ --resume runs/train/checkpoints/last.ckpt --max-steps 2000
    alphafold-mem train --data data/ --init-weights params_model_1.npz --preset finetuning
    alphafold-mem train --data data/ --set evoformer.num_blocks=2 --train-set lr=5e-4
    alphafold-mem train --preset initial_training --data /pdb --cluster-file clusters-by-entity-40.txt \
        --template-mmcif-dir /pdb/mmcif --max-template-date 2021-10-10 --obsolete obsolete.dat \
        --distillation-dir /distillation --val-data /cameo

--resume CKPT restores everything the checkpoint saved (model config, training settings, data
directory, max steps, precision, checkpoint interval, memory policy): repeat no flag. A flag given
again with another value is applied as a logged 'override:' line; --seed and --batch-size cannot
change on resume (the data position is numbered by them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path

from ..config import PRESETS, apply_overrides, model_config
from .index import add_source_options, build_from_args
from .malloc import add_malloc_option
from .memory_args import parse_assignments, train_request
from .options import (
    TRAIN_PRECISIONS,
    add_max_memory,
    add_no_progress,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
    train_precision,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` subcommand."""
    p = sub.add_parser(
        "train",
        help="train or fine-tune a model (Lightning)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--preset", choices=PRESETS, default=None, help="model preset (default: demo, or the preset stored in --resume)"
    )
    p.add_argument("--data", default=None, help="data directory or chain-index JSON (default: data)")
    p.add_argument("--index", default=None, metavar="FILE", help="a chain index built by 'alphafold-mem index'")
    p.add_argument(
        "--out",
        default=None,
        help="checkpoints and logs go here (default: runs/train; on --resume the checkpoint's run directory)",
    )
    p.add_argument("--max-steps", type=positive_int, default=None, help="optimiser steps in all (default: 1000)")
    p.add_argument(
        "--precision",
        type=train_precision,
        default=None,
        metavar="{" + ",".join(TRAIN_PRECISIONS) + "}",
        help="fp32, or bf16: bf16 matmuls with fp32 weights and representations (Lightning's bf16-mixed) "
        "(default: fp32)",
    )
    p.add_argument(
        "--memory-policy",
        choices=("auto", "reference", "training"),
        default=None,
        help="training: every Evoformer/extra-MSA/template block checkpointed "
        "and low-memory attention, same results as reference (default: training); auto: the fastest "
        "policy predicted to fit the device at the crop and MSA sizes (--memory-set max_memory=BYTES), "
        "chosen at start-up",
    )
    p.add_argument(
        "--memory-set",
        dest="memory_overrides",
        action="append",
        metavar="FIELD=VALUE",
        help="override a MemoryPolicy field, e.g. checkpoint_granularity=block or chunk_size=auto (sized at "
        "start-up for the crop and MSA sizes) (repeatable)",
    )
    p.add_argument(
        "--devices",
        type=_devices,
        default=None,
        help="device count per node or 'auto' (default: 1, or the --dap size)",
    )
    p.add_argument(
        "--num-nodes",
        type=positive_int,
        default=1,
        help="machines in a multi-node run (launched by torchrun or SLURM; docs/training.md, 'Multi-node')",
    )
    p.add_argument(
        "--dap",
        type=positive_int,
        default=1,
        metavar="P",
        help="devices sharing each sample (dynamic axial parallelism); --devices must be a multiple "
        "(dp = devices / P data-parallel replicas, DDP over all); default: 1",
    )
    p.add_argument("--accelerator", default="auto", help="cpu, gpu, auto (default: auto)")
    p.add_argument("--strategy", default="auto", help="Lightning strategy: auto, ddp, fsdp, ... (default: auto)")
    p.add_argument(
        "--resume",
        metavar="CKPT",
        default=None,
        help="continue from a training checkpoint with the settings it saved (see above)",
    )
    p.add_argument(
        "--init-weights",
        metavar="FILE",
        default=None,
        help="start from these weights (AF2 .npz, OpenFold .pt, alphafold-mem checkpoints), EMA "
        "included; the architecture comes from the file unless --preset is given",
    )
    p.add_argument("--batch-size", type=positive_int, default=None, help="per-device batch size (default: 1)")
    p.add_argument("--lr", type=positive_float, default=None, help="peak learning rate (default: 1e-3, AF2)")
    p.add_argument(
        "--warmup-steps", type=non_negative_int, default=None, help="linear warm-up steps (default: 1000, AF2)"
    )
    p.add_argument("--seed", type=non_negative_int, default=None)
    p.add_argument(
        "--val-every", type=non_negative_int, default=None, help="validate every N steps, 0: never (default: 200)"
    )
    p.add_argument("--ckpt-every", type=positive_int, default=None, help="checkpoint every N steps (default: 200)")
    p.add_argument(
        "--held-out",
        nargs="*",
        default=None,
        help="PDB ids kept out of training for validation (default: the demo hold-out set)",
    )
    p.add_argument(
        "--num-workers",
        type=non_negative_int,
        default=None,
        help="DataLoader workers for training and validation; samples do not depend on it "
        "(default: min(4, CPUs - 1), 0 on a one-CPU machine)",
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument(
        "--logger",
        nargs="+",
        choices=("csv", "tensorboard"),
        default=["csv"],
        help="<out>/logs/metrics.csv is always written; 'tensorboard' adds <out>/tensorboard "
        "(optional extra: pip install 'alphafold_mem[tensorboard]')",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        metavar="KEY=VALUE",
        help="model config override, dotted path (repeatable), e.g. loss.violation_weight=1.0",
    )
    p.add_argument(
        "--train-set",
        dest="train_overrides",
        action="append",
        metavar="KEY=VALUE",
        help="TrainConfig override (repeatable), e.g. ema_decay=0.99",
    )
    add_max_memory(
        p,
        "the budget of --memory-policy auto and of chunk_size=auto (default: the device's free memory); "
        "the same as --memory-set max_memory=BYTES",
    )
    add_no_progress(p, "no progress bar", old=("--no-progress-bar",))
    _add_sampling_options(p)
    add_source_options(p, structures_flag=False)  # --mmcif-dir ...: OpenFold's layout, indexed before the run
    add_malloc_option(p)
    p.set_defaults(func=run)


def _devices(text: str):
    """``--devices``: 'auto' or a positive count (as text: the run settings store it so)."""
    return text if text == "auto" else str(positive_int(text))


def _add_sampling_options(p: argparse.ArgumentParser) -> None:
    """Validation data, sampling, chain filters and templates (issue 33; ``train.data_module.DataOptions``)."""
    g = p.add_argument_group("sampling, filters and templates (AF2 / OpenFold training)")
    g.add_argument("--val-data", metavar="DIR", help="validation data directory or index (default: --held-out ids)")
    g.add_argument(
        "--cluster-file",
        metavar="FILE",
        help="MMseqs2/OpenFold cluster file (one cluster per line, chain ids separated by spaces): "
        "weight 1/cluster size (default: chains with the same sequence form a cluster); multimer presets "
        "draw chains and interfaces by cluster (default: each chain its own cluster)",
    )
    g.add_argument("--distillation-dir", metavar="DIR", help="self-distillation set (predicted structures, pLDDT in B)")
    g.add_argument(
        "--distillation-prob",
        type=probability,
        default=None,
        help="probability of a self-distillation draw (default: 0.75)",
    )
    g.add_argument(
        "--max-resolution", type=positive_float, default=None, help="drop chains above (Å; unknown passes; default 9)"
    )
    g.add_argument("--max-release-date", metavar="YYYY-MM-DD", help="drop chains released after this date")
    g.add_argument("--filter-file", metavar="FILE", help="train only on the chain ids listed (one per line)")
    g.add_argument(
        "--obsolete", metavar="FILE", help="wwPDB obsolete.dat: obsolete chains dropped, template ids mapped"
    )
    g.add_argument(
        "--require-alignments", action="store_true", default=None, help="drop chains without an alignment folder"
    )
    g.add_argument(
        "--template-mmcif-dir",
        action="append",
        default=None,
        metavar="DIR",
        help="template mmCIFs (repeatable); hits come from each chain's alignment folder "
        "(pdb70_hits.hhr, hmm_output.sto, pdb_hits.sto); used when the model has templates",
    )
    g.add_argument("--max-template-date", metavar="YYYY-MM-DD", help="drop templates released after this date")


#: Data flags a checkpoint stores (run setting ``data_options``) and their defaults: --resume restores them.
_DATA_FLAGS = {
    "val_data": None,
    "cluster_file": None,
    "distillation_dir": None,
    "distillation_prob": 0.75,
    "max_resolution": 9.0,
    "max_release_date": None,
    "filter_file": None,
    "obsolete": None,
    "require_alignments": False,
    "template_mmcif_dir": [],
    "max_template_date": None,
}


def _data_options(args: argparse.Namespace):
    """The :class:`~alphafold_mem.train.data_module.DataOptions` of the command line."""
    from ..train.data_module import DataOptions  # torch and Lightning: loaded when the command runs

    return DataOptions(
        val_data=args.val_data,
        cluster_file=args.cluster_file,
        distillation_dir=args.distillation_dir,
        distillation_prob=args.distillation_prob,
        max_resolution=args.max_resolution,
        max_release_date=args.max_release_date,
        filter_file=args.filter_file,
        obsolete=args.obsolete,
        require_alignments=args.require_alignments,
        template_mmcif_dirs=tuple(args.template_mmcif_dir or ()),
        max_template_date=args.max_template_date,
    )


#: Index source flags a checkpoint stores (run setting ``index_sources``): --resume without them rebuilds
#: (brings up to date) the index from the same sources, so a later run that rewrote the shared index
#: with other sources does not change what the resumed run reads.
_SOURCE_FLAGS = (
    "mmcif_dir",
    "alignment_dir",
    "alignment_index",
    "chain_data_cache",
    "mmcif_cache",
    "duplicate_chains",
    "index_dir",
)


def _abs(value):
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [str(Path(v).resolve()) for v in value]
    return str(Path(value).resolve())


def _restore_index_sources(args: argparse.Namespace, saved) -> None:
    """On --resume with neither --index nor --mmcif-dir given: the source flags the checkpoint stored."""
    if saved is None or args.index is not None or args.mmcif_dir is not None:
        return
    stored = saved.run.get("index_sources") or {}
    if stored.get("mmcif_dir") and args.data is None:
        for attr in _SOURCE_FLAGS:
            if getattr(args, attr, None) is None:
                setattr(args, attr, stored.get(attr))


#: Run settings a checkpoint stores (:mod:`alphafold_mem.train.resume`): CLI attribute -> (key, default).
_RUN_SETTINGS = {
    "data": ("data_dir", "data"),
    "threads": ("threads", 0),  # helper E (resume restores threads): 0 = torch's default
    "max_steps": ("max_steps", 1000),
    "precision": ("precision", "32"),
    "ckpt_every": ("ckpt_every_steps", 200),
    "memory_policy": ("memory_policy", "training"),
    "memory_overrides": ("memory_overrides", None),
}


def _restore_run_settings(args: argparse.Namespace, saved) -> dict:
    """Fill the run settings not given on the command line from the checkpoint (``saved``, or the
    defaults without --resume); returns the settings this run stores in its checkpoints."""
    from ..train.resume import default_out_dir  # heavy: the train package loads Lightning

    stored = saved.run if saved is not None else {}
    for attr, (key, default) in _RUN_SETTINGS.items():
        if getattr(args, attr) is None:
            setattr(args, attr, stored.get(key, default))
    for attr, default in _DATA_FLAGS.items():  # issue 33: sampling, filters, templates
        if getattr(args, attr) is None:
            setattr(args, attr, stored.get("data_options", {}).get(attr, default))
    if args.out is None:
        args.out = default_out_dir(args.resume, stored.get("out_dir")) if saved is not None else "runs/train"
    data = Path(args.data)
    return {
        "data_dir": str(data.resolve()) if data.exists() else str(data),
        "max_steps": args.max_steps,
        "precision": args.precision,
        "ckpt_every_steps": args.ckpt_every,
        "memory_policy": args.memory_policy,
        "memory_overrides": list(args.memory_overrides or []),
        "out_dir": str(Path(args.out).resolve()),
        "threads": args.threads,  # helper E
        "data_options": {attr: getattr(args, attr) for attr in _DATA_FLAGS},
        "index_sources": {attr: _abs(getattr(args, attr, None)) for attr in _SOURCE_FLAGS}
        if getattr(args, "mmcif_dir", None)
        else None,
    }


def _train_config(args: argparse.Namespace, saved):
    """The saved TrainConfig (or the defaults) with the flags given on the command line applied."""
    from ..train import (  # heavy: the train package loads Lightning (seconds); only `train` needs it
        DEFAULT_HELD_OUT,
        TrainConfig,
    )
    from ..train.config import check_removed  # heavy: the train package loads Lightning

    base = saved.train_config if saved is not None and saved.train_config is not None else None
    tc_kwargs = {}
    if args.held_out is not None or base is None:
        tc_kwargs["held_out"] = tuple(args.held_out) if args.held_out is not None else DEFAULT_HELD_OUT
    for name, field in (
        ("batch_size", "batch_size"),
        ("lr", "lr"),
        ("warmup_steps", "warmup_steps"),
        ("seed", "seed"),
        ("val_every", "val_every_steps"),
    ):
        if getattr(args, name) is not None:
            tc_kwargs[field] = getattr(args, name)
    train_overrides = parse_assignments(args.train_overrides, "--train-set")
    check_removed(train_overrides)
    tc_kwargs.update(train_overrides)
    return dataclasses.replace(
        base or TrainConfig(), **{k: tuple(v) if isinstance(v, list) else v for k, v in tc_kwargs.items()}
    )


def _threads_for_launcher(threads: int | None):
    """``OMP_NUM_THREADS`` set to ``--threads`` while training runs, the environment restored after:
    Lightning's subprocess launcher (``--strategy ddp``, ``--dap``) otherwise sets torch's intra-op
    threads to cores / processes in this process and in the ranks it starts, overriding ``--threads``."""
    from unittest import mock  # a training run only (mock loads asyncio)

    return mock.patch.dict(os.environ, {"OMP_NUM_THREADS": str(threads)}) if threads else contextlib.nullcontext()


def run(args: argparse.Namespace) -> int:
    """Run ``train``; returns the exit status."""
    import torch  # heavy: loaded when the command runs, not for --help or a rejected option

    from ..io import os_error_line  # heavy: loads torch
    from ..train import train  # heavy: the train package loads Lightning (seconds); only `train` needs it
    from ..train.init_weights import (
        weights_config,  # heavy: the train package loads Lightning (seconds); only `train` needs it
    )
    from ..train.resume import (  # heavy: the train package loads Lightning (seconds); only `train` needs it
        read_saved_run,
        resolve_resume,
    )

    try:
        # helper E: a missing/damaged last.ckpt falls back to the newest complete step=N.ckpt (logged)
        if args.resume:
            args.resume = resolve_resume(args.resume, lambda line: print(line, file=sys.stderr, flush=True))
        saved = read_saved_run(args.resume) if args.resume else None
        _restore_index_sources(args, saved)
        if args.index is not None:
            args.data = args.index
        elif args.mmcif_dir is not None:  # built or brought up to date in its stable place, not under --out
            args.data = str(build_from_args(args, log=lambda line: print(line, file=sys.stderr, flush=True)))
        run_settings = _restore_run_settings(args, saved)
        if args.max_memory is not None:  # --memory-set max_memory=BYTES, stored and restored with the others
            kept = [o for o in args.memory_overrides or [] if not o.replace(" ", "").startswith("max_memory=")]
            args.memory_overrides = run_settings["memory_overrides"] = [*kept, f"max_memory={args.max_memory}"]
        if args.threads:  # helper E: after the restore, so a resumed run keeps the checkpoint's threads
            torch.set_num_threads(args.threads)
        overrides = parse_assignments(args.overrides, "--set")
        if saved is not None and args.preset is None:
            cfg = apply_overrides(saved.model_config, overrides)
        elif args.init_weights and args.preset is None:
            cfg = apply_overrides(weights_config(args.init_weights), overrides)
        else:
            cfg = model_config(args.preset or "demo", **overrides)
        tc = _train_config(args, saved)
        devices = args.devices or str(args.dap)
        devices = devices if devices == "auto" else int(devices)
        policy = train_request(args.memory_policy, args.memory_overrides)
        with _threads_for_launcher(args.threads):
            train(
                cfg,
                tc,
                args.data,
                args.out,
                max_steps=args.max_steps,
                precision=args.precision,
                devices=devices,
                strategy=args.strategy,
                accelerator=args.accelerator,
                resume=args.resume,
                ckpt_every_steps=args.ckpt_every,
                num_workers=args.num_workers,
                loggers=args.logger,
                progress_bar=args.progress,
                memory_policy=policy,
                run_settings=run_settings,
                init_weights=args.init_weights,
                num_nodes=args.num_nodes,
                dap=args.dap,
                data_options=_data_options(args),
            )
    except (ValueError, KeyError, FileNotFoundError, TypeError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"alphafold-mem train: error: {msg}", file=sys.stderr)
        return 2
    except OSError as exc:  # no space, read-only, permission: one line naming the path (alphafold_mem.io)
        print(f"alphafold-mem train: error: {os_error_line(exc, 'writing the run')}", file=sys.stderr)
        return 1
    print(f"checkpoints: {args.out}/checkpoints (last.ckpt), logs: {args.out}/logs/metrics.csv")
    return 0
