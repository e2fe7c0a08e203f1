"""Per-module error of a bf16 precision against fp32 on the ablation chains: which module adds the most.

In one fp32 forward of the ablation's model (demo weights) on each chain, every hooked module (the
residual updates of Alg. 6/16/18, the attention cores, LayerNorms, embedders, structure module) is run
a second time on the same inputs as the bf16 policy runs it (floating inputs rounded to bf16, inside
bf16 autocast), and a third time on the fp32 inputs inside bf16 autocast (the module's own arithmetic
only). Printed per module, sorted by the first: the relative RMS error ``|y_bf16 - y_fp32| /
|y_fp32|`` of its output, averaged over chains and recycling iterations, for both runs, and the
largest absolute RMS error. A module's error is what it adds to the stream it updates, from exact
inputs; the end-to-end deviation is ``alphafold-mem ablate --techniques precision=bf16-full``.

    python scripts/precision_modules.py                 # every ablation chain
    python scripts/precision_modules.py --chains 1lcd_A --top 20
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from alphafold_mem.ablation.chains import chain_features, discover_chains  # noqa: E402
from alphafold_mem.binding import bind  # noqa: E402
from alphafold_mem.memory import MemoryPolicy  # noqa: E402
from alphafold_mem.weights.detect import default_weights_path, load_weights  # noqa: E402

#: the module classes measured
KINDS = (
    "MSARowAttentionWithPairBias",
    "MSAColumnAttention",
    "MSAColumnGlobalAttention",
    "Transition",
    "OuterProductMean",
    "TriangleMultiplication",
    "TriangleAttention",
    "Attention",
    "GlobalAttention",
    "LayerNorm",
    "InputEmbedder",
    "RecyclingEmbedder",
    "ExtraMsaEmbedder",
    "StructureModule",
    "EvoformerBlock",
)


def _cast(x, dtype):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _tensors(y) -> list[torch.Tensor]:
    if isinstance(y, torch.Tensor):
        return [y] if y.is_floating_point() else []
    if isinstance(y, (list, tuple)):
        return [t for v in y for t in _tensors(v)]
    if isinstance(y, dict):
        return [t for v in y.values() for t in _tensors(v)]
    return []


def _rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt())


def measure(model: torch.nn.Module, batches, dtype=torch.bfloat16) -> dict[str, dict[str, list]]:
    """``{module name: {"rounded" | "compute": [(abs RMS error, RMS output), ...]}}`` over the batches."""
    stats: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    busy = [False]  # the second runs of a module must not measure its submodules again

    def hook(name):
        def fn(module, args, kwargs, out):
            if busy[0]:
                return
            busy[0] = True
            try:
                ys = _tensors(out)
                ref = sum(_rms(y.float()) ** 2 for y in ys) ** 0.5
                for label, cast in (("rounded", dtype), ("compute", None)):
                    a = _cast(args, cast) if cast else args
                    kw = {k: _cast(v, cast) if cast else v for k, v in kwargs.items()}
                    with torch.autocast(ys[0].device.type, dtype=dtype):
                        yb = _tensors(module(*a, **kw))
                    err = sum(_rms(b.float() - y.float()) ** 2 for b, y in zip(yb, ys)) ** 0.5
                    stats[name][label].append((err, ref))
            finally:
                busy[0] = False

        return fn

    handles = [
        m.register_forward_hook(hook(n), with_kwargs=True)
        for n, m in model.named_modules()
        if type(m).__name__ in KINDS
    ]
    try:
        for batch in batches:
            with torch.inference_mode():
                model(batch)
    finally:
        for h in handles:
            h.remove()
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", nargs="+", help="chain names (default: every ablation chain)")
    ap.add_argument("--weights", help="weights file (default: data/demo_weights/demo.ckpt)")
    ap.add_argument("--top", type=int, help="print only the N largest")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load_weights(str(args.weights or default_weights_path()))
    model = bind(loaded.model.eval(), MemoryPolicy.reference())
    chains = [c for c in discover_chains() if not args.chains or c.name in args.chains]
    if not chains:
        print(f"no ablation chain named {' '.join(args.chains)}", file=sys.stderr)
        return 2
    stats = measure(model, (chain_features(c, loaded.config, seed=args.seed) for c in chains))

    def mean_rel(pairs):
        return sum(e / r for e, r in pairs if r) / len(pairs)

    rows = sorted(
        (
            (mean_rel(d["rounded"]), mean_rel(d["compute"]), max(e for e, _ in d["rounded"]), n)
            for n, d in stats.items()
        ),
        reverse=True,
    )
    print(f"chains: {' '.join(c.name for c in chains)}; weights {loaded.config.preset}")
    print("| module | rel. error, bf16 inputs | rel. error, fp32 inputs | max abs. error |")
    print("|---|---|---|---|")
    for rel, rel_compute, err, name in rows[: args.top]:
        print(f"| `{name}` | {rel:.2e} | {rel_compute:.2e} | {err:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
