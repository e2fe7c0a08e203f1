"""Exponential moving average of the weights, used for evaluation (Jumper et al. 2021, Suppl.
1.11.7: decay 0.999)."""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn


class EMA:
    """fp32 shadow copies of a module's floating-point parameters and buffers.

    ``update()`` after every optimiser step: ``shadow = decay * shadow + (1 - decay) * param``.
    ``average_parameters()`` temporarily loads the shadow into the module (e.g. for validation).

    Args:
        module: the model (its ``state_dict`` keys name the shadow entries).
        decay: the EMA decay (0.999 in AF2).
    """

    def __init__(self, module: nn.Module, decay: float = 0.999):
        self.module, self.decay = module, decay
        self.shadow = {k: v.detach().float().clone() for k, v in module.state_dict().items() if v.is_floating_point()}

    @torch.no_grad()
    def update(self) -> None:
        for k, v in self.module.state_dict().items():
            if k in self.shadow:
                s = self.shadow[k]
                if s.device != v.device:
                    self.shadow[k] = s = s.to(v.device)
                s.mul_(self.decay).add_(v.detach().float(), alpha=1.0 - self.decay)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.decay = state["decay"]
        missing = set(self.shadow) - set(state["shadow"])
        if missing:
            raise KeyError(f"EMA state lacks {sorted(missing)[:5]} ...")
        self.shadow = {k: v.float().clone() for k, v in state["shadow"].items() if k in self.shadow}

    @contextlib.contextmanager
    def average_parameters(self):
        """Swap the EMA weights in for the duration of the block, then restore the live ones."""
        sd = self.module.state_dict()
        backup = {k: sd[k].detach().clone() for k in self.shadow}
        with torch.no_grad():
            for k, v in self.shadow.items():
                sd[k].copy_(v.to(sd[k].dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for k, v in backup.items():
                    sd[k].copy_(v)
