"""Predicting peak memory without allocating it: :func:`estimate_peak` runs the model under
:class:`~torch._subclasses.fake_tensor.FakeTensorMode` (tensors carry shapes and dtypes, no data)
with the same storage tracker that :func:`~alphafold_mem.memory.track_peak` uses on CPU, and adds the
bytes of the parameters and inputs.

Device: the prediction is for ``device``. On CPU host offload is a no-op, so nothing moves; for an
accelerator (any other device type) the estimator simulates one
(:func:`alphafold_mem.memory.offload.simulated_device`): what the policy parks in host memory leaves
the count while it is there, and the host bytes are reported separately.

Shortcuts that do not change the prediction (the "full trace" runs without them; they agree to
well under 1 %, ``tests/test_memory_estimate.py``):

* inference: every Evoformer-type block has the same memory profile, so the stacks run with one
  block each under in-place updates (two otherwise: the first block's inputs, still held by the
  caller, are alive during the second) and one recycling iteration (a later iteration holds the
  same recycled state the first one creates); every regular loop (chunks, low-memory attention's query/key blocks,
  streamed templates and buffers) runs its first two iterations, and the structure module its
  first and last layer with the outputs of the others allocated (:func:`first_chunk_only`). The
  number of traced ops, hence the time, no longer grows with N_res;
* training: forward and backward of the real AF2 loss on fake ground truth of the right shapes
  (:mod:`.training_loss`), on the last recycling iteration only (earlier ones run without autograd
  and peak lower); the stacks run with one and two blocks and the peak is extrapolated linearly in
  the block counts (see :func:`estimate`).

The fake model of a config is built once per process and re-bound for every policy.

What the prediction is: the activation peak seen by the storage tracker (see
:mod:`alphafold_mem.memory.tracking` for what it counts) plus parameters plus inputs. On CUDA the
caching allocator's rounding and fragmentation come on top (typically a few percent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from typing import Optional

import torch
from torch import Tensor

from ..binding import bind
from ..config import ModelConfig, apply_overrides
from ..distributed.comm import simulated_group
from ..memory.chunking import first_chunk_only, traced_chains
from ..memory.offload import simulated_device
from ..memory.policy import MemoryPolicy
from ..model.alphafold import AlphaFold
from . import cache, opcache, replay
from .chains import Chains
from .trace import OverLimit, PlanTracker
from .training_loss import ground_truth_batch, training_loss


@dataclasses.dataclass(frozen=True)
class PeakEstimate:
    """Predicted bytes on the device: ``total = parameters + inputs + activations``; ``host``: the
    most bytes parked in host memory at once (0 on CPU or without offload); ``lower_bound``: the
    peak is at least ``total`` (the trace stopped past its limit), else ``total`` is the prediction."""

    parameters: int
    inputs: int
    activations: int
    chunk_size: Optional[int]
    host: int = 0
    #: the trace stopped when the running total passed the limit it was given (``limit`` of
    #: :func:`estimate_breakdown`): ``total`` is a lower bound of the peak, above that limit
    lower_bound: bool = False

    @property
    def total(self) -> int:
        return self.parameters + self.inputs + self.activations


def feature_batch(
    config: ModelConfig,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    chains: Optional[Chains] = None,
) -> dict[str, Tensor]:
    """A batch with the shapes and dtypes of :func:`alphafold_mem.testing.random_features` (no batch
    dim), filled with zeros and ones: what the estimator feeds the model. Works under FakeTensorMode.
    A multimer config gets the chain features of ``chains`` (:meth:`.chains.Chains.features`; default
    one chain of ``n_res``).

    Raises:
        ValueError: ``chains`` whose residues are not ``n_res``."""
    n, s, e, t = n_res, n_seq, n_extra_seq, n_templ
    ie = config.input_embedder

    def f(*shape):
        return torch.ones(*shape, dtype=dtype, device=device)

    def i(*shape):
        return torch.zeros(*shape, dtype=torch.long, device=device)

    batch = {
        "aatype": i(n),
        "residue_index": torch.arange(n, device=device),
        "seq_mask": f(n),
        "target_feat": f(n, ie.tf_dim),
        "msa_feat": f(s, n, ie.msa_dim),
        "msa_mask": f(s, n),
        "extra_msa": i(e, n),
        "extra_msa_mask": f(e, n),
        "extra_has_deletion": f(e, n),
        "extra_deletion_value": f(e, n),
        "atom37_atom_exists": f(n, 37),
    }
    if config.multimer:
        chains = chains or Chains((n,))
        if chains.n_res != n:
            raise ValueError(f"the chains hold {chains.n_res} residues, the batch {n} (N_res)")
        batch.update({**chains.features(device), "extra_deletion_matrix": f(e, n)})
    if config.template.enabled:
        t = max(t, 1)
        batch.update(
            {
                "template_aatype": i(t, n),
                "template_all_atom_positions": f(t, n, 37, 3),
                "template_all_atom_mask": f(t, n, 37),
                "template_pseudo_beta": f(t, n, 3),
                "template_pseudo_beta_mask": f(t, n),
                "template_mask": f(t),
                "template_torsion_angles_sin_cos": f(t, n, 7, 2),
                "template_alt_torsion_angles_sin_cos": f(t, n, 7, 2),
                "template_torsion_angles_mask": f(t, n, 7),
            }
        )
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


def training_sizes(config: ModelConfig) -> tuple[int, int, int, int]:
    """``(N_res, N_seq, N_extra, N_templ)`` of a training sample of ``config``: the crop, the MSA
    clusters (fewer by the templates when the config says so), the extra sequences and the templates
    (AF2 Suppl. 1.2.8, 1.11.3), the largest a training step sees."""
    d = config.data
    n_templ = config.template.max_templates if config.template.enabled else 0
    n_seq = d.max_msa_clusters - (n_templ if d.reduce_msa_clusters_by_max_templates else 0)
    return d.crop_size, max(1, n_seq), d.max_extra_msa, n_templ


def proxy_loss(out: dict[str, Tensor]) -> Tensor:
    """A stand-in loss (mean squares of the structure-module positions and of every head's output),
    kept for comparisons with OpenFold's model alone; the training estimate runs the real loss."""
    keys = (
        "final_atom_positions",
        "sm_positions",
        "sm_frames",
        "lddt_logits",
        "distogram_logits",
        "masked_msa_logits",
        "experimentally_resolved_logits",
        "pae_logits",
    )
    return sum(out[k].float().pow(2).mean() for k in keys if k in out)


_STACKS = ("evoformer.num_blocks", "extra_msa.num_blocks", "template.pair_stack.num_blocks")


def _get(config: ModelConfig, path: str):
    for name in path.split("."):
        config = getattr(config, name)
    return config


@functools.lru_cache(maxsize=None)
def parameter_bytes(config: ModelConfig, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the model's parameters (built on the meta device, nothing allocated; kept on disk,
    :mod:`.cache`)."""

    def count() -> int:
        with torch.device("meta"):
            model = AlphaFold(config)
        return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()

    return cache.cached_value("parameters", (config, dtype), count)


_fakes = threading.local()


def _fake_model(config: ModelConfig, dtype: torch.dtype):
    """``(mode, model)``: one FakeTensorMode per thread and the fake model of ``config`` in it,
    built once (rebinding a policy changes no parameter)."""
    if not hasattr(_fakes, "mode"):
        _fakes.mode, _fakes.models = opcache.PlanFakeMode(allow_non_fake_inputs=True), {}
    key = (config, dtype)
    if key not in _fakes.models:
        with torch.device("meta"):
            model = AlphaFold(config).to(dtype)  # no initialisation runs on data: it is never read
        with _fakes.mode:
            _fakes.models[key] = model.to_empty(device="cpu")
    return _fakes.mode, _fakes.models[key]


def _activation_peak(
    config: ModelConfig,
    policy: MemoryPolicy,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int,
    training: bool,
    dtype: torch.dtype,
    device: str,
    cut: bool = True,
    dap: int = 1,
    limit: Optional[int] = None,
    watch: tuple[str, ...] = (),
    chains: Optional[Chains] = None,
) -> tuple[int, int, int, bool]:
    """(inputs, activation peak, host peak, stopped) of one fake run of ``config`` exactly as given
    (``cut``: with the estimator's loop cut; ``dap > 1``: of one device of a simulated DAP group).
    ``limit``: stop once inputs + activations pass it (``stopped``: the peak returned is a lower
    bound above the limit; parameters are the caller's, who knows the full model's). ``watch``: the
    module paths of the stacks (:data:`_STACK_MODULES`) that run one block standing for longer ones
    (:class:`~alphafold_mem.planner.trace.PlanTracker`'s per-stack correction)."""
    mode, model = _fake_model(config, dtype)
    mode.cache_enabled = training or not opcache.ENABLED  # inference: the tracker's recipes serve (.opcache)
    with mode:
        # under DAP this process plays rank 0 of a simulated group: every collective allocates its
        # buffers as on a real group and communicates nothing; training gathers the outputs (the loss
        # reads them whole), inference leaves them distributed
        bind(model, policy, simulated_group(dap) if dap > 1 else None, gather_outputs=training)
        model.train(training)
        model.zero_grad(set_to_none=True)
        batch = feature_batch(config, n_res, n_seq, n_extra_seq, n_templ, dtype=dtype, chains=chains)
        if training:  # the real AF2 loss on fake ground truth (planner/training_loss.py)
            batch.update(ground_truth_batch(config, n_res, n_seq))
        inputs = sum(t.untyped_storage().nbytes() for t in batch.values())
        tracker = PlanTracker(None if limit is None else limit - inputs)
        hooks = [h for path in watch for h in tracker.watch_stack(_get(model, path)[0])]
        sim = simulated_device(tracker) if torch.device(device).type != "cpu" else contextlib.nullcontext()
        cut_loops = first_chunk_only() if cut else contextlib.nullcontext()
        count = traced_chains(len(chains.lengths) if chains is not None else (1 if config.multimer else None))
        grad = torch.enable_grad() if training else torch.inference_mode()
        # inference with the loops cut: a module call that recurs is replayed, not traced (.replay)
        replayed = replay.install(model, tracker) if cut and not training else contextlib.nullcontext()
        stopped = False
        try:
            with grad, cut_loops, count, sim, tracker, replayed:
                out = model(batch)
                if training:
                    training_loss(config, out, batch).backward()
                del out
        except OverLimit:
            stopped = True
        finally:
            for h in hooks:
                h.remove()
            model.zero_grad(set_to_none=True)
    return inputs, max(tracker.peak, tracker.corrected_peak), tracker.host_peak, stopped


def estimate_breakdown(
    config: ModelConfig,
    policy: MemoryPolicy,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int = 0,
    training: bool = False,
    dtype: torch.dtype = torch.float32,
    exact: bool = True,
    device: torch.device | str = "cpu",
    full_trace: bool = False,
    dap: int = 1,
    limit: Optional[int] = None,
    chains: Optional[Chains] = None,
) -> PeakEstimate:
    """Like :func:`estimate_peak` but returns the :class:`PeakEstimate` breakdown (kept per arguments in
    this process and on disk, :mod:`.cache`; ``dap``: per device of a DAP group of that size, see
    :mod:`alphafold_mem.planner.dap`; ``chains``: a multimer config's complex, :mod:`.chains`).

    ``limit`` (bytes; for a fits / does-not-fit decision): the trace may stop as soon as the running
    total passes it; the estimate then has ``lower_bound=True`` and a ``total`` above ``limit``
    (a peak known exactly is returned as it is). Without ``limit`` the estimate is exact.

    Block counts: inference runs one block per stack, corrected for the second block of a longer
    stack (:class:`~alphafold_mem.planner.trace.PlanTracker`; every later block repeats the second).
    Training runs the full stacks unless ``exact=False``: then the stacks run with one block and,
    one stack at a time, two, and the peak is extrapolated linearly to the real counts. That is
    exact when the peak is set by what grows with the blocks (saved activations, checkpoint
    boundaries) at one and two blocks already, and an underestimate when a fixed transient sets it
    there but the growing part dominates at the real count (seen with bf16 checkpointed training).
    ``full_trace=True`` runs every block, chunk and layer (the reference for the shortcuts; slow at
    large N_res).

    Raises:
        ValueError: ``policy.chunk_size == "auto"`` (resolve it first:
            :func:`alphafold_mem.planner.resolve_policy`).
    """
    if policy.chunk_size == "auto":
        raise ValueError(
            "estimate_breakdown needs a concrete chunk size; resolve chunk_size='auto' first "
            "(alphafold_mem.planner.resolve_policy)"
        )
    dev = "cpu" if torch.device(device).type == "cpu" else "cuda"
    key = (config, policy, n_res, n_seq, n_extra_seq, n_templ, training, dtype, exact, dev, full_trace, dap)
    key += (chains,) if chains is not None and config.multimer else ()  # one chain: the key as before
    return cache.cached_estimate(key, None if limit is None else int(limit), _trace, lambda d: PeakEstimate(**d))


#: the stacks' module paths in the model, by config path
_STACK_MODULES = {
    "evoformer.num_blocks": "evoformer.blocks",
    "extra_msa.num_blocks": "extra_msa_stack.blocks",
    "template.pair_stack.num_blocks": "template_embedding.blocks",
}


def _trace(
    config: ModelConfig,
    policy: MemoryPolicy,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int,
    training: bool,
    dtype: torch.dtype,
    exact: bool,
    device: str,
    full_trace: bool,
    dap: int = 1,
    chains: Optional[Chains] = None,
    limit: Optional[int] = None,
) -> PeakEstimate:
    params = parameter_bytes(config, dtype)
    config = apply_overrides(config, {"num_recycles": 0})
    limit = None if limit is None else limit - params  # what inputs + activations may take
    stacks = [p for p in _STACKS if p != _STACKS[2] or config.template.enabled]
    counts = {p: _get(config, p) for p in stacks}
    args = (n_res, n_seq, n_extra_seq, n_templ, training, dtype, device)
    run = functools.partial(_activation_peak, chains=chains)
    segments = (policy.checkpoint_evoformer, policy.checkpoint_extra_msa, policy.checkpoint_template)
    stopped = False
    if full_trace:
        inputs, act, host, stopped = run(config, policy, *args, cut=False, dap=dap, limit=limit)
    elif not training:  # one block per stack; a stack of two or more is corrected for its second block,
        # which also holds the first block's inputs when the updates are not in place (PlanTracker)
        cut = apply_overrides(config, {p: min(n, 1) for p, n in counts.items()})
        watch = tuple(_STACK_MODULES[p] for p, n in counts.items() if n >= 2)
        inputs, act, host, stopped = run(cut, policy, *args, dap=dap, limit=limit, watch=watch)
    elif exact or max(segments) > 1 or max(counts.values()) <= 2:
        inputs, act, host, stopped = run(config, policy, *args, dap=dap, limit=limit)
    else:  # extrapolated: no early stop (the first traces do not bound the result)
        ones = {p: 1 for p in stacks}
        inputs, base, host, _ = run(apply_overrides(config, ones), policy, *args, dap=dap)
        act = base
        for p, n in counts.items():
            if n > 1:
                _, two, _, _ = run(apply_overrides(config, {**ones, p: 2}), policy, *args, dap=dap)
                act += (n - 1) * (two - base)
    return PeakEstimate(params, inputs, act, policy.chunk_size, host, lower_bound=stopped)


def estimate_peak(
    config: ModelConfig,
    policy: MemoryPolicy,
    n_res: int,
    n_seq: int,
    n_extra_seq: int,
    n_templ: int = 0,
    training: bool = False,
    device: torch.device | str = "cpu",
    dap: int = 1,
) -> int:
    """Predicted peak bytes of one forward (``training=False``, no autograd) or one training step
    (forward + backward, ``training=True``) of ``AlphaFold(config)`` under ``policy`` on ``device``,
    without allocating the memory (FakeTensorMode; see the module docstring for what is counted).

    Args:
        config: the model config (e.g. ``model_config("model_1")``).
        policy: the memory policy, with a concrete chunk size.
        n_res: N_res, residues.
        n_seq: N_seq, MSA clusters.
        n_extra_seq: N_extra, extra MSA sequences.
        n_templ: N_templ, templates.
        training: forward + backward instead of an inference forward.
        dap: the peak of one device when ``dap`` devices share the protein (dynamic axial
            parallelism; communication buffers included). Every device holds the parameters and the
            input features whole.
        device: ``"cpu"`` (host offload is a no-op) or an accelerator (``"cuda"``: offload simulated).

    Returns:
        Peak bytes on the device: parameters + inputs + activations (activations include gradients
        in training).
    """
    return estimate_breakdown(
        config, policy, n_res, n_seq, n_extra_seq, n_templ, training, device=device, dap=dap
    ).total


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


__all__ = [
    "PeakEstimate",
    "available_memory",
    "batch_sizes",
    "estimate_breakdown",
    "estimate_peak",
    "feature_batch",
    "parameter_bytes",
    "proxy_loss",
    "training_sizes",
]
