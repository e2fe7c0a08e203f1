"""Loss curves of fp32 vs bf16-mixed training for the same seed and data (CPU autocast bf16).

Command line used for the precision note in README.md (Training)::

    python scripts/compare_precision.py --data data --steps 60 --out /tmp/precision_check

Writes ``<out>/curves.csv`` (step, loss_fp32, loss_bf16) and prints the mean and max relative
difference. Both runs use the ``tiny`` preset (no recycling), the same seed and the same draws.
"""

from __future__ import annotations

import argparse
import csv
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from alphafold_mem import model_config  # noqa: E402
from alphafold_mem.ablation.training import StepRecorder  # noqa: E402
from alphafold_mem.io import atomic_write  # noqa: E402
from alphafold_mem.train import AF2DataModule, AlphaFoldLightning, TrainConfig, build_trainer  # noqa: E402


def run(data: str, out: Path, steps: int, precision: str) -> list[float]:
    torch.manual_seed(0)
    cfg = model_config("tiny", num_recycles=0)
    tc = TrainConfig(warmup_steps=10, held_out=("1a8o",), val_every_steps=0)
    module = AlphaFoldLightning(cfg, tc)
    dm = AF2DataModule(data, cfg, tc, cache_dir=out / "idx", max_steps=steps)
    rec = StepRecorder()
    trainer = build_trainer(
        out / precision,
        steps,
        precision=precision,
        devices=1,
        accelerator="cpu",
        val_every_steps=None,
        ckpt_every_steps=10**6,
        loggers=(),
        callbacks=[rec],
        progress_bar=False,
    )
    trainer.fit(module, datamodule=dm)
    return rec.losses


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--out", default="/tmp/precision_check")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    fp32 = run(args.data, out, args.steps, "32")
    bf16 = run(args.data, out, args.steps, "bf16-mixed")
    rel = [abs(a - b) / abs(a) for a, b in zip(fp32, bf16)]
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "curves.csv") as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss_fp32", "loss_bf16"])
        w.writerows([i, a, b] for i, (a, b) in enumerate(zip(fp32, bf16)))
    finite = all(x == x and abs(x) != float("inf") for x in bf16)
    print(
        f"bf16 finite: {finite}; mean |rel diff| {sum(rel) / len(rel):.4f}, max {max(rel):.4f}; "
        f"first-10 mean fp32 {sum(fp32[:10]) / 10:.3f} bf16 {sum(bf16[:10]) / 10:.3f}; "
        f"last-10 mean fp32 {sum(fp32[-10:]) / 10:.3f} bf16 {sum(bf16[-10:]) / 10:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
