"""Fine-tuning AF2-Multimer from the parity weights (``tests/data/parity_multimer/params.npz``,
``model_1_multimer_v3`` layout): the first training step -- the multimer training module's forward,
permutation alignment against the whole-complex ground truth, the multimer losses and backward
(:meth:`AlphaFoldLightning.step_loss`) -- on a 40-residue crop of the dev heterodimer 2Q2K (its
alignments from ``data/alignments``), dropout on, one recycling iteration more than the first,
gives under each memory technique the plain path's loss and parameter gradients within the
monomer's tolerances:

* checkpointing alone (every block of every stack): bit for bit, as the monomer's
  ``tests/test_memory.py::test_checkpointing_changes_no_bit``;
* ``MemoryPolicy.training()`` (checkpointing plus low-memory attention, ``train``'s default): loss
  within 1e-5 relative, each parameter's gradient within ``GRAD_RTOL`` = 1e-4 relative (norm of the
  difference over the norm), the monomer's bound (``tests/test_memory.py``, ``tests/test_dap.py``);
* ``--precision bf16-mixed`` (the Trainer's CPU autocast around the step): loss within 10 % relative,
  the monomer's bf16-mixed bound (``tests/test_train.py::test_bf16_mixed_runs_with_finite_losses``);
  the monomer states no gradient bound for bf16 training: the whole gradient is held to the same
  10 % (norm of the difference over the norm) and a cosine >= 0.99 to the fp32 one;
* ``--dap 2`` (two gloo processes, 127.0.0.1, a time limit, gradients averaged as DDP does) equals
  one process: see :func:`test_dap_2_equals_one_process` for the bound of the terms whose targets
  are binned from the prediction.

Measured on this crop (loss 76.29; relative: norm of the difference over the norm): checkpointing 0
everywhere; ``training()`` loss 0, worst parameter 2.9e-6, whole gradient 4.8e-7; bf16-mixed loss
1.4e-3, whole gradient 3.7e-2 (cosine 0.9993; the pLDDT head's 0.69, its lDDT-bin targets move
with the bf16 structure); DAP 2 loss 3.5e-6, whole gradient 8.1e-5 (one PAE bin of 1600 flips),
without the binned terms worst parameter 1.5e-6 (plain) and 1.8e-6 (``training()``).
``alphafold-mem train --init-weights params.npz --dap 2`` runs one step end to end. Run with ``-s``
to print the differences.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np
import pytest
import torch

from alphafold_mem import MemoryPolicy
from alphafold_mem.cli import main
from alphafold_mem.config import apply_overrides
from alphafold_mem.data.complex_examples import load_complex_examples
from alphafold_mem.data.multimer_crop import MultimerCrop
from alphafold_mem.distributed import run_local
from alphafold_mem.train import TrainConfig
from alphafold_mem.train.init_weights import init_from_weights
from alphafold_mem.train.multimer_data import ComplexDraws, collate_complexes
from alphafold_mem.train.multimer_module import MultimerLightning, multimer_training_config
from alphafold_mem.weights import load_af2_params

from .conftest import REPO_DATA, TEST_DATA
from .test_dap import _mean_over_ranks
from .torchrun_fork import run_forked

PARAMS = TEST_DATA / "parity_multimer" / "params.npz"
GRAD_RTOL = 1e-4
LOSS_RTOL = 1e-5
BF16_LOSS_RTOL, BF16_GRAD_RTOL, BF16_MIN_COSINE = 0.1, 0.1, 0.99
CROP, SEED = 40, 3
DAP_TIMEOUT_S = 240
CHECKPOINTING = MemoryPolicy(checkpoint_evoformer=1, checkpoint_extra_msa=1, checkpoint_template=1)


@functools.lru_cache(maxsize=None)
def _config():
    cfg = load_af2_params(PARAMS, preset="model_1_multimer_v3").config
    overrides = {"data.crop_size": CROP, "data.max_msa_clusters": 8, "num_recycles": 1}  # 20 MSA rows: 8 + 12 extra
    return multimer_training_config(apply_overrides(cfg, overrides))


@functools.lru_cache(maxsize=None)
def _batch(cfg):
    """The first draw of 2Q2K (heterodimer with alignments) whose crop holds both chains."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        examples, _ = load_complex_examples(REPO_DATA / "mmcif")
    examples = [e for e in examples if e.name == "2q2k"]
    draws = ComplexDraws(examples, cfg, SEED, REPO_DATA / "alignments", MultimerCrop(CROP))
    k = next(k for k in range(20) if len(set(draws[k].features["asym_id"].tolist())) == 2)
    return collate_complexes([draws[k]])


