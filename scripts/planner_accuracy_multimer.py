"""Planner accuracy on complexes: the AF2-Multimer model's predicted activation peak against two
measures of a fresh process, beside the monomer model at the same sizes.

Default run (AF2 channel sizes, 1 Evoformer + 1 extra-MSA + 1 template-pair block, no recycling,
N_seq 32, N_extra 128, 2 templates; CPU): inference on 2 complexes under the reference and
low-memory policies, then one training step of a 640-residue crop of 3 chains (213+214+213, a
homodimer and a third entity) under ``memory-plan --training``'s "training, checkpoint per update"
policy (every update checkpointed, low-memory attention), for each model; ``--rows inference`` or
``--rows training`` runs one part (a training row takes about 20 minutes of CPU at one thread and
about 13 GiB of memory)::

    .venv/bin/python scripts/planner_accuracy_multimer.py [--rows inference|training|all]

The plan of clami66/AF_unmasked #6 (a 4,539-residue complex of 12 chains, 512 MSA rows, 4 templates,
out of memory on a 24 GB RTX 4090) as ``alphafold-mem memory-plan`` prints it (nothing measured)::

    .venv/bin/python scripts/planner_accuracy_multimer.py --af-unmasked-6

Each row is one fresh process (``--worker``) under glibc's ``mmap`` allocator setting
(``benchmarks/standalone/rss.py``): the model is built with random weights, warmed up at 16
residues, then one inference forward runs on a complex of ``random_features(config, ...,
chains=...)`` (consecutive chains of near-equal length; the entities as given) and is measured twice:

* ``counter``: the activation peak of the storage counter (:func:`alphafold_mem.memory.track_peak`,
  :mod:`alphafold_mem.memory.tracking`; tensor storages created during the forward, parameters and
  inputs excluded);
* ``RSS``: the growth of the peak resident set of the forward (VmHWM after ``clear_refs``,
  :func:`alphafold_mem.memory.host.rss_growth`): every page the process touched, a different mechanism.

``predicted`` is :func:`alphafold_mem.planner.estimate_breakdown`'s activation peak for the same
config, policy and sizes on CPU (FakeTensorMode, nothing allocated), with the complex's chains
(:class:`alphafold_mem.planner.Chains`) for the multimer model; the monomer row plans the complex's
residues as one chain (what the monomer runs). ``pred / counter`` and ``pred / RSS`` are ratios
(1 = exact; below 1 the planner promised less than the forward took). Sizes in GiB.

The training rows (``--rows training``) measure one training step the same way: the model in
training mode (dropout on), the complex's features plus ground truth of the training shapes
(:func:`alphafold_mem.planner.training_loss.ground_truth_batch`), forward, the config's loss
(:class:`alphafold_mem.losses.AlphaFoldLoss`: for ``model_1_multimer_v3`` the AF2-Multimer terms,
intra- and inter-chain FAPE, chain centre of mass, clashes) and backward, after a warm-up step at 16
residues. A step takes minutes on one core, so the one step is measured both ways at once (the
counter's bookkeeping, a few bytes per live storage, is inside the RSS). Their ``RSS`` is the peak
resident set of the process after the step (``ru_maxrss`` of ``getrusage``) less its resident set
before it (the VmHWM growth agrees; the table's last line gives the largest difference); the
``counter`` includes the gradients the step creates. The
prediction is ``estimate_breakdown(..., training=True)``'s activations, what ``memory-plan
--training`` adds to parameters and inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: ``(name, N_res, entity of each chain)`` of the complexes measured by default.
COMPLEXES = (("A2B", 96, (1, 2, 1)), ("A2BC", 160, (1, 1, 2, 3)))
PRESETS = ("model_1", "model_1_multimer_v3")
POLICIES = ("reference", "low_memory_inference")
#: the training rows: a 640-residue crop of three chains (a homodimer and a third entity)
TRAIN_COMPLEX = ("A2B crop", 640, (1, 1, 2))
#: the training step's policy: memory-plan --training's "training, checkpoint per update" (every
#: update of every block checkpointed, low-memory attention), the smallest peak of its candidates here
TRAIN_POLICY = "training, checkpoint per update"


def _config(preset: str, args):
    from alphafold_mem import model_config

    return model_config(
        preset,
        **{
            "evoformer.num_blocks": args.evo_blocks,
            "extra_msa.num_blocks": args.extra_blocks,
            "template.pair_stack.num_blocks": args.templ_blocks,
            "num_recycles": 0,
        },
    )


def _policy(name: str):
    from alphafold_mem import MemoryPolicy

    if name == TRAIN_POLICY:
        return MemoryPolicy.training(checkpoint_granularity="update")
    return MemoryPolicy.reference() if name == "reference" else MemoryPolicy.low_memory_inference(chunk_size=16)


def _worker(spec: dict) -> int:
    """One fresh process: warm up, then the RSS growth and the counter's peak of one forward."""
    import torch

    from alphafold_mem import AlphaFold, bind
    from alphafold_mem.memory import track_peak
    from benchmarks.standalone.rss import measure_rss

    torch.set_num_threads(1)
    args = argparse.Namespace(**spec["args"])
    cfg = _config(spec["preset"], args)
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval()
    with torch.no_grad():  # AF2 zero-initialises final layers; perturb so no output is trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    bind(model, _policy(spec["policy"]))
    from alphafold_mem.testing import random_features

    chains = tuple(spec["entities"])
    small = random_features(cfg, 16, 4, 8, n_templ=args.n_templ, chains=chains[:2])
    batch = random_features(cfg, spec["n_res"], args.n_seq, args.n_extra, n_templ=args.n_templ, chains=chains)

    def forward(b):
        with torch.inference_mode():
            del model(b)["final_atom_positions"]

    forward(small)
    c0 = time.process_time()
    seconds, rss = measure_rss(lambda: forward(batch))
    cpu = time.process_time() - c0
    with track_peak() as mem:
        forward(batch)
    print(json.dumps({"rss": rss, "counter": mem.peak, "seconds": seconds, "cpu": cpu}))
    return 0


