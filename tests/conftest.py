"""Shared test fixtures. TRITON_INTERPRET must be set before anything imports triton."""

import os

# The command line asks for transparent huge pages before torch's first allocation (alphafold_mem.hugepages);
# the test session runs with the same switch (c10 reads it once, at its first CPU allocation).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402

if not torch.cuda.is_available():  # CPU machines run the Triton kernels in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    from alphafold_mem.kernels._interpreter import skip_repatching

    skip_repatching()  # about 2x faster interpreted kernels, same results

# The CLI sets glibc's allocator to return freed memory (--malloc release); tests that call the CLI
# in-process must not change the allocator of the whole test session (tests/test_host_memory.py
# checks the setting in fresh processes).
os.environ.setdefault("ALPHAFOLD_MEM_MALLOC", "default")

import pathlib  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

# The planner's estimates are kept on disk (alphafold_mem.planner.cache): the session plans into a fresh
# folder of its own, shared by the xdist workers and the commands tests start (they inherit the
# variable), so a shape traced by one test is read by the next and no user cache is read or written.
# The controller (or a run without xdist) makes the folder and removes it at the end.
_PLAN_CACHE_ENV = "ALPHAFOLD_MEM_PLAN_CACHE"
_OWN_PLAN_CACHE = None
if "PYTEST_XDIST_WORKER" not in os.environ:
    _OWN_PLAN_CACHE = tempfile.mkdtemp(prefix="alphafold_mem_plans_")
    os.environ[_PLAN_CACHE_ENV] = _OWN_PLAN_CACHE

# One intra-op thread per test process: the suite runs in 2 processes (-n 2) on 2 shared cores, and
# more threads than free cores make every small op wait on spinning threads (a tiny forward takes
# ~10x longer with 2 threads on a loaded machine). Set OMP_NUM_THREADS to override.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)

import pytest  # noqa: E402

TEST_DATA = pathlib.Path(__file__).parent / "data"
REPO_DATA = pathlib.Path(__file__).parent.parent / "data"


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def tiny_config():
    from alphafold_mem import model_config

    return model_config("tiny")