def _module(cfg, policy, dap=1):
    module = MultimerLightning(cfg, TrainConfig(seed=SEED), policy, dap=dap)
    init_from_weights(module, PARAMS)
    return module.train()


def _step(module, batch, bf16=False):
    """Loss and parameter gradients of step 0 (dropout masks from torch seed 7); a parameter the loss
    does not reach (the last extra-MSA block's MSA updates) has gradient 0, whether autograd left it
    None (plain path) or filled it with zeros (checkpointing)."""
    torch.manual_seed(7)
    module.model.zero_grad(set_to_none=True)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:  # what Lightning's precision="bf16-mixed" wraps the training step in
        loss, _, _, _ = module.step_loss(dict(batch.features), batch, 0)
    loss.backward()
    params = module.model.named_parameters()
    return loss.item(), {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for n, p in params}


@pytest.fixture(scope="module")
def plain():
    cfg = _config()
    batch = _batch(cfg)
    return cfg, batch, _step(_module(cfg, MemoryPolicy.reference()), batch)


def _errors(grads, ref) -> dict:
    """Relative error of each parameter's gradient (those above rounding noise)."""
    assert grads.keys() == ref.keys()
    floor = 1e-6 * max(g.norm().item() for g in ref.values())
    return {n: ((grads[n] - g).norm() / g.norm()).item() for n, g in ref.items() if g.norm().item() > floor}


def _report(label, loss, grads, ref_loss, ref_grads):
    """The measured differences (printed with ``-s``)."""
    flat = torch.cat([(grads[n] - g).flatten() for n, g in ref_grads.items()])
    ref_flat = torch.cat([g.flatten() for g in ref_grads.values()])
    errs = _errors(grads, ref_grads)
    print(
        f"\n{label}: loss {ref_loss:.6g}, |d loss| {abs(loss - ref_loss):.3g} "
        f"(rel {abs(loss - ref_loss) / abs(ref_loss):.3g}); "
        f"gradients: max |d| {flat.abs().max().item():.3g}, whole rel {(flat.norm() / ref_flat.norm()).item():.3g}, "
        f"worst parameter rel {max(errs.values()):.3g} ({max(errs, key=errs.get)}), "
        f"cosine {torch.nn.functional.cosine_similarity(flat + ref_flat, ref_flat, dim=0).item():.6f}"
    )
    return errs


def test_the_step_sees_two_chains_and_the_multimer_losses(plain):
    cfg, batch, (loss, grads) = plain
    assert set(batch.features["asym_id"][0].tolist()) == {1, 2} and batch.features["msa_feat"].shape[1] > 1
    assert np.isfinite(loss) and len(grads) > 400
    module = _module(cfg, MemoryPolicy.reference())
    with torch.no_grad():
        _, terms, _, _ = module.step_loss(dict(batch.features), batch, 0)
    assert {"fape_interface", "chain_center_of_mass", "tm", "violation"} <= set(terms)


def test_checkpointing_changes_no_bit(plain):
    cfg, batch, (ref_loss, ref_grads) = plain
    loss, grads = _step(_module(cfg, CHECKPOINTING), batch)
    _report("checkpointing", loss, grads, ref_loss, ref_grads)
    assert loss == ref_loss
    assert grads.keys() == ref_grads.keys() and all(torch.equal(grads[n], ref_grads[n]) for n in ref_grads)


def test_training_policy_equals_the_plain_path(plain):
    cfg, batch, (ref_loss, ref_grads) = plain
    loss, grads = _step(_module(cfg, MemoryPolicy.training()), batch)
    errs = _report("training()", loss, grads, ref_loss, ref_grads)
    assert abs(loss - ref_loss) <= LOSS_RTOL * abs(ref_loss)
    assert len(errs) > 0.8 * len(ref_grads)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= GRAD_RTOL, (worst, errs[worst])


def test_bf16_mixed_stays_near_the_plain_path(plain):
    cfg, batch, (ref_loss, ref_grads) = plain
    loss, grads = _step(_module(cfg, MemoryPolicy.reference()), batch, bf16=True)
    _report("bf16-mixed", loss, grads, ref_loss, ref_grads)
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads.values())
    assert abs(loss - ref_loss) <= BF16_LOSS_RTOL * abs(ref_loss)
    flat = torch.cat([grads[n].flatten() for n in ref_grads])
    ref_flat = torch.cat([g.flatten() for g in ref_grads.values()])
    assert ((flat - ref_flat).norm() / ref_flat.norm()).item() <= BF16_GRAD_RTOL
    assert torch.nn.functional.cosine_similarity(flat, ref_flat, dim=0).item() >= BF16_MIN_COSINE


