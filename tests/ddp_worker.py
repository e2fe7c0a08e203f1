"""One process of the multi-process training tests (``tests/test_train_parallel.py`` forks its ranks
with ``tests/torchrun_fork.py``), in the environment torchrun / SLURM give a rank: ``MASTER_ADDR``, ``MASTER_PORT``,
``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK`` (Lightning then creates no processes itself).

    python -m tests.ddp_worker draws --out DIR --steps 200
    python -m tests.ddp_worker train --out DIR --data INDEX_JSON --steps 2 --batch-size B

``draws``: the recycling-iteration counts of steps 0..steps-1 as the training step draws them,
gathered over a gloo group; rank 0 writes ``draws.json``. ``train``: trains ``--steps`` steps (tiny
preset, no dropout, gloo DDP when WORLD_SIZE > 1) and after each step writes
``rank{r}_step{s}.pt`` (weights, EMA shadow, iterations run). Every collective has a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from pathlib import Path

import torch

TIMEOUT = timedelta(seconds=120)


def config():
    from alphafold_mem import model_config

    no_dropout = {
        "evoformer.msa_dropout": 0.0,
        "evoformer.pair_dropout": 0.0,
        "extra_msa.msa_dropout": 0.0,
        "extra_msa.pair_dropout": 0.0,
        "structure_module.dropout_rate": 0.0,
        "template.pair_stack.dropout_rate": 0.0,
    }
    return model_config(
        "tiny",
        **{"num_recycles": 2, "data.crop_size": 32, "data.max_msa_clusters": 8, "data.max_extra_msa": 8, **no_dropout},
    )


def draws(args) -> None:
    import torch.distributed as dist

    from alphafold_mem.train import AlphaFoldLightning, TrainConfig

    dist.init_process_group("gloo", timeout=TIMEOUT)
    module = AlphaFoldLightning(config(), TrainConfig(seed=3))
    mine = [module.num_iterations(k, 4) for k in range(args.steps)]  # AF2: num_recycles 3, 1..4 iterations
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"rank": dist.get_rank(), "counts": mine})
    if dist.get_rank() == 0:
        (Path(args.out) / "draws.json").write_text(json.dumps(gathered))
    dist.barrier()
    dist.destroy_process_group()


def train(args) -> None:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.strategies import DDPStrategy

    from alphafold_mem.train import AF2DataModule, AlphaFoldLightning, TrainConfig, build_trainer

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    out = Path(args.out)

    class Dump(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            state = {
                "weights": {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()},
                "ema": {k: v.clone() for k, v in pl_module.ema.shadow.items()},
                "iterations": pl_module.last_num_iterations,
                "samples": list(batch.sample_ids),
            }
            torch.save(state, out / f"rank{rank}_step{trainer.global_step}.pt")

    torch.manual_seed(0)
    cfg = config()
    tc = TrainConfig(batch_size=args.batch_size, warmup_steps=3, held_out=("1a8o",), val_every_steps=0, seed=0)
    module = AlphaFoldLightning(cfg, tc)
    dm = AF2DataModule(args.data, cfg, tc, cache_dir=out / "idx", max_steps=args.steps)
    strategy = (
        DDPStrategy(find_unused_parameters=True, process_group_backend="gloo", timeout=TIMEOUT) if world > 1 else "auto"
    )
    trainer = build_trainer(
        out / f"run{rank}",
        args.steps,
        devices=world,
        strategy=strategy,
        accelerator="cpu",
        val_every_steps=None,
        ckpt_every_steps=10**6,
        loggers=(),
        callbacks=[Dump()],
        progress_bar=False,
    )
    trainer.fit(module, datamodule=dm)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["draws", "train"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--data")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    (draws if args.mode == "draws" else train)(args)


if __name__ == "__main__":
    main()