def _train_worker(spec: dict) -> int:
    """One fresh process: warm up, then the RSS growth and the counter's peak of one training step
    (forward, the AF2 / AF2-Multimer loss of the config on ground truth, backward). Nothing of the
    planner runs here (the ground truth's shapes come from its helper, the loss is the model's own)."""
    import resource

    import torch

    from alphafold_mem import AlphaFold, bind
    from alphafold_mem.losses import AlphaFoldLoss
    from alphafold_mem.memory import track_peak
    from alphafold_mem.planner.training_loss import ground_truth_batch
    from alphafold_mem.testing import random_features
    from benchmarks.standalone.rss import host_module, measure

    torch.set_num_threads(1)
    args = argparse.Namespace(**spec["args"])
    cfg = _config(spec["preset"], args)
    torch.manual_seed(0)
    model = AlphaFold(cfg)
    with torch.no_grad():  # AF2 zero-initialises final layers; perturb so no output is trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    bind(model, _policy(spec["policy"])).train()
    loss_fn = AlphaFoldLoss(cfg.loss, cfg.heads)
    chains = tuple(spec["entities"])

    def features(n_res: int, n_seq: int, n_extra: int) -> dict:
        b = random_features(cfg, n_res, n_seq, n_extra, n_templ=args.n_templ, chains=chains)
        return {**b, **ground_truth_batch(cfg, n_res, n_seq)}

    def step(b: dict) -> None:
        model.zero_grad(set_to_none=True)
        out = model(b)
        loss_fn(out, b)[0].backward()
        del out

    small, batch = features(16, 4, 8), features(spec["n_res"], args.n_seq, args.n_extra)
    step(small)
    model.zero_grad(set_to_none=True)
    before = host_module().resident_bytes()  # the resident set before the step
    with track_peak() as mem:  # one step (minutes on CPU at 640 residues) is measured both ways
        got = measure(lambda: step(batch))  # also the peak resident set growth by VmHWM after clear_refs
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    out = {"rss": maxrss - before, "vmhwm": got["rss_bytes"], "counter": mem.peak}
    print(json.dumps({**out, "seconds": got["seconds"], "cpu": got["cpu_s"]}))
    return 0


