"""One GPU check of everything that only a GPU can check, in at most 8 minutes, into one directory.

Commands (from the repository root)::

    python scripts/gpu_check.py OUT_DIR           # on a CUDA machine (exits 0 saying so without one)
    python scripts/gpu_check.py OUT_DIR --dry     # CPU: the same code path in Triton's interpreter, tiny sizes
    scripts/gpu_check.sh OUT_DIR                  # the first, under a hard 9-minute stop

Sections, each given a share of the time budget (``--budget-s``, default 480 s; a section that runs
out of time records the rows it skipped) and written to ``OUT_DIR/gpu_check.json`` and
``OUT_DIR/gpu_check.md`` (the Markdown is also printed) as soon as it is done:

1. compiled kernel tests: ``pytest -m cuda tests/test_kernels_cuda.py`` in a subprocess (attention,
   triangle multiplication and LayerNorm kernels compiled, Q, K, N_res >= 129 and odd, fp32 and bf16,
   three-way tolerance against an fp64 oracle; the tiny model with every kernel against the
   reference policy); results per test from its JUnit XML;
2. kernel benchmarks, bf16, forward and backward ms and peak MiB: attention (also with the shared
   pair bias's gradient folded into the dk/dv pass, ``triton-fold-all``) vs PyTorch eager,
   ``F.scaled_dot_product_attention`` and trifast / cuEquivariance / DeepSpeed Evoformer attention
   when importable; triangle multiplication vs PyTorch eager and cuEquivariance; LayerNorm;
   then the launch table of ``scripts/aot_compile.py`` (the op calls CI compiled for this
   architecture, same sizes and launch configuration), each Triton vs reference forward + backward
   (ms, peak MiB), checking that the kernels launched are exactly the recorded ones;
3. model-level memory: ``torch.cuda.max_memory_allocated`` above parameters and inputs
   (:func:`alphafold_mem.memory.track_peak`) for the memory policies, with and without the Triton
   kernels, at N_res 512 / 1024 / 2048 (model_1 channel sizes, 1 Evoformer + 1 extra-MSA block,
   N_seq 128, N_extra 512, no templates, no recycling), one inference forward and (N_res 512)
   one training step, beside :func:`alphafold_mem.planner.estimate_breakdown`'s activation
   prediction. A run that does not fit records OOM.

``--dry`` runs sections 1-3 on CPU (tests at tiny shapes, fp32, via ``ALPHAFOLD_MEM_GPU_CHECK_DRY=1``,
benchmarks at their smoke shapes, model memory with the ``tiny`` preset at N_res 5, N_seq 2, N_extra 3
(one partial, masked 16-wide interpreter tile per axis), one PyTorch and one Triton policy per mode,
measured by the CPU storage tracker, which also counts the interpreter's host copies of kernel
arguments that a GPU run does not make); its times mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the repository's packages come first

import torch  # noqa: E402

DRY_ENV = "ALPHAFOLD_MEM_GPU_CHECK_DRY"


class Budget:
    """Wall-clock budget: ``deadline(share)`` gives a section its share of what is left."""

    def __init__(self, seconds: float):
        self.start, self.seconds = time.monotonic(), seconds

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def deadline(self, share: float) -> float:
        return time.monotonic() + max(0.0, self.left()) * share


# -- 1. compiled kernel tests ------------------------------------------------------------------------


def kernel_tests(out_dir: Path, dry: bool, deadline: float) -> dict:
    """Run tests/test_kernels_cuda.py (marker ``cuda``) in a subprocess; outcome per test."""
    xml_path = out_dir / "kernel_tests.xml"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if dry:
        env.update({DRY_ENV: "1", "TRITON_INTERPRET": "1"})
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "cuda",
        "-p",
        "no:cacheprovider",
        str(ROOT / "tests" / "test_kernels_cuda.py"),
        f"--junitxml={xml_path}",
    ]
    timeout = max(10.0, deadline - time.monotonic())
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s", "tests": _junit(xml_path)}
    tests = _junit(xml_path)
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {
        "status": "passed" if proc.returncode == 0 else f"failed (pytest exit {proc.returncode})",
        "summary": summary,
        "tests": tests,
    }


def _junit(path: Path) -> list[dict]:
    if not path.exists():
        return []
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome, message = ("skipped" if tag == "skipped" else "failed"), (node.get("message") or "")[:200]
        tests.append(
            {"test": case.get("name"), "outcome": outcome, "s": float(case.get("time", 0)), "message": message}
        )
    return tests


# -- 2. kernel benchmarks ----------------------------------------------------------------------------


def benchmarks(device: torch.device, dry: bool, deadline: float) -> dict:
    """bench_attention / bench_triangle / bench_layer_norm rows (their ``table`` functions)."""
    from benchmarks.kernels import bench_attention, bench_layer_norm, bench_triangle

    warmup, reps = (0, 1) if dry else (1, 3)
    dtype = torch.bfloat16
    att_names = ["triton", "triton-fold-all", "reference", "sdpa"] + list(bench_attention._third_party())
    tri_names = ["triton", "reference"] + (["cueq"] if "cueq" in bench_triangle._impls() else [])
    plans = [
        (
            "attention",
            lambda shapes: bench_attention.table(shapes, att_names, dtype, device, warmup, reps, echo=False),
            bench_attention.SMOKE_SHAPES if dry else bench_attention.AF2_SHAPES,
        ),
        (
            "triangle_multiplication",
            lambda shapes: bench_triangle.table(shapes, tri_names, dtype, device, warmup, reps, echo=False),
            bench_triangle.SMOKE_SHAPES if dry else bench_triangle.AF2_SHAPES,
        ),
        (
            "layer_norm",
            lambda shapes: bench_layer_norm.table(shapes, dtype, device, warmup, reps, echo=False),
            bench_layer_norm.SMOKE_SHAPES if dry else bench_layer_norm.AF2_SHAPES,
        ),
    ]
    results: dict = {}
    for i, (kernel, run, shapes) in enumerate(plans):
        kernel_deadline = time.monotonic() + (deadline - time.monotonic()) / (len(plans) - i)
        rows = []
        for shape in shapes:  # one shape at a time, so that the budget is checked between them
            if time.monotonic() > kernel_deadline:
                rows.append({"shape": shape[0], "impl": "*", "error": "skipped: time budget"})
                continue
            rows += run([shape])
        results[kernel] = rows
    return results


# -- 2b. the ahead-of-time compile check's launch table, run -----------------------------------------


def _timed(fn: Callable[[], None], device: torch.device) -> tuple[float, Optional[float]]:
    """(ms, peak MiB above the start) of one call; the peak only on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) * 1e3, (torch.cuda.max_memory_allocated(device) - base) / 2**20
    return (time.perf_counter() - t0) * 1e3, None