#: The loss terms whose targets are binned from the prediction (AF2 stops their gradient): the
#: aligned error of each residue pair (PAE / TM, 64 bins) and each residue's lDDT (pLDDT, 50 bins).
BINNED_OFF = {"loss.pae_weight": 0.0, "loss.plddt_weight": 0.0}


def _dap_worker(rank: int, world: int, modules: dict) -> dict:
    """``modules``: each run's module, built (and given the parity weights) before the fork."""
    torch.set_num_threads(1)
    out = {}
    for name, _, _ in RUNS:
        module = modules[name]
        module.configure_model()  # the ("dp", "dap") mesh and device sharding, as under the Trainer
        assert module.model.dap_sharding is not None
        loss, grads = _step(module, _batch(_config()))  # the overrides change the loss only
        out[name] = (loss, _mean_over_ranks(grads, world))
    return out if rank == 0 else {}


RUNS = (
    ("plain", MemoryPolicy.reference(), {}),
    ("plain, binned targets off", MemoryPolicy.reference(), BINNED_OFF),
    ("training(), binned targets off", MemoryPolicy.training(), BINNED_OFF),
)


def test_dap_2_equals_one_process(plain):
    """Two processes sharing the sample against one. The whole fine-tuning loss within
    ``LOSS_RTOL``; its gradient within 1e-3 relative as a whole: the prediction differs by ~1e-5 Å
    between the two runs, which can move a residue pair's aligned error across a PAE bin edge (on
    this crop 1 of 1600 pairs: that term's gradient moves by 0.4 %, the trunk's by <= 5e-4, the
    whole by 8e-5). Without the two terms of binned targets every parameter's gradient within
    ``GRAD_RTOL``, as the monomer's DAP step (whose loss has no binned target)."""
    cfg, batch, (ref_loss, ref_grads) = plain
    modules = {name: _module(apply_overrides(cfg, overrides), policy, dap=2) for name, policy, overrides in RUNS}
    res = run_local(_dap_worker, 2, modules, start_method="fork", timeout=DAP_TIMEOUT_S)[0]
    for name, policy, overrides in RUNS:
        c = apply_overrides(cfg, overrides)
        single_loss, single_grads = (ref_loss, ref_grads) if name == "plain" else _step(_module(c, policy), batch)
        loss, grads = res[name]
        grads = {n: torch.as_tensor(np.asarray(g)) for n, g in grads.items()}
        errs = _report(f"dap 2, {name}", loss, grads, single_loss, single_grads)
        assert abs(loss - single_loss) <= LOSS_RTOL * abs(single_loss), name
        if overrides:
            worst = max(errs, key=errs.get)
            assert errs[worst] <= GRAD_RTOL, (name, worst, errs[worst])
        else:
            flat = torch.cat([(grads[n] - g).flatten() for n, g in single_grads.items()])
            assert flat.norm() <= 1e-3 * torch.cat([g.flatten() for g in single_grads.values()]).norm()


def test_cli_fine_tunes_from_the_parity_weights_with_dap_2(tmp_path, capfd):
    """``alphafold-mem train --init-weights params.npz --dap 2`` (the file's own architecture, the
    preset its layout names) runs one step on the dev complexes: two processes, one checkpoint. The
    two ranks run ``main([...])`` forked with torchrun's environment (the local launch, Lightning
    running the command line again, is ``tests/test_dap_cli.py``'s)."""
    args = ["train", "--init-weights", str(PARAMS), "--data", str(REPO_DATA), "--out", str(tmp_path / "run")]
    args += ["--max-steps", "1", "--dap", "2", "--accelerator", "cpu", "--no-progress", "--val-every", "0"]
    args += ["--threads", "1", "--set", f"data.crop_size={CROP}", "--set", "data.max_msa_clusters=8"]
    args += ["--set", "num_recycles=0"]
    assert run_forked(main, 2, args, timeout=300) == [0, 0]
    stderr = capfd.readouterr().err
    assert "initial weights: af2-npz weights" in stderr and "architecture model_1_multimer_v3" in stderr
    header, row = (tmp_path / "run" / "logs" / "metrics.csv").read_text().splitlines()[:2]
    metrics = dict(zip(header.split(","), row.split(",")))
    assert np.isfinite(float(metrics["train/loss"])) and float(metrics["train/fape_interface"]) > 0
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