def _measure(preset: str, policy: str, name: str, n_res: int, entities, args, training: bool = False) -> dict:
    from benchmarks.standalone.rss import ALLOCATORS

    spec = {"preset": preset, "policy": policy, "n_res": n_res, "entities": list(entities), "args": vars(args)}
    spec["training"] = training
    env = {**os.environ, **ALLOCATORS["mmap"], "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{preset} {policy} {name}: worker failed: {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _predict(preset: str, policy: str, n_res: int, entities, args, training: bool = False) -> int:
    from alphafold_mem.planner import Chains, estimate_breakdown
    from alphafold_mem.testing import random_features

    cfg = _config(preset, args)
    chains = None
    if cfg.multimer:  # the chains random_features builds (near-equal consecutive chains)
        chains = Chains.of_batch(random_features(cfg, n_res, 1, 1, n_templ=args.n_templ, chains=tuple(entities)))
    sizes = (n_res, args.n_seq, args.n_extra, args.n_templ)
    est = estimate_breakdown(cfg, _policy(policy), *sizes, training=training, chains=chains)
    return est.activations


#: clami66/AF_unmasked #6: 12 chains, 4,539 residues (each chain its own entity: the issue gives no
#: sequences), 512 MSA rows, 4 templates, a 24 GB card.
AF_UNMASKED_6 = (
    "memory-plan",
    "--chains",
    ",".join(["378"] * 11 + ["381"]),
    "--n-seq",
    "512",
    "--n-templ",
    "4",
    "--max-memory",
    "24GB",
    "--device",
    "cuda",
    "--no-progress",
)


def _af_unmasked_6() -> int:
    from alphafold_mem.cli import main as cli

    print("# alphafold-mem " + " ".join(AF_UNMASKED_6))
    return cli(list(AF_UNMASKED_6))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evo-blocks", type=int, default=1)
    ap.add_argument("--extra-blocks", type=int, default=1)
    ap.add_argument("--templ-blocks", type=int, default=1)
    ap.add_argument("--n-seq", type=int, default=32)
    ap.add_argument("--n-extra", type=int, default=128)
    ap.add_argument("--n-templ", type=int, default=2)
    ap.add_argument("--policies", default=",".join(POLICIES), help="the inference rows' policies")
    ap.add_argument(
        "--rows",
        choices=("inference", "training", "all"),
        default="all",
        help="inference: the two complexes' forwards (about 2 min); training: the training steps of the "
        "640-residue crop (about 20 CPU minutes each, 13 GiB); all: both (default)",
    )
    ap.add_argument(
        "--af-unmasked-6", action="store_true", help="print memory-plan's answer for clami66/AF_unmasked #6 and exit"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        return (_train_worker if spec.get("training") else _worker)(spec)
    if args.af_unmasked_6:
        return _af_unmasked_6()
    del args.worker
    print(
        f"# AF2 channels; {args.evo_blocks} Evoformer + {args.extra_blocks} extra-MSA + {args.templ_blocks} "
        f"template-pair blocks; N_seq {args.n_seq}, N_extra {args.n_extra}, N_templ {args.n_templ}; no recycling; "
        "CPU, 1 thread, a fresh process per row (allocator mmap)"
    )
    if args.rows in ("inference", "all"):
        rows = [(c, p, q) for c in COMPLEXES for p in PRESETS for q in args.policies.split(",")]
        _table("inference forward", rows, args, training=False)
    if args.rows in ("training", "all"):
        rows = [(TRAIN_COMPLEX, p, TRAIN_POLICY) for p in reversed(PRESETS)]
        _table("training step (forward, the config's loss, backward)", rows, args, training=True)
    return 0


def _table(kind: str, rows, args, training: bool) -> None:
    """Measure and predict ``rows`` (``((name, N_res, entities), preset, policy)``); print the table."""
    from alphafold_mem import model_config
    from alphafold_mem.planner import Chains
    from alphafold_mem.testing import random_features
    from alphafold_mem.units import gib_value

    print()
    print(f"# {kind}")
    print()
    print(
        "| model | complex | chains | N_res | policy | counter GiB | RSS GiB | predicted GiB | pred / counter "
        f"| pred / RSS | {'step' if training else 'forward'} CPU s |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    worst, hwm = {}, 0.0
    for (name, n_res, entities), preset, policy in rows:
        probe = random_features(model_config("tiny_multimer"), n_res, 1, 1, chains=tuple(entities))
        layout = Chains.of_batch(probe)
        got = _measure(preset, policy, name, n_res, entities, args, training)
        pred = _predict(preset, policy, n_res, entities, args, training)
        r_counter, r_rss = pred / got["counter"], pred / got["rss"]
        key = "multimer" if "multimer" in preset else "monomer"
        worst[key] = max(worst.get(key, 0.0), abs(r_counter - 1))
        hwm = max(hwm, abs(got.get("vmhwm", got["rss"]) / got["rss"] - 1))
        print(
            f"| {preset} | {name} | {'+'.join(map(str, layout.lengths))} "
            f"(entities {','.join(map(str, layout.entity_ids))}) | {n_res} | {policy} | "
            f"{gib_value(got['counter'])} | {gib_value(got['rss'])} | {gib_value(pred)} | "
            f"{r_counter:.3f} | {r_rss:.3f} | {got['cpu']:.1f} |",
            flush=True,
        )
    print()
    print(
        "# largest |pred / counter - 1|: "
        + ", ".join(f"{k} {100 * v:.2f} %" for k, v in sorted(worst.items()))
        + " (the monomer row plans the complex's residues as one chain)"
    )
    if training:
        print(f"# RSS by ru_maxrss and by VmHWM after clear_refs differ by at most {100 * hwm:.2f} %")


if __name__ == "__main__":
    sys.exit(main())
