"""LightningModule wrapping the plain :class:`alphafold_mem.AlphaFold` module.

Manual optimisation, so that one step is explicit: an input check (finite features, masks 0/1,
tokens in range; a bad batch is skipped like a non-finite step), forward, fp32 loss, a non-finite check (agreed
across ranks), backward, a gradient check, clipping at global norm 0.1, Adam, the AF2 schedule, the
EMA update (Jumper et al. 2021, Suppl. 1.11). A step with a non-finite loss term or gradient is
skipped (no update, the data position still advances) and logged with the term, step and sample
ids; ``max_consecutive_bad_steps`` such steps in a row abort training with a ``RuntimeError``.

Validation swaps in the EMA weights and reports lDDT-Cα (and Cα-RMSD) on full held-out chains.
Checkpoints carry, besides Lightning's own state, the model and train configs, the EMA shadow,
the RNG states and the data position, so that a resumed fp32 run reproduces the uninterrupted one.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Optional

import lightning as L
import numpy as np
import torch

from ..binding import bind
from ..config import ModelConfig
from ..data import Batch, collate
from ..data.features.recycling import first_iterations, last_iteration
from ..data.features.values import feature_value_problem
from ..distributed import dp_coordinates, init_mesh
from ..losses import AlphaFoldLoss
from ..memory.policy import AutoPolicy, MemoryPolicy, PolicyRequest, as_request
from ..metrics import ca_rmsd, lddt_ca
from ..model import AlphaFold
from ..planner import resolve_policy, training_sizes
from ..weights import normalize_state_dict_keys
from .checkpoint import check_config_compatible
from .config import TrainConfig
from .ema import EMA
from .progress import InterruptCheckpoint
from .recycling import sample_num_iterations
from .schedules import af2_scheduler
from .strategies import check_strategy

__all__ = ["AlphaFoldLightning", "NonFiniteLossError", "evaluate_lddt"]

log = logging.getLogger("alphafold_mem.train")


class NonFiniteLossError(RuntimeError):
    """Raised after ``max_consecutive_bad_steps`` consecutive non-finite steps."""


def _rng_state() -> dict:
    """Global RNG states, as tensors and plain Python values (loadable with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)],
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    kind, keys, pos, has_gauss, gauss = s["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(tuple(s["python"][:1]) + (tuple(s["python"][1]),) + tuple(s["python"][2:]))
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


class AlphaFoldLightning(L.LightningModule):
    """Training wrapper: ``self.model`` is the pure ``AlphaFold`` nn.Module.
    Args:
        model_config: the architecture / loss weights (``alphafold_mem.model_config``).
        train_config: optimiser, schedule, EMA and sampling settings.
        memory_policy: a :class:`alphafold_mem.MemoryPolicy` bound to ``self.model`` (e.g.
            ``MemoryPolicy.training()``: checkpointing + low-memory attention); ``None``: the
            reference computation. A request for the planner's choice (``"auto"``,
            :class:`alphafold_mem.AutoPolicy`, ``chunk_size="auto"``) is resolved in
            :meth:`configure_model`, on the training device, for the largest sample a step sees
            (:func:`alphafold_mem.planner.training_sizes`: the crop and the MSA sizes of the config).
            Its precision must stay ``"fp32"``: mixed precision in training is the Trainer's
            ``precision="bf16-mixed"``.
        dap: devices sharing each sample (dynamic axial parallelism). The processes form a
            ``("dp", "dap")`` mesh in :meth:`configure_model`; every device of a DAP group computes
            the loss from the gathered outputs, and averaging gradients over all processes (DDP)
            gives each sample's gradient (:mod:`alphafold_mem.distributed.dap`). Samples and the
            FAPE clamping draw are per dp rank, so a DAP group sees one crop.

    Raises:
        ValueError: a memory policy with a precision other than fp32.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        train_config: TrainConfig = TrainConfig(),
        memory_policy: Optional[PolicyRequest] = None,
        dap: int = 1,
    ):
        super().__init__()
        request = as_request(memory_policy) if memory_policy is not None else MemoryPolicy.reference()
        if request.precision != "fp32":
            raise ValueError(
                f"memory policy precision {request.precision!r}: in training, set mixed precision "
                "with the trainer (--precision bf16-mixed) and leave the policy's precision at fp32"
            )
        self.automatic_optimization = False
        self.model_config, self.train_config = model_config, train_config
        self.save_hyperparameters({"model_config": model_config.to_dict(), "train_config": train_config.to_dict()})
        self.model = AlphaFold(model_config)
        self.memory_request = request
        self.planned = isinstance(request, AutoPolicy) or request.chunk_size == "auto"
        if not self.planned:
            bind(self.model, request)
        self.loss_fn = AlphaFoldLoss(model_config.loss, model_config.heads)
        self.ema = EMA(self.model, train_config.ema_decay)
        self.dap, self.dp_rank, self.dp_size = dap, 0, 1
        self.batches_seen = 0
        self.bad_steps = 0
        self.skipped_steps = 0
        self.last_num_iterations = 0
        self._pending_rng: Optional[dict] = None
        self._ema_ctx = None

    def configure_callbacks(self):
        """Training's own callbacks, whatever the trainer: :class:`~.progress.InterruptCheckpoint`
        (SIGINT / SIGTERM end the step under way and write ``last.ckpt``)."""
        return [InterruptCheckpoint()]

    def setup(self, stage: str) -> None:
        """Refuse sharded strategies (FSDP, DeepSpeed) however the Trainer was built."""
        check_strategy(self.trainer.strategy)

    def configure_model(self) -> None:
        """Bind what needs the run's processes or device (once): a policy the planner chooses,
        resolved for the training sizes on this device, and under DAP device sharding over the
        ``"dap"`` dim of the processes' ``("dp", "dap")`` mesh (the outputs gathered for the loss)."""
        if getattr(self, "_run_bound", False) or (self.dap == 1 and not self.planned):
            return
        mesh, policy = None, self.memory_request
        if self.dap > 1:
            mesh = init_mesh(self.dap, self.device.type)
            self.dp_rank, self.dp_size = dp_coordinates(mesh)
        if self.planned:
            sizes = training_sizes(self.model_config)
            policy = resolve_policy(policy, self.model_config, sizes, self.device, training=True, dap=self.dap)
            log.info("memory policy for training sizes %s on %s: %s", sizes, self.device, policy.name)
        bind(self.model, policy, mesh, gather_outputs=True)
        self._run_bound = True

    # -- the step ---------------------------------------------------------------------------------
    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.model(batch)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if isinstance(batch, Batch):
            return batch.to(device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def _use_clamped_fape(self, n: int, k: int) -> torch.Tensor:
        """Per-sample 0/1, 1 with probability ``loss.fape_clamp_probability`` (AF2 Suppl. 1.11.5: the
        backbone FAPE is clamped at 10 Å in 90 % of the samples) for the ``n`` samples of batch
        ``k`` on this rank: a function of (seed, global draw number) only, the draw number of sample
        ``j`` being ``(k * world + rank) * n + j`` as in the data module, so a global batch gets the
        same draws whatever its split over ranks."""
        rank, world = self._replica()
        p = self.model_config.loss.fape_clamp_probability
        draws = [
            np.random.default_rng([self.train_config.seed, 11, (k * world + rank) * n + j]).random() for j in range(n)
        ]
        return torch.tensor([float(u < p) for u in draws], dtype=torch.float32)

    def _replica(self) -> tuple[int, int]:
        """``(rank, world size)`` of the data-parallel replicas: the devices of one DAP group share
        each sample (and its dropout masks), so they are one replica."""
        if self.dap > 1:
            return self.dp_rank, self.dp_size
        trainer = getattr(self, "_trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def num_iterations(self, k: int, max_iterations: int) -> int:
        """Recycling iterations of training step ``k`` (the number of batches consumed before it):
        uniform on 1..``max_iterations`` (:func:`sample_num_iterations`, AF2 Suppl. 1.10), a function
        of (seed, k) only, hence the same on every rank and after a resume."""
        return sample_num_iterations(self.train_config.seed, k, max_iterations, self.train_config.uniform_recycling)

    def step_forward(self, feats: dict[str, torch.Tensor], k: int) -> tuple[dict, dict]:
        """The forward of training step ``k``: features with a trailing recycling dim (the data
        module's) run a sampled number of iterations (:func:`sample_num_iterations`); returns the
        outputs and the features of the last iteration run (what the loss reads). With several
        replicas the torch RNG (dropout) is first seeded from (seed, k, replica): Lightning seeds every
        rank alike, which would give all replicas the same dropout masks."""
        rank, world = self._replica()
        if world > 1:  # dropout: independent masks per replica and step
            torch.manual_seed(int(np.random.default_rng([self.train_config.seed, 17, k, rank]).integers(2**62)))
        if feats["aatype"].dim() < 3:  # no recycling dim: every iteration on the same features
            self.last_num_iterations = self.model_config.num_recycles + 1
            return self.model(feats), feats
        n = self.num_iterations(k, feats["aatype"].shape[-1])
        self.last_num_iterations = n
        feats = first_iterations(feats, n)
        return self.model(feats, recycle_dim=-1), last_iteration(feats)

    def prepare_targets(self, out: dict, feats: dict, batch: Batch, k: int) -> dict:
        """The loss batch of step ``k`` from the features of the last iteration: here unchanged; the
        multimer module aligns the ground-truth chains first (:mod:`.multimer_module`)."""
        return feats

    def step_loss(self, feats: dict, batch: Batch, k: int) -> tuple[torch.Tensor, dict, dict, dict]:
        """Forward and loss of training step ``k`` (what :meth:`training_step` differentiates):
        ``(loss, terms, outputs, loss batch)``; a pure function of the weights, ``feats`` and ``k``
        (and the torch RNG, for dropout)."""
        out, feats = self.step_forward(feats, k)
        feats = self.prepare_targets(out, feats, batch, k)
        feats["use_clamped_fape"] = self._use_clamped_fape(feats["aatype"].shape[0], k).to(self.device)
        loss, terms = self.loss_fn(out, feats)
        return loss, terms, out, feats

    def training_step(self, batch: Batch, batch_idx: int) -> Optional[torch.Tensor]:
        k = self.batches_seen
        self.batches_seen += 1
        opt, sched = self.optimizers(), self.lr_schedulers()
        feats = dict(batch.features)
        bad_input = feature_value_problem(feats, sample_ids=batch.sample_ids, batched=True)  # before the model
        if not self._all_ranks_ok(bad_input is None):
            return self._skip([f"or out-of-range input ({bad_input or 'on another rank'})"], batch, None)

        loss, terms, out, feats = self.step_loss(feats, batch, k)
        n = feats["aatype"].shape[0]
        bad = [name for name, t in terms.items() if not torch.isfinite(t).all()]
        if not self._all_ranks_ok(not bad):
            return self._skip(bad or ["loss on another rank"], batch, loss)
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        grads_ok = all(torch.isfinite(p.grad).all() for p in self.model.parameters() if p.grad is not None)
        if not self._all_ranks_ok(grads_ok):
            opt.zero_grad(set_to_none=True)
            return self._skip(["gradient"], batch, loss)
        self.bad_steps = 0
        self.clip_gradients(opt, gradient_clip_val=self.train_config.grad_clip_norm, gradient_clip_algorithm="norm")
        lr = sched.get_last_lr()[0]  # the rate this step uses
        opt.step()
        sched.step()
        self.ema.update()

        with torch.no_grad():
            lddt = lddt_ca(
                out["final_atom_positions"].float(),
                feats["all_atom_positions"],
                feats["all_atom_mask"] * feats["seq_mask"][..., None],
            ).mean()
        bs = n
        self.log("train/loss", loss.detach(), prog_bar=True, batch_size=bs)
        self.log("train/lddt_ca", lddt, prog_bar=True, batch_size=bs)
        self.log("train/lr", lr, batch_size=bs)
        self.log("train/recycling_iterations", float(self.last_num_iterations), batch_size=bs)
        for name, t in terms.items():
            self.log(f"train/{name}", t.detach().mean(), batch_size=bs)
        return loss.detach()

    def _all_ranks_ok(self, ok: bool) -> bool:
        flag = torch.tensor(0.0 if ok else 1.0, device=self.device)
        if self.trainer is not None and self.trainer.world_size > 1:
            flag = self.trainer.strategy.reduce(flag, reduce_op="max")
        return bool(flag.item() == 0.0)

    def _skip(self, terms: list[str], batch: Batch, loss: torch.Tensor) -> None:
        self.bad_steps += 1
        self.skipped_steps += 1
        msg = (
            f"non-finite {', '.join(terms)} at step {self.global_step} (batch {self.batches_seen - 1}), "
            f"samples {list(batch.sample_ids)}: step skipped ({self.bad_steps} in a row)"
        )
        log.warning(msg)
        self.log("train/skipped_steps", float(self.skipped_steps), batch_size=len(batch.sample_ids))
        if self.bad_steps >= self.train_config.max_consecutive_bad_steps:
            raise NonFiniteLossError(
                f"training aborted: {self.bad_steps} consecutive steps had non-finite values (last: {msg}); "
                "lower the learning rate, use --precision 32, or check the samples named above"
            )
        return None

    def configure_optimizers(self):
        tc = self.train_config
        opt = torch.optim.Adam(self.model.parameters(), lr=tc.lr, betas=tc.adam_betas, eps=tc.adam_eps)
        sched = af2_scheduler(opt, tc.warmup_steps, tc.decay_after_steps, tc.decay_every_steps, tc.decay_factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- validation (EMA weights) -----------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._ema_ctx = self.ema.average_parameters()
        self._ema_ctx.__enter__()

    def on_validation_epoch_end(self) -> None:
        if self._ema_ctx is not None:
            self._ema_ctx.__exit__(None, None, None)
            self._ema_ctx = None

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        f = batch.features
        out = self.model(f)
        mask = f["all_atom_mask"] * f["seq_mask"][..., None]
        pred = out["final_atom_positions"].float()
        self.log(
            "val/lddt_ca",
            lddt_ca(pred, f["all_atom_positions"], mask).mean(),
            prog_bar=True,
            batch_size=1,
            sync_dist=True,
        )
        self.log("val/ca_rmsd", ca_rmsd(pred, f["all_atom_positions"], mask).mean(), batch_size=1, sync_dist=True)

    # -- checkpoints ------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["alphafold_mem"] = {
            "model_config": self.model_config.to_dict(),
            "train_config": self.train_config.to_dict(),
            "ema": self.ema.state_dict(),
            "rng": _rng_state(),
            "batches_seen": self.batches_seen,
            "bad_steps": self.bad_steps,
            "skipped_steps": self.skipped_steps,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        meta = checkpoint.get("alphafold_mem")
        if meta is None:
            raise ValueError("not an alphafold-mem training checkpoint (no 'alphafold_mem' entry)")
        check_config_compatible(meta["model_config"], self.model_config)
        checkpoint["state_dict"] = {
            f"model.{k}": v for k, v in normalize_state_dict_keys(checkpoint["state_dict"]).items()
        }
        self.ema.load_state_dict(meta["ema"])
        self.batches_seen = int(meta["batches_seen"])
        self.bad_steps = int(meta.get("bad_steps", 0))
        self.skipped_steps = int(meta.get("skipped_steps", 0))
        self._pending_rng = meta.get("rng")

    def on_train_start(self) -> None:
        if self._pending_rng is not None:  # restored here, after the sanity check, before the first step
            _set_rng_state(self._pending_rng)
            self._pending_rng = None


@torch.no_grad()
def evaluate_lddt(model: AlphaFold, dataset, max_chains: Optional[int] = None) -> dict[str, float]:
    """Mean lDDT-Cα and Cα-RMSD of ``model`` (eval mode) over the samples of ``dataset`` (full chains).
    Returns ``{"lddt_ca", "ca_rmsd", "per_chain": {sample_id: lddt}}``.
    """
    was_training = model.training
    model.eval()
    per, rmsds = {}, []
    n = len(dataset) if max_chains is None else min(len(dataset), max_chains)
    for i in range(n):
        b = collate([dataset[i]])
        f = b.features
        out = model(f)
        mask = f["all_atom_mask"] * f["seq_mask"][..., None]
        per[b.sample_ids[0]] = float(lddt_ca(out["final_atom_positions"].float(), f["all_atom_positions"], mask))
        rmsds.append(float(ca_rmsd(out["final_atom_positions"].float(), f["all_atom_positions"], mask)))
    model.train(was_training)
    return {
        "lddt_ca": float(np.mean(list(per.values()))) if per else float("nan"),
        "ca_rmsd": float(np.mean(rmsds)) if rmsds else float("nan"),
        "per_chain": per,
    }