#: The few long cases (tens of seconds each on one core): in ``make test`` and CI, left out of
#: ``make test-fast`` (``-m "not slow"``).
SLOW_TESTS = (
    # the inner loop (make test-fast) within its bound: the longest cases whose area a faster test of the
    # fast set also covers (planner recipes: the cheapest ladder; complexes: the other predict tests;
    # multimer memory: the reference-policy and checkpointing tests; training: the resume tests)
    "test_planner_opcache.py::test_served_ladder_equals_the_dispatched_one[tiny_multimer-bf16-cuda-2-True]",
    "test_planner_opcache.py::test_served_full_and_stopped_traces_equal_the_dispatched_ones",
    "test_planner_opcache.py::test_served_ladder_equals_the_dispatched_one[tiny-fp32-cuda-1-False]",
    "test_planner_opcache.py::test_served_ladder_equals_the_dispatched_one[tiny-bf16-full-cpu-2-True]",
    "test_predict_complex_parallel.py::test_dap_2_equals_one_process[tiny_multimer.npz]",
    "test_predict_complex.py::test_4zhl_two_models_two_predictions_ranked_by_iptm_ptm",
    "test_predict_complex.py::test_homomers_and_7ddo_chains_and_numbering",
    "test_train_interrupt.py::test_interrupted_first_run_resumes_to_the_uninterrupted_weights[SIGINT]",
    "test_multimer_memory.py::test_low_memory_inference_with_offload_equals_the_plain_path",
    "test_multimer_memory.py::test_policy_equals_the_plain_path[attention=chunked,chunk_size=6,attention_chunks=(5, 4),"
    "inplace=True,offload=buffers,templates=streamed,head_logits=drop]",
    "test_multimer_memory.py::test_bf16_within_half_an_angstrom[bf16]",
    "test_planner_training_loss.py::test_training_estimate_runs_the_real_loss",
    "test_planner_cache.py::test_an_estimate_read_back_equals_the_uncached_trace[training]",
    "test_train_init_weights.py::test_finetuning_the_demo_weights_on_one_chain_lowers_its_loss",
    "test_planner_multimer.py::test_af_unmasked_12_chain_complex_on_a_24gb_card",
    "test_planner_replay.py::test_replayed_ladder_equals_the_traced_one[tiny_multimer-bf16-full-cuda-2]",
    "test_planner_replay.py::test_replayed_ladder_equals_the_traced_one[tiny-bf16-full-cpu-2]",
    "test_kernels_arch.py::test_fused_triangle_multiplication_at_architecture_config[80-bfloat16-None]",
    "test_memory_estimate.py::test_estimate_within_5_percent_of_measured[training]",
    "test_predict_ensemble.py::test_ensemble_ranked_and_rerun_computes_only_new_seeds",
    "test_relax.py::test_relax_experimental_chain",
    "test_inference.py::test_batch_with_one_invalid_record",
    "test_planner_multimer.py::test_memory_plan_chains_and_fasta",
    "test_hugepages.py::test_importing_the_package_leaves_the_environment_unchanged",
    "test_train_os_errors.py::test_read_only_out_is_one_line",
    "test_planner_replay.py::test_replayed_ladder_equals_the_traced_one[tiny-bf16-cuda-1]",
    "test_planner_replay.py::test_replayed_ladder_equals_the_traced_one[tiny_multimer-fp32-cuda-1]",
    "test_planner_replay.py::test_replayed_traces_stop_where_the_traced_ones_do",
    "test_multimer_train.py::test_multimer_resume_reproduces_the_uninterrupted_run",
    "test_relax.py::test_relax_keeps_x_residues_and_reports_failures",
    "test_openfold_layout.py::test_cli_alignment_db_index_and_train",
    "test_kernels.py::test_benchmarks_smoke",
    "test_inputs_train.py::test_resume_without_repeating_flags_equals_uninterrupted",
    "test_faults_data.py::test_predict_with_a_damaged_hit_file_runs_the_target_without_templates",
    "test_memory_estimate.py::test_memory_plan_cli",
    "test_complex_msa_search.py::test_local_search_heteromer_pairs_uniprot_hits_and_homodimer_searches_once",
    "test_multimer_memory.py::test_policy_equals_the_plain_path[chunk_size=4,templates=streamed]",
    "test_multimer_memory.py::test_policy_equals_the_plain_path[chunk_size=5,checkpoint_evoformer=2,checkpoint_template=1]",
    "test_kernels_arch.py::test_fused_triangle_multiplication_at_architecture_config[80-float32-None]",
    "test_kernels_arch.py::test_fused_triangle_multiplication_at_architecture_config[90-bfloat16-8]",
    # the largest complex that fits: the memory-plan search (predict's note on it stays in the fast set)
    "test_largest_complex.py::test_memory_plan_complex_that_does_not_fit_gets_the_largest_that_would",
    # --dap with the searches in its launcher: two CLI runs, two spawned ranks, jackhmmer and hmmsearch
    "test_complex_dap_search.py::test_dap_2_with_db_and_template_search_equals_one_process",
    # every memory technique on the multimer model: DAP in 2 processes, Triton's interpreter
    "test_multimer_memory.py::test_dap_2_equals_one_process",
    "test_multimer_memory.py::test_triton_kernels_equal_the_plain_path",
    # predict --devices in subprocesses
    "test_predict_devices.py::test_devices_2_writes_what_one_process_writes",
    "test_predict_devices.py::test_devices_2_with_a_rejected_record_finishes_the_others_and_exits_1",
    "test_predict_devices.py::test_a_rank_that_fails_as_a_whole_fails_its_targets_and_the_others_finish",
    "test_train.py::test_overfit_one_protein_raises_lddt",
    "test_kernels.py::test_fused_attention_matches_reference[msa_row_bf16_c16_maskgrad]",
    "test_kernels.py::test_fused_attention_matches_reference[msa_row_bf16_c8]",
    "test_ablation.py::test_tiny_grid",
    "test_recycle_early_stop.py::test_demo_weights_early_stop",  # demo weights, 9 + 9 + 2 iterations
    # device sharding: the four-process run, and the command-line runs (several interpreters each)
    "test_dap.py::test_inference_equals_single_device[4-tiny-low_memory_inference]",
    "test_dap.py::test_inference_equals_single_device[4-model_1-low_memory_inference]",
    "test_dap.py::test_training_step_with_dropout_equals_single_device[4]",
    "test_dap.py::test_collectives_are_adjoint[4]",
    "test_dap.py::test_planner_predicts_the_per_device_peak[4]",
    "test_dap.py::test_runs_are_bounded[4]",
    "test_dap_cli.py::test_predict_dap2_writes_what_dap1_writes",
    "test_dap_cli.py::test_predict_failure_on_rank_1_ends_both",
    # complexes on the launchers (two or three interpreters each): --dap 2 by the command line, the
    # monomer-weights variant of the in-process DAP run, --devices 2 (the AF2-Multimer in-process DAP run is
    # in the first group; the fast set keeps the monomer's in-process DAP run, test_dap.py)
    "test_predict_complex_parallel.py::test_cli_dap_2_writes_what_one_process_writes",
    "test_predict_complex_parallel.py::test_dap_2_equals_one_process[tiny.ckpt]",
    "test_predict_complex_parallel.py::test_devices_2_writes_each_complex_once_and_a_failing_one_fails_alone",
    "test_dap_cli.py::test_train_dap2_reproduces_one_device",
    # predict faults: DAP launches (several interpreters each), a concurrent run, repeated signalled runs
    "test_predict_faults_dap.py::test_a_record_too_short_to_share_fails_in_the_preflight_and_the_batch_goes_on",
    "test_predict_faults_dap.py::test_sigkill_of_the_launcher_leaves_no_rank_and_nothing_written_after",
    "test_predict_faults_dap.py::test_a_killed_rank_0_is_named_as_the_failed_rank",
    "test_predict_faults.py::test_a_second_run_on_a_held_out_fails_naming_the_holder",
    "test_predict_faults.py::test_sigint_and_sigterm_at_random_moments_leave_complete_or_absent_targets",
    "test_kernels_triangle.py::test_fused_triangle_multiplication_matches_reference[outgoing_bf16_batch2]",
    "test_kernels_triangle.py::test_fused_triangle_multiplication_matches_reference[incoming_bf16]",
    "test_gpu_check.py::test_dry_run_end_to_end",
    # ahead-of-time compiles with ptxas (scripts/aot_compile.py; the full table is the script's)
    "test_aot_compile.py::test_representative_subset_compiles_within_every_architecture",
    "test_aot_compile.py::test_oversized_configuration_fails_the_check",
    "test_relax.py::test_predict_from_bare_fasta_with_search_templates_and_relax",
    # fresh interpreters (allocator settings, two-process DDP) and the largest planner trace
    "test_host_memory.py::test_trim_hands_free_pages_back_within_its_period",
    "test_host_memory.py::test_remedy_returns_freed_memory_and_can_be_declined",
    "test_train_parallel.py::test_two_process_ddp_equals_one_process_on_the_same_global_batch",
    "test_dap.py::test_per_device_inference_peak_scales_with_p",
    "test_memory_estimate.py::test_fast_estimate_equals_full_trace[low-memory-cpu]",
    "test_memory_estimate.py::test_fast_estimate_equals_full_trace[idle-offload-accelerator]",
    "test_memory_estimate.py::test_fast_estimate_equals_full_trace[buffers-offload-bf16-full]",
    "test_memory_estimate.py::test_fast_estimate_equals_full_trace[outer-recompute]",
    "test_memory_estimate.py::test_estimate_within_5_percent_of_measured[training-outer-recompute]",
    # a second variant of what a faster test in the fast set also covers (fp32 MSA-row attention kernel:
    # c16_maskgrad; bf16 prediction: test_bf16_prediction; offload in the planner: the estimate tests)
    "test_kernels.py::test_fused_attention_matches_reference[msa_row_fp32_c8]",
    "test_inference.py::test_bf16_demo_weights_match_fp32_on_1lcd",
    "test_memory_estimate.py::test_offload_lowers_the_accelerator_prediction_only",
    # whole predict runs (several targets each) beside the faster predict tests of the fast set
    "test_inputs_predict.py::test_finished_target_is_skipped_only_when_its_provenance_matches",
    "test_inputs_predict.py::test_case_directory_with_unusual_extensions",
    "test_kernels.py::test_fused_attention_matches_reference[triangle_fp32_c32]",
    # the ablation's device-sharding rows through predict (two ranks, 43 s on 2 cores)
    "test_ablation.py::test_dap_rows_run_through_predict_with_dap",
    # fresh interpreters (~6.5 s CPU each) for the user's own huge-page settings and a late request; the
    # fast set keeps the command line's request taking effect and the import leaving the environment alone
    "test_hugepages.py::test_the_users_choice_stands[env0-left as set: THP_MEM_ALLOC_ENABLE=0]",
    "test_hugepages.py::test_the_users_choice_stands[env1-not requested: ALPHAFOLD_MEM_MALLOC=default]",
    "test_hugepages.py::test_a_request_after_the_first_cpu_tensor_says_it_came_too_late",
    # a fresh interrupted run and a fresh resume per signal (~12 s CPU): the fast set keeps SIGINT, the
    # same handler path (the uninterrupted reference run is one for both)
    "test_train_interrupt.py::test_interrupted_first_run_resumes_to_the_uninterrupted_weights[SIGTERM]",
    # the planner's fake run for the two-device peak (~8 s CPU): the per-device peak checks run in
    # ``make test``; the fast set keeps the two-device outputs and the planner against the measured peaks
    # of one device (test_memory_estimate.py)
    "test_dap.py::test_planner_predicts_the_per_device_peak[2]",
    # the planner's cut traces against full traces at several budgets (11-18 s CPU each): the fast set
    # keeps the one-block-per-stack equality of the cut estimate (test_planner_cuts.py) and the CLI's
    # lower-bound rows through test_memory_estimate.py::test_memory_plan_cli
    "test_planner_cuts.py::test_dap_estimate_with_cuts_is_close_to_the_full_trace",
    "test_planner_cuts.py::test_choose_with_stopped_traces_picks_what_full_estimates_pick",
    "test_planner_cuts.py::test_memory_plan_marks_lower_bounds",
    # a killed checkpoint write and its bit-exact resume (fresh processes, ~13 s CPU): the fast set keeps
    # the interrupted-and-resumed run of test_train_interrupt.py
    "test_train_resume_faults.py::test_killed_first_last_ckpt_write_resumes_bit_exact_from_the_newest_complete",
    # one fresh interpreter each (~6 s CPU) for what rarely changes: a closed stdout pipe, and ablate
    # without the repository's benchmarks package
    "test_memory_plan_flags.py::test_a_closed_pipe_ends_the_command_quietly",
    "test_package_boundaries.py::test_ablate_runs_where_benchmarks_cannot_be_imported",
    # multimer fine-tuning from the parity weights under DAP (two processes, three steps each, ~15 s CPU)
    # and `train --init-weights --dap 2` end to end (fresh interpreters, ~25 s wall): the fast set keeps
    # the checkpointing, training() and bf16 step comparisons of test_multimer_finetune.py (the DAP
    # collectives and sharded training step: test_dap.py)
    "test_multimer_finetune.py::test_dap_2_equals_one_process",
    "test_multimer_finetune.py::test_cli_fine_tunes_from_the_parity_weights_with_dap_2",
)


