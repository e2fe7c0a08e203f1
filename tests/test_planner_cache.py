"""The planner's estimates kept on disk (alphafold_mem.planner.cache): what is read back equals the
trace, any change of config, policy, sizes or code version is a miss, lower bounds answer only the
limits below them, and a second pre-flight of a planned shape reads instead of tracing."""

from __future__ import annotations

import resource
import threading

import pytest
import torch

import alphafold_mem.planner.chooser as chooser
import alphafold_mem.planner.estimate as estimate_mod
from alphafold_mem.config import apply_overrides, model_config
from alphafold_mem.memory.policy import MemoryPolicy
from alphafold_mem.planner import cache, estimate_breakdown, parameter_bytes
from alphafold_mem.predict.preflight import check

CFG = model_config("tiny", num_recycles=0)
SIZES = (23, 5, 11, 1)
#: the trace itself (no cache), before any test wraps it
TRACE = estimate_mod._trace


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """A fresh cache folder, nothing kept in this process; yields the list of traced keys (and, in
    ``traced.results``, what each trace returned; with ``traced.answer`` set, a trace returns that
    instead of tracing: for tests of the keys alone)."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    traced = _Traced()

    def counting(*key, limit=None):
        traced.append(key)
        traced.results.append(TRACE(*key, limit=limit) if traced.answer is None else traced.answer)
        return traced.results[-1]

    monkeypatch.setattr(estimate_mod, "_trace", counting)
    _new_process()
    yield traced
    _new_process()


class _Traced(list):
    def __init__(self):
        super().__init__()
        self.results = []
        self.answer = None


def _new_process():
    """Forget what this process keeps (as a fresh process would not have it)."""
    cache.forget()
    chooser._choose.cache_clear()
    parameter_bytes.cache_clear()
    estimate_mod._fakes = threading.local()


@pytest.mark.parametrize(
    "policy,device,dap,training",
    [
        (MemoryPolicy.reference(), "cpu", 1, False),
        (MemoryPolicy.low_memory_inference(chunk_size=4, offload="buffers", precision="bf16"), "cuda", 1, False),
        (MemoryPolicy.low_memory_inference(chunk_size=8), "cuda", 2, False),
        (MemoryPolicy.training(), "cpu", 1, True),
    ],
    ids=["reference-cpu", "buffers-bf16-cuda", "dap2", "training"],
)
def test_an_estimate_read_back_equals_the_uncached_trace(disk, policy, device, dap, training):
    est = estimate_breakdown(CFG, policy, *SIZES, training, device=device, dap=dap)
    assert len(disk) == 1 and list(cache.cache_dir().glob("*.json"))
    _new_process()
    again = estimate_breakdown(CFG, policy, *SIZES, training, device=device, dap=dap)
    assert len(disk) == 1, "read from disk, not traced"
    key = (CFG, policy, *SIZES, training, torch.float32, True, device, False, dap)
    assert disk == [key]  # the one trace, of these arguments: what it returned is the uncached trace
    assert again == est == disk.results[0] and not again.lower_bound and again.total > 0


def test_a_change_of_config_policy_sizes_or_version_is_a_miss(disk, monkeypatch):
    policy = MemoryPolicy.low_memory_inference(chunk_size=4)
    estimate_breakdown(CFG, policy, *SIZES)
    _new_process()
    estimate_breakdown(CFG, policy, *SIZES)
    assert len(disk) == 1
    disk.answer = disk.results[0]  # from here on only the keys matter: a miss is a call of the trace
    # a config field the trace does not read still counts: the key is the whole config
    other_data = apply_overrides(CFG, {"data.max_extra_msa": CFG.data.max_extra_msa + 1})
    changes = [
        lambda: estimate_breakdown(other_data, policy, *SIZES),
        lambda: estimate_breakdown(CFG, policy.replace(chunk_size=8), *SIZES),
        lambda: estimate_breakdown(CFG, policy.replace(precision="bf16"), *SIZES),
        lambda: estimate_breakdown(CFG, policy, SIZES[0] + 1, *SIZES[1:]),
        lambda: estimate_breakdown(CFG, policy, *SIZES, device="cuda"),
    ]
    for n, change in enumerate(changes, start=2):
        _new_process()  # each a miss, traced: only what is kept on disk could answer
        change()
        assert len(disk) == n, n
    _new_process()
    monkeypatch.setattr(cache, "code_version", lambda: "0.0.0+another-checkout")
    estimate_breakdown(CFG, policy, *SIZES)
    assert len(disk) == len(changes) + 2


def test_a_lower_bound_answers_only_limits_below_it(disk):
    policy = MemoryPolicy.reference()
    exact = TRACE(CFG, policy, *SIZES, False, torch.float32, True, "cpu", False, 1)
    limit = exact.total // 2
    low = estimate_breakdown(CFG, policy, *SIZES, limit=limit)
    assert low.lower_bound and limit < low.total < exact.total and len(disk) == 1
    _new_process()
    assert estimate_breakdown(CFG, policy, *SIZES, limit=limit - 1) == low and len(disk) == 1
    _new_process()
    assert estimate_breakdown(CFG, policy, *SIZES) == exact and len(disk) == 2  # no limit: traced, exact
    _new_process()
    assert estimate_breakdown(CFG, policy, *SIZES, limit=limit) == exact and len(disk) == 2


def test_the_disk_cache_can_be_switched_off(disk, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    assert cache.cache_dir() is None
    estimate_breakdown(CFG, MemoryPolicy.reference(), *SIZES)
    _new_process()
    estimate_breakdown(CFG, MemoryPolicy.reference(), *SIZES)
    assert len(disk) == 2


def test_default_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "alphafold_mem" / "plans"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def test_a_second_preflight_of_a_planned_shape_reads_instead_of_tracing(disk):
    """The ladder for a 64-residue target with the free memory of this machine: the second pre-flight
    (a new process, as far as the planner knows) traces nothing, builds no model and costs under a
    second of CPU (it reads a few small files: about 0.01 s, model_1 at 1,000 residues on the
    planner benchmark page; the bound is generous for a loaded machine). The tiny preset keeps the
    first, traced, pre-flight short; the second reads the same files whatever the model."""
    config = model_config("tiny")
    sizes = (64, 8, 16, 1)
    first = check(config, sizes, "auto", torch.device("cpu"))
    assert disk, "the first pre-flight traces"
    traced = len(disk)
    _new_process()
    start = _cpu()
    second = check(config, sizes, "auto", torch.device("cpu"))
    spent = _cpu() - start
    assert len(disk) == traced and not hasattr(estimate_mod._fakes, "mode")
    assert second.policy == first.policy and second.need == first.need
    assert spent <= 1.0, f"second pre-flight: {spent:.2f} s CPU"