def launch_table(device: torch.device, dry: bool, deadline: float) -> dict:
    """Run every op call of scripts/aot_compile.py's launch table (what CI compiled for this
    architecture: same cases, same sizes, same launch configuration), forward and backward, Triton
    against the PyTorch reference: ms, peak MiB, and whether the kernels launched are exactly the
    recorded ones (kernel, compile-time arguments, warps, stages). The dry run: the tiny preset at
    tiny sizes in the interpreter, with sm_80's configuration, the first op call of each op, its
    recorded run also giving its Triton time."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import aot_compile

    from alphafold_mem.kernels import _triton_support

    if dry:
        arch, presets, sizes = 80, ("tiny",), aot_compile.DRY_SIZES
    else:
        major, minor = torch.cuda.get_device_capability(device)
        arch, presets, sizes = major * 10 + minor, aot_compile.DEFAULT_PRESETS, aot_compile.MODEL_SIZES
    dtypes = (torch.float32, torch.bfloat16)
    expected: dict = {}
    for rec in aot_compile.launch_table(arch, presets, dtypes, sizes):
        expected.setdefault(rec.case.variant, []).append(aot_compile.signature(rec.launch))
    rows = []
    reps = 1 if dry else 3
    todo = aot_compile.cases(presets, dtypes, sizes)
    if dry:  # the interpreter is slow: the first op call of each op (the table is still recorded whole)
        todo = [c for i, c in enumerate(todo) if c.op not in {d.op for d in todo[:i]}]
    for case in todo:
        row = dict(op=case.op, variant=case.variant, launches=None, same_as_table=None, error=None)
        rows.append(row)
        if time.monotonic() > deadline:
            row["error"] = "skipped: time budget"
            continue
        try:
            with _triton_support.target_arch(arch), _triton_support.recording(also_run=True) as got:
                first = _timed(lambda: case.run(device, "triton"), device)  # compile + warm-up
            row["launches"] = len(got)
            row["same_as_table"] = [aot_compile.signature(la) for la in got] == expected.get(case.variant)
            for impl in ("triton", "reference"):
                if dry and impl == "triton":  # its times mean nothing: the recorded run is the timed one
                    times = [first]
                else:
                    times = [_timed(lambda: case.run(device, impl), device) for _ in range(reps)]
                row[f"{impl}_ms"] = min(t for t, _ in times)
                row[f"{impl}_peak_mib"] = times[-1][1]
        except Exception as exc:  # noqa: BLE001 - the row records it (OOM, a launch refused by the GPU, ...)
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return {"arch": arch, "presets": list(presets), "sizes": sizes._asdict(), "rows": rows}


# -- 3. model-level memory ---------------------------------------------------------------------------


def _policies(training: bool, dry: bool):
    """The policies of one mode; the dry run keeps one PyTorch and one Triton row (interpreted models are slow)."""
    from alphafold_mem import MemoryPolicy

    if training:
        rows = [
            ("reference", MemoryPolicy.reference()),
            ("training()", MemoryPolicy.training()),
            ("training(kernels='triton')", MemoryPolicy.training(kernels="triton")),
        ]
        return rows[1:] if dry else rows
    rows = [
        ("reference", MemoryPolicy.reference()),
        ("kernels='triton'", MemoryPolicy(kernels="triton")),
        ("low_memory_inference()", MemoryPolicy.low_memory_inference()),
        ("low_memory_inference(kernels='triton')", MemoryPolicy.low_memory_inference(kernels="triton")),
    ]
    return rows[:2] if dry else rows


def model_memory(device: torch.device, dry: bool, deadline: float) -> list[dict]:
    """Measured activation peak vs the planner's prediction per (mode, N_res, policy)."""
    from alphafold_mem import AlphaFold, bind, model_config
    from alphafold_mem.memory import track_peak
    from alphafold_mem.planner.estimate import estimate_breakdown, proxy_loss
    from alphafold_mem.testing import random_features

    preset, sizes, n_seq, n_extra = ("tiny", (5,), 2, 3) if dry else ("model_1", (512, 1024, 2048), 128, 512)
    training_sizes = sizes if dry else (512,)
    cfg = model_config(
        preset,
        **{
            "evoformer.num_blocks": 1,
            "extra_msa.num_blocks": 1,
            "template.enabled": False,
            "num_recycles": 0,
            **({"structure_module.num_layers": 1} if dry else {}),
        },
    )
    torch.manual_seed(0)
    model = AlphaFold(cfg).eval().to(device)
    rows = []
    for n_res in sizes:
        batch = {k: v.to(device) for k, v in random_features(cfg, n_res, n_seq, n_extra).items()}
        for training in (False, True):
            if training and n_res not in training_sizes:
                continue
            for name, policy in _policies(training, dry):
                row = dict(
                    mode="training step" if training else "inference",
                    n_res=n_res,
                    n_seq=n_seq,
                    n_extra=n_extra,
                    policy=name,
                    peak_bytes=None,
                    predicted_bytes=None,
                    s=None,
                    error=None,
                )
                rows.append(row)
                if time.monotonic() > deadline:
                    row["error"] = "skipped: time budget"
                    continue
                row.update(_measure(model, batch, policy, training, device, bind, track_peak, proxy_loss))
                try:
                    est = estimate_breakdown(cfg, policy, n_res, n_seq, n_extra, 0, training)
                    row["predicted_bytes"] = est.activations
                except Exception as exc:  # noqa: BLE001 - the row records it
                    row["error"] = (row["error"] or "") + f" prediction failed: {type(exc).__name__}: {exc}"[:200]
        del batch
    return rows


