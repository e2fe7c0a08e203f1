"""One process of the multi-process training tests (``tests/test_train_parallel.py``), launched the
way torchrun / SLURM launch a rank: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``, ``NODE_RANK`` in the environment (Lightning then creates no processes itself).

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


def launch(mode: str, world: int, out: Path, *args: str, timeout: float = 300.0) -> list[str]:
    """Run ``world`` ranks of this worker as torchrun would (gloo on 127.0.0.1, a free port), wait
    at most ``timeout`` seconds, and return each rank's log; raises if a rank fails or times out."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[1]
    procs = []
    for rank in range(world):
        env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
        if world > 1:
            env.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                WORLD_SIZE=str(world),
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                NODE_RANK="0",
            )
        log = open(out / f"worker_{mode}_{world}_{rank}.log", "w+")
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, "-m", "tests.ddp_worker", mode, "--out", str(out), *args],
                    cwd=root,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log,
            )
        )
    logs = []
    try:
        for proc, log in procs:
            proc.wait(timeout=timeout)
            log.seek(0)
            logs.append(log.read())
            if proc.returncode != 0:
                raise RuntimeError(f"rank exited with {proc.returncode}:\n{logs[-1][-3000:]}")
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
            log.close()
    return logs
