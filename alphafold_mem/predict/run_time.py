"""Predicted run time of a target's forward on this device: ``seconds = FLOPs / rate``.

* FLOPs (:func:`forward_flops`): a closed form of the model's dominant operations at the target's
  sizes ``(N_res, N_seq, N_extra, N_templ)``, per AF2 supplement algorithm (MSA row and column
  attention, Alg. 7, 8, 19; transitions, Alg. 9, 15; outer product mean, Alg. 10; triangle updates,
  Alg. 11-14; template pair stack, Alg. 16; invariant point attention, Alg. 22), counting a
  multiply-add as 2, times the iterations (1 + recycles).
* rate (:class:`RateStore`): FLOP/s of *this model's* forward on *this device*, measured: read from a
  small JSON store in the user's cache folder keyed by device name, preset, precision and whether the
  CPU forward's peak is measured (a slower forward); when the
  store has none, a timed calibration of the loaded model's first Evoformer block at
  :data:`CALIBRATION_SIZES` measures it once (a fraction of a second) and stores it;
  each target a run completes replaces it with that target's measured rate when the target is larger
  than the stored measurement.

Why a rate of the model itself and not of a matmul benchmark: on CPU AF2's forward spends much of its
time in attention softmax, LayerNorm and element-wise work that a matmul's FLOP/s does not see; the
model's own blocks include them. A calibration at a small size has more per-operation overhead than
a long target, so its rate is low and its predictions err long, on the side of warning; the rates of
completed targets correct it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Optional

import torch

from ..config import ModelConfig
from ..io import atomic_write

__all__ = ["CALIBRATION_SIZES", "RateStore", "calibrate", "device_name", "format_seconds", "forward_flops"]

#: ``(N_res, N_seq)`` of the calibration: one Evoformer block of the loaded model.
CALIBRATION_SIZES = (64, 32)


def _lin(rows: float, c_in: float, c_out: float) -> float:
    return 2.0 * rows * c_in * c_out


def _gated_attention(rows: float, length: float, c_in: float, heads: int, c: int, bias_rows: float = 0, c_z=0) -> float:
    """Gated self-attention over ``rows`` sequences of ``length`` (q, k, v, gate, output projections,
    logits and weighted sum; a pair bias projected from ``bias_rows`` pair entries)."""
    proj = 4 * _lin(rows * length, c_in, heads * c) + _lin(rows * length, heads * c, c_in)
    return proj + 2 * 2.0 * rows * heads * length * length * c + _lin(bias_rows, c_z, heads)


def _pair_stack(n: float, c_z: int, mul: int, heads: int, c_att: int, transition_n: int) -> float:
    """Triangle multiplications (Alg. 11, 12), triangle attentions (Alg. 13, 14), pair transition."""
    nn = n * n
    tri_mul = 4 * _lin(nn, c_z, mul) + _lin(nn, c_z, c_z) + 2.0 * n * nn * mul + _lin(nn, mul, c_z)
    tri_att = _gated_attention(n, n, c_z, heads, c_att, bias_rows=nn, c_z=c_z)
    return 2 * tri_mul + 2 * tri_att + 2 * _lin(nn, c_z, transition_n * c_z)


def _msa_block(n: float, s: float, c: int, c_z: int, stack, column_global: bool) -> float:
    """One Evoformer (or extra-MSA) block over an MSA of ``s`` rows and ``c`` channels."""
    row = _gated_attention(s, n, c, stack.num_heads_msa, stack.c_hidden_msa_att, bias_rows=n * n, c_z=c_z)
    if column_global:  # Alg. 19: one query per column
        col = (
            4 * _lin(s * n, c, stack.c_hidden_msa_att) + 2 * 2.0 * n * stack.num_heads_msa * s * stack.c_hidden_msa_att
        )
    else:
        col = _gated_attention(n, s, c, stack.num_heads_msa, stack.c_hidden_msa_att)
    transition = 2 * _lin(s * n, c, stack.transition_n * c)
    o = stack.c_hidden_opm
    opm = 2 * _lin(s * n, c, o) + 2.0 * s * n * n * o * o + _lin(n * n, o * o, c_z)
    pair = _pair_stack(n, c_z, stack.c_hidden_mul, stack.num_heads_pair, stack.c_hidden_pair_att, stack.transition_n)
    return row + col + transition + opm + pair


def forward_flops(config: ModelConfig, sizes: tuple[int, int, int, int], iterations: Optional[int] = None) -> float:
    """FLOPs of one forward at ``sizes = (N_res, N_seq, N_extra, N_templ)`` over ``iterations``
    (default ``1 + config.num_recycles``); see the module docstring for what is counted."""
    n, s, e, t = (float(x) for x in sizes)
    iterations = config.num_recycles + 1 if iterations is None else iterations
    ev, ex = config.evoformer, config.extra_msa
    total = ev.num_blocks * _msa_block(n, s, config.c_m, config.c_z, ev, column_global=False)
    if e > 0:
        total += ex.num_blocks * _msa_block(n, e, config.c_e, config.c_z, ex, column_global=True)
    if config.template.enabled and t > 0:
        ps = config.template.pair_stack
        stack = _pair_stack(
            n, config.c_t, ps.c_hidden_tri_mul, ps.num_heads_tri_att, ps.c_hidden_tri_att, ps.transition_n
        )
        total += t * ps.num_blocks * stack
    sm = config.structure_module
    ipa = _lin(n, config.c_s, sm.num_heads_ipa * (3 * sm.c_ipa + 3 * (2 * sm.num_qk_points + sm.num_v_points)))
    ipa += 2.0 * n * n * sm.num_heads_ipa * (2 * sm.c_ipa + 2 * 3 * sm.num_qk_points + config.c_z)
    total += sm.num_layers * ipa + _lin(n * n, config.c_z, config.c_z)  # + the pair's heads, roughly
    return iterations * total


def device_name(device: torch.device) -> str:
    """The device as the rate store keys it: the GPU's name, or the CPU's model and torch's threads."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {torch.get_num_threads()} thread(s)"


