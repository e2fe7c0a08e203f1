"""Predicting peak memory without allocating it: :func:`estimate_peak` runs the model under
:class:`~torch._subclasses.fake_tensor.FakeTensorMode` (tensors carry shapes and dtypes, no data)
with the same storage tracker that :func:`~alphafold_mem.memory.track_peak` uses on CPU, and adds the
bytes of the parameters and inputs. ``chunk_size="auto"`` is resolved with it
(:func:`resolve_auto_chunk`).

Shortcuts that do not change the prediction:

* inference: every Evoformer-type block has the same memory profile, so the stacks run with at most
  two blocks each and one recycling iteration (a later iteration holds the same recycled state the
  first one creates); chunked ops run only their first chunk (:func:`first_chunk_only`);
* training: forward and backward of a proxy loss (the squared outputs of the structure module and
  every head, a stand-in for the AF2 loss whose own transients are small), on the last recycling
  iteration only (earlier ones run without autograd and peak lower); the stacks run with one and
  two blocks and the peak is extrapolated linearly in the block counts (see :func:`estimate`).

What the prediction is: the activation peak seen by the storage tracker (see
:mod:`alphafold_mem.memory.tracking` for what it counts) plus parameters plus inputs. On CUDA the
caching allocator's rounding and fragmentation come on top (typically a few percent).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch
from torch import Tensor

from ..config import ModelConfig, apply_overrides
from ..memory.bind import bind_memory_policy
from ..memory.chunking import first_chunk_only
from ..memory.policy import MemoryPolicy
from ..memory.tracking import StorageTracker
from ..model.alphafold import AlphaFold


@dataclasses.dataclass(frozen=True)
class PeakEstimate:
    """Predicted bytes: ``total = parameters + inputs + activations``."""

    parameters: int
    inputs: int
    activations: int
    chunk_size: Optional[int]

    @property
    def total(self) -> int:
        return self.parameters + self.inputs + self.activations


def feature_batch(config: ModelConfig, n_res: int, n_seq: int, n_extra_seq: int, n_templ: int = 0,
                  dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """A batch with the shapes and dtypes of :func:`alphafold_mem.testing.random_features` (no batch
    dim), filled with zeros and ones: what the estimator feeds the model. Works under FakeTensorMode."""
    n, s, e, t = n_res, n_seq, n_extra_seq, n_templ
    ie = config.input_embedder

    def f(*shape):
        return torch.ones(*shape, dtype=dtype, device=device)

    def i(*shape):
        return torch.zeros(*shape, dtype=torch.long, device=device)

    batch = {
        "aatype": i(n), "residue_index": torch.arange(n, device=device), "seq_mask": f(n),
        "target_feat": f(n, ie.tf_dim), "msa_feat": f(s, n, ie.msa_dim), "msa_mask": f(s, n),
        "extra_msa": i(e, n), "extra_msa_mask": f(e, n), "extra_has_deletion": f(e, n),
        "extra_deletion_value": f(e, n), "atom37_atom_exists": f(n, 37),
    }
    if config.template.enabled:
        t = max(t, 1)
        batch.update({
            "template_aatype": i(t, n), "template_all_atom_positions": f(t, n, 37, 3),
            "template_all_atom_mask": f(t, n, 37), "template_pseudo_beta": f(t, n, 3),
            "template_pseudo_beta_mask": f(t, n), "template_mask": f(t),
            "template_torsion_angles_sin_cos": f(t, n, 7, 2), "template_alt_torsion_angles_sin_cos": f(t, n, 7, 2),
            "template_torsion_angles_mask": f(t, n, 7),
        })
    return batch


def batch_sizes(batch: dict[str, Tensor], recycle_dim: Optional[int] = None) -> tuple[int, int, int, int]:
    """``(N_res, N_seq, N_extra, N_templ)`` of a feature batch (with or without batch / recycling dims)."""
    def shape(key: str) -> tuple[int, ...]:
        s = list(batch[key].shape)
        if recycle_dim is not None:
            del s[recycle_dim]
        return tuple(s)

    n_seq, n_res = shape("msa_mask")[-2:]
    n_extra = shape("extra_msa_mask")[-2]
    n_templ = shape("template_mask")[-1] if "template_mask" in batch else 0
    return n_res, n_seq, n_extra, n_templ


def proxy_loss(out: dict[str, Tensor]) -> Tensor:
    """The training-step stand-in loss of the estimator and the benchmark: mean squares of the
    structure-module positions and of every head's output."""
    keys = ("final_atom_positions", "sm_positions", "sm_frames", "lddt_logits", "distogram_logits",
            "masked_msa_logits", "experimentally_resolved_logits", "pae_logits")
    return sum(out[k].float().pow(2).mean() for k in keys if k in out)