#: ``@pytest.mark.cuda`` tests run where CUDA is visible, or, with this variable set to 1, in Triton's
#: interpreter at tiny shapes (``scripts/gpu_check.py --dry``); otherwise they are skipped.
GPU_CHECK_DRY = "ALPHAFOLD_MEM_GPU_CHECK_DRY"


def pytest_unconfigure(config):
    if _OWN_PLAN_CACHE is not None:
        shutil.rmtree(_OWN_PLAN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    runs_cuda = torch.cuda.is_available() or os.environ.get(GPU_CHECK_DRY) == "1"
    skip_cuda = pytest.mark.skip(reason=f"needs a CUDA device (or {GPU_CHECK_DRY}=1 for the interpreter dry run)")
    for item in items:
        if any(item.nodeid.endswith(name) for name in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
        if "cuda" in item.keywords and not runs_cuda:
            item.add_marker(skip_cuda)


# --- Opt-in per-test CPU-time report -------------------------------------------------------------
#: Set to 1 to rank the tests by CPU time (user + sys of the test process plus its waited-for child
#: processes, over setup, call and teardown; a session- or module-scoped fixture is charged to the
#: first test that uses it). ``ALPHAFOLD_MEM_TEST_CPU_FILE=path`` also writes every test as TSV (at the
#: end; ``path.partial`` gets one line per test as the run goes).
TEST_CPU = "ALPHAFOLD_MEM_TEST_CPU"
TEST_CPU_FILE = "ALPHAFOLD_MEM_TEST_CPU_FILE"
_CPU_START = {}
_CPU_SECONDS = {}
# Only the outermost session reports: a pytest run that a test starts (scripts/gpu_check.py --dry runs
# tests/test_kernels_cuda.py) inherits the variables, but its CPU time is already its parent test's.
_CPU_ROOT = "_ALPHAFOLD_MEM_TEST_CPU_ROOT"  # the pid of the outermost pytest process
os.environ.setdefault(_CPU_ROOT, str(os.getpid()))
_CPU_REPORTS = os.environ.get(TEST_CPU) == "1" and os.environ[_CPU_ROOT] in (str(os.getpid()), str(os.getppid()))


def _cpu_seconds():
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if _CPU_REPORTS:
        _CPU_START[item.nodeid] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    start = _CPU_START.pop(item.nodeid, None)
    if start is not None:  # the teardown report (made after this hook) carries it to the xdist controller
        own, children = (end - begin for end, begin in zip(_cpu_seconds(), start))
        item.user_properties.append(("cpu_s", (own, children)))
        path = os.environ.get(TEST_CPU_FILE)
        if path:  # as the run goes: one line per test, appended by every process
            with open(f"{path}.partial", "a") as f:
                f.write(f"{own + children:.2f}\t{own:.2f}\t{children:.2f}\t{item.nodeid}\n")


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "cpu_s":
                _CPU_SECONDS[report.nodeid] = tuple(value)


def pytest_terminal_summary(terminalreporter):
    if not _CPU_REPORTS or not _CPU_SECONDS:
        return
    ranked = sorted(_CPU_SECONDS.items(), key=lambda kv: -sum(kv[1]))
    total = sum(sum(v) for v in _CPU_SECONDS.values())
    slow = sum(sum(v) for k, v in _CPU_SECONDS.items() if any(k.endswith(name) for name in SLOW_TESTS))
    write = terminalreporter.write_line
    terminalreporter.section("CPU time per test (user+sys, own + children)")
    write(
        f"{len(ranked)} tests: {total:.1f} s CPU in tests ({slow:.1f} s in SLOW_TESTS, {total - slow:.1f} s not slow)"
    )
    for nodeid, (own, children) in ranked[:40]:
        write(f"{own + children:8.1f} s  (own {own:7.1f}, children {children:7.1f})  {nodeid}")
    path = os.environ.get(TEST_CPU_FILE)
    if path:
        lines = [f"{own + ch:.2f}\t{own:.2f}\t{ch:.2f}\t{nodeid}" for nodeid, (own, ch) in ranked]
        pathlib.Path(path).write_text("cpu_s\town_s\tchildren_s\tnodeid\n" + "\n".join(lines) + "\n")
        write(f"all tests: {path}")