def format_seconds(seconds: float) -> str:
    """``"45 s"``, ``"12 min 05 s"``, ``"3 h 20 min"``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class RateStore:
    """Measured FLOP/s per (device, preset, precision) in ``<cache>/run_rates.json``; the cache folder
    is ``$ALPHAFOLD_MEM_CACHE``, else ``$XDG_CACHE_HOME/alphafold_mem``, else ``~/.cache/alphafold_mem``.
    A store that cannot be read or written is treated as empty (the estimate calibrates again)."""

    def __init__(self, path: Optional[os.PathLike] = None):
        if path is None:
            root = os.environ.get("ALPHAFOLD_MEM_CACHE") or os.path.join(
                os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "alphafold_mem"
            )
            path = os.path.join(root, "run_rates.json")
        self.path = os.fspath(path)

    @staticmethod
    def key(device: torch.device, preset: str, precision: str, tracked: bool = False) -> str:
        """The store's key: device, preset, precision, and whether the forward's peak is measured on
        CPU (:class:`~.timings.Stages`: a slower forward)."""
        return f"{device_name(device)} | {preset} | {precision}" + (" | peak measured" if tracked else "")

    def _read(self) -> dict:
        try:
            with open(self.path) as fh:
                data = json.load(fh)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> Optional[dict]:
        """``{"flop_per_s", "flops", "source"}`` stored for ``key``, or ``None``."""
        entry = self._read().get(key)
        ok = isinstance(entry, dict) and isinstance(entry.get("flop_per_s"), (int, float)) and entry["flop_per_s"] > 0
        return entry if ok else None

    def record(self, key: str, flops: float, seconds: float, source: str) -> Optional[dict]:
        """Store the rate ``flops / seconds`` measured by ``source`` unless a larger measurement is
        stored; returns the entry stored for ``key`` afterwards."""
        old = self.get(key)
        if seconds <= 0 or flops <= 0 or (old is not None and old.get("flops", 0) > flops and source != "calibration"):
            return old
        data = self._read()
        data[key] = {"flop_per_s": flops / seconds, "flops": flops, "seconds": round(seconds, 4), "source": source}
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with atomic_write(self.path) as tmp, open(tmp, "w") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
        except OSError:
            pass
        return data[key]


def calibrate(model: torch.nn.Module, device: torch.device, track: bool = False) -> tuple[float, float]:
    """``(FLOPs, seconds)`` of the model's first Evoformer block (Alg. 6) on random representations of
    :data:`CALIBRATION_SIZES` ``(N_res, N_seq)``, timed after one untimed warm-up: the model's own
    operations (attention, LayerNorm, triangle updates) under its bound memory policy, in fp32;
    ``track``: inside :func:`alphafold_mem.memory.track_peak`, as a CPU forward whose peak is measured
    runs (its dispatch mode slows every op)."""
    # on demand: the tracker is needed only when a calibration is tracked
    from ..memory import track_peak

    n, s = CALIBRATION_SIZES
    cfg = model.config
    block = model.evoformer.blocks[0]
    g = torch.Generator(device="cpu").manual_seed(0)
    m = torch.randn(s, n, cfg.c_m, generator=g).to(device)
    z = torch.randn(n, n, cfg.c_z, generator=g).to(device)
    msa_mask, pair_mask = torch.ones(s, n, device=device), torch.ones(n, n, device=device)
    seconds = 0.0
    with torch.inference_mode():
        for _ in range(2):  # the first warms up (allocator, kernels)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            with track_peak(device) if track else contextlib.nullcontext():
                block(m.clone(), z.clone(), msa_mask, pair_mask)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds = time.perf_counter() - start
    return _msa_block(float(n), float(s), cfg.c_m, cfg.c_z, cfg.evoformer, column_global=False), seconds
