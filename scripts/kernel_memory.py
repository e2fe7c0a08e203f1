"""Predicted peak memory with and without the Triton kernels (``MemoryPolicy.kernels``), from the
planner (:func:`alphafold_mem.planner.estimate_breakdown`: FakeTensorMode, nothing allocated, no
kernel launched; the kernels' launchers allocate under fake tensors exactly what they allocate on a GPU).

Command (CPU, a few minutes)::

    python scripts/kernel_memory.py

Prints two Markdown tables (GB = 10^9 bytes, parameters fp32 included):

* one triangle multiplication (c_z = c_hidden = 128, AF2's Evoformer), forward + backward of
  ``sum(out * g)``: activation peak of the PyTorch reference and of the fused kernel at N_res
  512-4096;
* the whole model_1 (AF2 sizes: 512 MSA clusters, 5120 extra sequences, 4 templates): inference
  with the reference and ``low_memory_inference()`` policies, each with ``kernels="reference"`` and
  ``kernels="triton"``, and one ``initial_training`` step (N_res 256, Suppl. Table 4 crop) with
  ``training()`` (extrapolated from 1- and 2-block runs, ``exact=False``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from alphafold_mem import MemoryPolicy, kernels, model_config  # noqa: E402
from alphafold_mem.memory.tracking import StorageTracker  # noqa: E402
from alphafold_mem.planner.estimate import estimate_breakdown  # noqa: E402


def triangle_peak(n: int, impl: str, c: int = 128) -> int:
    """Activation bytes at the peak of one triangle multiplication forward + backward (fp32, fake)."""
    with FakeTensorMode():
        shapes = [(c,), (c,)] + [(c, c), (c,)] * 4 + [(c,), (c,), (c, c), (c,), (c, c), (c,)]
        w = kernels.TriangleMultiplicationWeights(*(torch.empty(s).requires_grad_(True) for s in shapes))
        z = torch.empty(1, n, n, c).requires_grad_(True)
        mask, g = torch.empty(1, n, n), torch.empty(1, n, n, c)
        tracker = StorageTracker()
        with tracker:
            (kernels.triangle_multiplication(z, mask, w, True, impl=impl) * g).sum().backward()
    return tracker.peak


def main() -> None:
    print("| N_res | one triangle multiplication, fwd + bwd: reference | fused Triton kernel | fused / reference |")
    print("|---|---|---|---|")
    for n in (512, 1024, 2048, 4096):
        ref, fused = triangle_peak(n, "reference"), triangle_peak(n, "triton")
        print(f"| {n} | {ref / 1e9:.1f} GB | {fused / 1e9:.1f} GB | {fused / ref:.2f} |", flush=True)
    print()
    print('| run | N_res | policy | kernels="reference" | kernels="triton" | triton / reference |')
    print("|---|---|---|---|---|---|")
    cfg = model_config("model_1")
    rows = [
        ("model_1 inference", n, name, cfg, False)
        for n in (512, 1024, 2048, 4096)
        for name in ("reference", "low_memory_inference")
        if not (name == "reference" and n > 1024)
    ]
    rows.append(("initial_training step", 256, "training", model_config("initial_training"), True))
    for label, n, name, config, training in rows:
        seq, extra = (128, 1024) if training else (512, 5120)
        est = [
            estimate_breakdown(
                config, getattr(MemoryPolicy, name)(kernels=k), n, seq, extra, 4, training, exact=not training
            ).total
            for k in ("reference", "triton")
        ]
        mark = "†" if training else ""
        print(
            f"| {label} | {n} | `{name}()` | {est[0] / 1e9:.1f} GB{mark} | {est[1] / 1e9:.1f} GB{mark} | "
            f"{est[1] / est[0]:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