def _measure(model, batch, policy, training, device, bind, track_peak, proxy_loss) -> dict:
    bind(model, policy)
    model.zero_grad(set_to_none=True)
    try:
        t0 = time.perf_counter()
        with track_peak(device) as mem, torch.set_grad_enabled(training):
            out = model(batch)
            if training:
                proxy_loss(out).backward()
            del out
        return dict(peak_bytes=mem.peak, s=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - OOM (or any failure) is a result of its row
        oom = isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()
        return dict(error="OOM" if oom else f"{type(exc).__name__}: {str(exc)[:160]}")
    finally:
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()


# -- report ------------------------------------------------------------------------------------------


def _cell(x, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def markdown(report: dict) -> str:
    """The Markdown tables of ``report`` (the README shows the same tables)."""
    lines = [
        f"# GPU check ({report['mode']}): {report['device']}",
        "",
        f"torch {report['torch']}, triton {report['triton']}; {report['elapsed_s']:.0f} s of {report['budget_s']} s",
        "",
    ]
    tests = report.get("kernel_tests")
    if tests:
        lines += [f"## Compiled kernel tests: {tests['status']}", ""]
        lines += _table(
            ["test", "outcome", "s", "message"],
            [[t["test"], t["outcome"], f"{t['s']:.1f}", t["message"][:80]] for t in tests["tests"]],
        ) + [""]
    for kernel, rows in report.get("benchmarks", {}).items():
        lines += [f"## Benchmark: {kernel} (bf16)", ""]
        lines += _table(
            ["shape", "impl", "fwd ms", "bwd ms", "peak MiB", "note"],
            [
                [
                    r["shape"],
                    r["impl"],
                    _cell(r.get("fwd_ms")),
                    _cell(r.get("bwd_ms")),
                    _cell(r.get("peak_mib"), "{:.0f}"),
                    r.get("error") or "",
                ]
                for r in rows
            ],
        ) + [""]
    table = report.get("launch_table")
    if table:
        lines += [f"## AOT launch table run (sm_{table['arch']}, {table['sizes']}): Triton vs reference, fwd + bwd", ""]
        lines += _table(
            [
                "op",
                "variant",
                "launches",
                "same as table",
                "triton ms",
                "reference ms",
                "triton MiB",
                "ref MiB",
                "note",
            ],
            [
                [
                    r["op"],
                    r["variant"],
                    _cell(r["launches"], "{}"),
                    _cell(r["same_as_table"], "{}"),
                    _cell(r.get("triton_ms")),
                    _cell(r.get("reference_ms")),
                    _cell(r.get("triton_peak_mib"), "{:.0f}"),
                    _cell(r.get("reference_peak_mib"), "{:.0f}"),
                    r["error"] or "",
                ]
                for r in table["rows"]
            ],
        ) + [""]
    mem = report.get("model_memory")
    if mem:
        lines += ["## Model memory: activation peak above parameters and inputs (MB = 1e6 bytes)", ""]
        rows = []
        for r in mem:
            peak, pred = r["peak_bytes"], r["predicted_bytes"]
            rows.append(
                [
                    r["mode"],
                    str(r["n_res"]),
                    r["policy"],
                    _cell(peak and peak / 1e6, "{:.1f}"),
                    _cell(pred and pred / 1e6, "{:.1f}"),
                    _cell(peak / pred if peak and pred else None, "{:.3f}"),
                    _cell(r["s"], "{:.1f}"),
                    r["error"] or "",
                ]
            )
        lines += _table(
            ["mode", "N_res", "policy", "measured MB", "predicted MB", "measured / predicted", "s", "note"], rows
        ) + [""]
    return "\n".join(lines)


def _write(out_dir: Path, report: dict) -> None:
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    (out_dir / "gpu_check.md").write_text(markdown(report))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--dry", action="store_true", help="CPU: Triton's interpreter at tiny sizes (tests the script)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget in seconds (default 480)")
    ap.add_argument("--sections", default="tests,benchmarks,launches,memory")
    args = ap.parse_args(argv)
    if args.dry:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    elif not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device is visible: nothing to check here (run with --dry to exercise the "
            "script in Triton's CPU interpreter). Exiting 0."
        )
        return 0
    if args.dry:
        from alphafold_mem.kernels._interpreter import skip_repatching

        skip_repatching()
    device = torch.device("cpu" if args.dry else "cuda")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = "not importable"
    report = {
        "mode": "dry (CPU, Triton interpreter, tiny sizes; times mean nothing)" if args.dry else "cuda",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "CPU",
        "torch": torch.__version__,
        "triton": triton_version,
        "budget_s": args.budget_s,
        "elapsed_s": 0.0,
    }
    budget = Budget(args.budget_s)
    sections: list[tuple[str, float, Callable[[float], object]]] = [
        ("kernel_tests", 0.5, lambda d: kernel_tests(args.out_dir, args.dry, d)),
        ("benchmarks", 0.5, lambda d: benchmarks(device, args.dry, d)),
        ("launch_table", 0.3, lambda d: launch_table(device, args.dry, d)),
        ("model_memory", 1.0, lambda d: model_memory(device, args.dry, d)),
    ]
    wanted = {"tests": "kernel_tests", "benchmarks": "benchmarks", "launches": "launch_table", "memory": "model_memory"}
    chosen = {wanted[s] for s in args.sections.split(",") if s}
    for name, share, run in sections:
        if name not in chosen:
            continue
        report[name] = run(budget.deadline(share))
        report["elapsed_s"] = args.budget_s - budget.left()
        _write(args.out_dir, report)
        print(f"gpu_check: {name} done at {report['elapsed_s']:.0f} s", flush=True)
    print(markdown(report))
    print(f"gpu_check: wrote {args.out_dir / 'gpu_check.json'} and {args.out_dir / 'gpu_check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