_STACKS = ("evoformer.num_blocks", "extra_msa.num_blocks", "template.pair_stack.num_blocks")


def _get(config: ModelConfig, path: str):
    for name in path.split("."):
        config = getattr(config, name)
    return config


def parameter_bytes(config: ModelConfig, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the model's parameters (built on the meta device, nothing allocated)."""
    with torch.device("meta"):
        model = AlphaFold(config)
    return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()


def _activation_peak(config: ModelConfig, policy: MemoryPolicy, n_res: int, n_seq: int, n_extra_seq: int,
                     n_templ: int, training: bool, dtype: torch.dtype, dap: int = 1) -> tuple[int, int]:
    """(inputs, activation peak) of one fake run of ``config`` exactly as given (``dap > 1``: of one
    device of a simulated DAP group)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.device("meta"):
        model = AlphaFold(config).to(dtype)  # no initialisation runs on data: it is never read
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = model.to_empty(device="cpu")
        bind_memory_policy(model, policy)
        if dap > 1:
            from .dap import bind_simulated
            bind_simulated(model, dap, training)
        model.train(training)
        batch = feature_batch(config, n_res, n_seq, n_extra_seq, n_templ, dtype=dtype)
        inputs = sum(t.untyped_storage().nbytes() for t in batch.values())
        tracker = StorageTracker()
        with torch.set_grad_enabled(training), first_chunk_only(), tracker:
            out = model(batch)
            if training:
                proxy_loss(out).backward()
            del out
    return inputs, tracker.peak


def estimate_breakdown(config: ModelConfig, policy: MemoryPolicy, n_res: int, n_seq: int, n_extra_seq: int, n_templ: int = 0,
             training: bool = False, dtype: torch.dtype = torch.float32, exact: bool = True,
             dap: int = 1) -> PeakEstimate:
    """Like :func:`estimate_peak` but returns the :class:`PeakEstimate` breakdown (``dap``: per device
    of a DAP group of that size, see :mod:`alphafold_mem.planner.dap`).

    Block counts: inference runs at most two blocks per stack (every block has the same profile).
    Training runs the full stacks unless ``exact=False``: then the stacks run with one block and,
    one stack at a time, two, and the peak is extrapolated linearly to the real counts. That is
    exact when the peak is set by what grows with the blocks (saved activations, checkpoint
    boundaries) at one and two blocks already, and an underestimate when a fixed transient sets it
    there but the growing part dominates at the real count (seen with bf16 checkpointed training).
    """
    if policy.chunk_size == "auto":
        chunk = resolve_auto_chunk(config, policy, n_res, n_seq, n_extra_seq, n_templ, training=training)
        policy = policy.replace(chunk_size=chunk)
    params = parameter_bytes(config, dtype)
    config = apply_overrides(config, {"num_recycles": 0})
    stacks = [p for p in _STACKS if p != _STACKS[2] or config.template.enabled]
    counts = {p: _get(config, p) for p in stacks}
    args = (n_res, n_seq, n_extra_seq, n_templ, training, dtype, dap)
    segments = (policy.checkpoint_evoformer, policy.checkpoint_extra_msa, policy.checkpoint_template)
    if not training:
        inputs, act = _activation_peak(apply_overrides(config, {p: min(n, 2) for p, n in counts.items()}), policy, *args)
    elif exact or max(segments) > 1 or max(counts.values()) <= 2:
        inputs, act = _activation_peak(config, policy, *args)
    else:
        ones = {p: 1 for p in stacks}
        inputs, base = _activation_peak(apply_overrides(config, ones), policy, *args)
        act = base
        for p, n in counts.items():
            if n > 1:
                _, two = _activation_peak(apply_overrides(config, {**ones, p: 2}), policy, *args)
                act += (n - 1) * (two - base)
    return PeakEstimate(params, inputs, act, policy.chunk_size)


def estimate_peak(config: ModelConfig, policy: MemoryPolicy, n_res: int, n_seq: int, n_extra_seq: int,
                  n_templ: int = 0, training: bool = False, dap: int = 1) -> int:
    """Predicted peak bytes of one forward (``training=False``, no autograd) or one training step
    (forward + backward, ``training=True``) of ``AlphaFold(config)`` under ``policy``, without
    allocating the memory (FakeTensorMode; see the module docstring for what is counted).

    Args:
        config: the model config (e.g. ``model_config("model_1")``).
        policy: the memory policy; ``chunk_size="auto"`` is resolved first.
        n_res, n_seq, n_extra_seq, n_templ: N_res, N_seq (MSA clusters), N_extra, N_templ.
        training: forward + backward instead of an inference forward.
        dap: the peak of one device when ``dap`` devices share the protein (dynamic axial
            parallelism; communication buffers included). Every device holds the parameters and the
            input features whole.

    Returns:
        Peak bytes: parameters + inputs + activations (activations include gradients in training).
    """
    return estimate_breakdown(config, policy, n_res, n_seq, n_extra_seq, n_templ, training, dap=dap).total


def available_memory(device: torch.device | str | None = None) -> int:
    """Free bytes on ``device``: ``torch.cuda.mem_get_info`` on CUDA, MemAvailable on a Linux host."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0]
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    raise RuntimeError("cannot determine free host memory; set MemoryPolicy.max_memory")


def chunk_candidates(n_res: int, n_seq: int, n_extra_seq: int) -> list[Optional[int]]:
    """``None`` (no chunking), then powers of two from the largest axis down to 1."""
    top = max(n_res, n_seq, n_extra_seq, 1)
    return [None] + [2 ** k for k in range(int(math.log2(top)), -1, -1) if 2 ** k < top]


def resolve_auto_chunk(config: ModelConfig, policy: MemoryPolicy, n_res: int, n_seq: int, n_extra_seq: int,
                       n_templ: int = 0, training: bool = False,
                       device: torch.device | str | None = None) -> Optional[int]:
    """The largest chunk size (``None`` = unchunked first) whose predicted peak fits the budget.

    Budget: ``policy.max_memory`` bytes for the whole peak (parameters and inputs included); if it is
    ``None``, the free memory of ``device`` for the activations (parameters and inputs are already
    resident). Falls back to 1 (the smallest) when nothing fits.
    """
    base = policy.replace(chunk_size=None)
    for chunk in chunk_candidates(n_res, n_seq, n_extra_seq):
        est = estimate_breakdown(config, base.replace(chunk_size=chunk), n_res, n_seq, n_extra_seq, n_templ, training)
        if policy.max_memory is not None:
            if est.total <= policy.max_memory:
                return chunk
        elif est.activations <= available_memory(device):
            return chunk
    return 1


__all__ = ["PeakEstimate", "available_memory", "batch_sizes", "chunk_candidates", "estimate_breakdown", "estimate_peak",
           "feature_batch", "parameter_bytes", "proxy_loss", "resolve_auto_chunk"]
