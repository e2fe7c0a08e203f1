"""Ahead-of-time compile check of every Triton kernel launch the model makes, for real GPUs, on a CPU.

Usage (from the repository root; no GPU needed)::

    python scripts/aot_compile.py --arch 80 86 90 --json OUT.json [--markdown] [--presets model_1 ...]
    python scripts/aot_compile.py --arch 80 --only attn_fwd_kernel        # a subset, by kernel name

Steps: (1) :func:`launch_table` runs the fused ops' launchers (forward and backward: attention with
every bias / gradient variant the model uses, triangle multiplication in both directions, LayerNorm)
on fake tensors at the model's sizes (every preset's channel and head sizes, fp32 and bf16) with the
interpreter off and the launch configuration of each architecture
(:mod:`alphafold_mem.kernels.launch_configs`); the launchers' one launch point
(:func:`alphafold_mem.kernels._triton_support.launch`) records each launch and runs nothing;
(2) each unique launch (Triton's own specialization key: constexprs, dtypes, divisibility) is
compiled per architecture to a cubin with the ``ptxas`` bundled in Triton's wheel; (3) one JSON
object is printed (and written to ``--json``)::

    {"triton": str, "rows": [{"kernel", "variant", "arch", "dtype", "ok", "error", "registers",
      "spill_bytes", "shared_bytes", "shared_limit_bytes", "seconds"}]}

A row is ``ok`` when it compiled, its shared memory per block fits the architecture's limit
(:data:`~alphafold_mem.kernels.launch_configs.SHARED_MEMORY_LIMIT`) and it spills nothing (bf16 /
fp16) or at most 256 B per thread (fp32). The exit status is 1 when a row is not ok, 2 when this
Triton's private binding helpers are not the ones this script knows (it then says so and compiles
nothing). ``scripts/gpu_check.py`` times the launches of the same :func:`launch_table`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

FP32_SPILL_LIMIT = 256  # bytes per thread
DEFAULT_PRESETS = ("tiny", "demo", "model_1")  # every distinct set of channel and head sizes of PRESETS


class Sizes(NamedTuple):
    """Residues, MSA rows, extra-MSA rows and templates of the recorded op calls."""

    n_res: int
    n_seq: int
    n_extra: int
    n_templ: int


#: the model's sizes the launches are recorded at: AF2's initial training (crop 256 residues, 128 MSA
#: clusters, 1024 extra sequences, 4 templates); sizes only change the divisibility specialisation
MODEL_SIZES = Sizes(256, 128, 1024, 4)
#: tiny sizes for Triton's interpreter (scripts/gpu_check.py --dry)
DRY_SIZES = Sizes(20, 3, 5, 2)


class Case(NamedTuple):
    """One op call whose forward and backward launches are recorded: ``run(device, impl)`` runs it
    through the kernel dispatch (:mod:`alphafold_mem.kernels`) with ``impl`` "triton" or "reference"."""

    op: str
    variant: str
    dtype: torch.dtype
    run: Callable[..., None]


def _attention_case(variant, dtype, lead, h, q_len, k_len, c, key_bias, pair_bias, pair_grad, grad=True):
    def run(device="cpu", impl="triton"):
        from alphafold_mem import kernels

        def rand(*shape, requires_grad=grad):
            return torch.randn(*shape, dtype=dtype, device=device).requires_grad_(requires_grad)

        q, k, v = rand(*lead, h, q_len, c), rand(*lead, h, k_len, c), rand(*lead, h, k_len, c)
        biases = []
        if key_bias:
            biases.append(rand(*lead, 1, 1, k_len, requires_grad=False))
        if pair_bias:
            biases.append(rand(lead[0], 1, h, q_len, k_len, requires_grad=pair_grad))
        out = kernels.attention(q, k, v, biases, impl=impl)
        if out.requires_grad:
            out.sum().backward()

    return Case("attention", variant, dtype, run)


def _triangle_case(variant, dtype, n, c_z, c_hidden, outgoing):
    def run(device="cpu", impl="triton"):
        from alphafold_mem import kernels
        from alphafold_mem.kernels.reference import TriangleMultiplicationWeights

        shapes = {
            "layer_norm_input": ((c_z,), (c_z,)),
            "left_projection": ((c_hidden, c_z), (c_hidden,)),
            "right_projection": ((c_hidden, c_z), (c_hidden,)),
            "left_gate": ((c_hidden, c_z), (c_hidden,)),
            "right_gate": ((c_hidden, c_z), (c_hidden,)),
            "center_layer_norm": ((c_hidden,), (c_hidden,)),
            "output_projection": ((c_z, c_hidden), (c_z,)),
            "gating_linear": ((c_z, c_z), (c_z,)),
        }
        w = {}
        for name, (ws, bs) in shapes.items():
            w[f"{name}_weight"] = torch.randn(ws, dtype=dtype, device=device).requires_grad_()
            w[f"{name}_bias"] = torch.randn(bs, dtype=dtype, device=device).requires_grad_()
        weights = TriangleMultiplicationWeights(**{f: w[f] for f in TriangleMultiplicationWeights._fields})
        z = torch.randn(1, n, n, c_z, dtype=dtype, device=device).requires_grad_()
        mask = torch.ones(1, n, n, dtype=dtype, device=device)
        kernels.triangle_multiplication(z, mask, weights, outgoing, impl=impl).sum().backward()

    return Case("triangle_multiplication", variant, dtype, run)


def _layer_norm_case(variant, dtype, rows, c):
    def run(device="cpu", impl="triton"):
        from alphafold_mem import kernels

        x = torch.randn(rows, c, dtype=dtype, device=device).requires_grad_()
        w = torch.ones(c, dtype=dtype, device=device).requires_grad_()
        b = torch.zeros(c, dtype=dtype, device=device).requires_grad_()
        kernels.layer_norm(x, w, b, impl=impl).sum().backward()

    return Case("layer_norm", variant, dtype, run)


def cases(presets=DEFAULT_PRESETS, dtypes=(torch.float32, torch.bfloat16), sizes: Sizes = MODEL_SIZES) -> list[Case]:
    """The op calls of the model's kernels, per preset's channel and head sizes and dtype (one call per
    distinct set of arguments): attention as MSA row (Alg. 7, with the pair bias's gradient), MSA column
    (Alg. 8), extra-MSA row, triangle (Alg. 13/14), template triangle and template pointwise (Alg. 17)
    attention, with and without gradients; triangle multiplication outgoing and incoming (Alg. 11/12)
    over the pair and the template pair; LayerNorm at every channel count."""
    from alphafold_mem.config import model_config

    out: dict[tuple, Case] = {}

    def add(maker, variant, *args):
        out.setdefault((maker.__name__,) + args, maker(variant, *args))

    n, s, e, t = sizes
    for preset in presets:
        cfg = model_config(preset)
        ev, ex, tp = cfg.evoformer, cfg.extra_msa, cfg.template
        ps = tp.pair_stack
        attention = [
            # name, leading dims, heads, Q, K, C, key mask bias, pair bias, gradient to the pair bias
            ("msa_row", (1, s), ev.num_heads_msa, n, n, ev.c_hidden_msa_att, True, True, True),
            ("msa_column", (1, n), ev.num_heads_msa, s, s, ev.c_hidden_msa_att, True, False, False),
            ("extra_msa_row", (1, e), ex.num_heads_msa, n, n, ex.c_hidden_msa_att, True, True, True),
            ("triangle", (1, n), ev.num_heads_pair, n, n, ev.c_hidden_pair_att, True, True, True),
            ("template_triangle", (1, n), ps.num_heads_tri_att, n, n, ps.c_hidden_tri_att, True, True, True),
            ("template_pointwise", (1, n * n), tp.pointwise_num_heads, 1, t, tp.pointwise_c_hidden, True, False, False),
        ]
        for dt in dtypes:
            d = _dname(dt)
            for name, lead, h, ql, kl, c, kb, pb, pg in attention:
                variant = f"{name} c={c} h={h} {d}"
                add(_attention_case, variant, dt, lead, h, ql, kl, c, kb, pb, pg)
                add(_attention_case, f"{variant} no-grad", dt, lead, h, ql, kl, c, kb, pb, False, False)
            for c_z, c_h, name in ((cfg.c_z, ev.c_hidden_mul, "pair"), (cfg.c_t, ps.c_hidden_tri_mul, "template")):
                for outgoing in (True, False):
                    variant = f"{name} {'outgoing' if outgoing else 'incoming'} c_z={c_z} c_hidden={c_h} {d}"
                    add(_triangle_case, variant, dt, n, c_z, c_h, outgoing)
            for c in sorted({cfg.c_m, cfg.c_z, cfg.c_s, cfg.c_t, cfg.c_e}):
                add(_layer_norm_case, f"C={c} {d}", dt, n * n, c)
    return list(out.values())


def _dname(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


class Recorded(NamedTuple):
    """One launch of :func:`launch_table`: which op call made it, and the launch itself."""

    case: Case
    launch: object  # alphafold_mem.kernels._triton_support.Launch


def launch_table(
    arch: Optional[int], presets=DEFAULT_PRESETS, dtypes=(torch.float32, torch.bfloat16), sizes: Sizes = MODEL_SIZES
) -> list:
    """Every launch (:class:`Recorded`) the :func:`cases` make with the launch configuration of
    ``arch``, recorded on fake tensors: nothing is allocated or launched."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from alphafold_mem.kernels import _triton_support as ts

    table = []
    for case in cases(presets, dtypes, sizes):
        with FakeTensorMode(), ts.target_arch(arch), ts.recording() as launches:
            case.run()
        table += [Recorded(case, la) for la in launches]
    return table


def signature(launch) -> tuple:
    """What a launch compiles to, as far as the launcher decides it: kernel name, compile-time
    arguments and launch options (a GPU run and a recording compare equal when they launch alike)."""
    return (launch.name,) + tuple(sorted((k, str(v)) for k, v in launch.kwargs.items()))


# -- compile ----------------------------------------------------------------------------------------

KNOWN_TRITON = ("3.9",)  # versions whose private binding helpers this script was written against


def private_helpers_reason() -> Optional[str]:
    """Why this Triton's private helpers cannot be used (``None`` when they can)."""
    import triton

    version = ".".join(triton.__version__.split(".")[:2])
    if version not in KNOWN_TRITON:
        return (
            f"aot_compile: Triton {triton.__version__} is not one of {', '.join(KNOWN_TRITON)}, whose private "
            "helpers (triton.runtime.jit.create_function_from_signature, JITFunction._pack_args) this script "
            "uses to bind arguments as a launch does; check them and add the version to KNOWN_TRITON"
        )
    from triton.runtime import jit

    if not hasattr(jit, "create_function_from_signature") or not hasattr(jit.JITFunction, "_pack_args"):
        return f"aot_compile: Triton {triton.__version__} lacks create_function_from_signature / _pack_args"
    return None


class _Pointer:
    """A tensor argument as the binder sees it: dtype and an address with the tensor's alignment
    (allocations start at 512-byte boundaries on CUDA; views add their offset)."""

    def __init__(self, t: torch.Tensor):
        self.dtype = t.dtype
        self._ptr = 512 + t.storage_offset() * t.element_size()

    def data_ptr(self) -> int:
        return self._ptr


def _stub(a):
    if isinstance(a, torch.Tensor):
        return _Pointer(a)
    if isinstance(a, tuple):
        return tuple(_stub(x) for x in a)
    return a


def _bind(launch, arch: int):
    """(key, ASTSource, target, options) of a recorded launch for compute capability ``arch``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import compute_cache_key, create_function_from_signature

    kernel = launch.kernel
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    args = _stub(launch.args)
    kwargs = dict(launch.kwargs)
    bound, specialization, options = binder(*args, **kwargs)
    key = (launch.name, arch, compute_cache_key({}, specialization, options))
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return key, ASTSource(kernel, signature, constexprs, attrs), target, options


def compile_launch(launch, arch: int) -> dict:
    """Compile one recorded launch for ``arch``: registers, spills, shared memory, or the error."""
    import triton

    start = time.perf_counter()
    row = dict(ok=False, error=None, registers=0, spill_bytes=0, shared_bytes=0)
    triton.knobs.nvidia.dump_ptxas_log = True  # ptxas -v: registers and spills (printed to stdout)
    log = io.StringIO()
    try:
        _, src, target, options = _bind(launch, arch)
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(src, target=target, options=options.__dict__)
        text = log.getvalue()
        regs = re.findall(r"Used (\d+) registers", text)
        spills = re.findall(r"(\d+) bytes spill stores", text)
        if not regs:
            raise RuntimeError("no ptxas -v report (a cached kernel? set TRITON_CACHE_DIR to an empty folder)")
        row.update(
            registers=max(map(int, regs)),
            spill_bytes=max(map(int, spills or ["0"])),
            shared_bytes=int(compiled.metadata.shared),
        )
    except Exception as exc:  # noqa: BLE001 - a failed compile is a row, not a crash
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def check(row: dict, arch: int, dtype: str) -> dict:
    """Mark ``row`` ok or give the limit it breaks (shared memory per block, spills)."""
    from alphafold_mem.kernels.launch_configs import SHARED_MEMORY_LIMIT, config_arch

    limit = SHARED_MEMORY_LIMIT[config_arch(arch)] if arch not in SHARED_MEMORY_LIMIT else SHARED_MEMORY_LIMIT[arch]
    row["shared_limit_bytes"] = limit
    spill_limit = FP32_SPILL_LIMIT if dtype == "fp32" else 0
    problems = []
    if row["error"] is None:
        if row["shared_bytes"] > limit:
            problems.append(f"shared memory {row['shared_bytes']} B per block > sm_{arch}'s {limit} B")
        if row["spill_bytes"] > spill_limit:
            problems.append(f"spills {row['spill_bytes']} B per thread > {spill_limit} B allowed for {dtype}")
        row["error"] = "; ".join(problems) or None
    row["ok"] = row["error"] is None
    return row


_TABLES: dict = {}


def _table(arch: int, presets: tuple, dtypes: tuple) -> list:
    key = (arch, presets, dtypes)
    if key not in _TABLES:
        _TABLES[key] = launch_table(arch, presets, tuple(getattr(torch, d) for d in dtypes))
    return _TABLES[key]


def _compile_job(job: tuple) -> dict:
    arch, presets, dtypes, index = job
    return compile_launch(_table(arch, presets, dtypes)[index].launch, arch)


def run(archs, presets=DEFAULT_PRESETS, dtypes=("float32", "bfloat16"), only=(), jobs: int = 2, log=None) -> dict:
    """Record, deduplicate and compile; returns the JSON object (see the module docstring)."""
    import triton

    presets, dtypes = tuple(presets), tuple(dtypes)
    unique: dict = {}  # Triton's specialization key -> (arch, table index, variants)
    for arch in archs:
        for i, rec in enumerate(_table(arch, presets, dtypes)):
            if only and rec.launch.name not in only:
                continue
            key = _bind(rec.launch, arch)[0]
            unique.setdefault(key, (arch, i, []))[2].append(rec.case.variant)
    work = list(unique.values())
    job_args = [(arch, presets, dtypes, i) for arch, i, _ in work]
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = []
            for n, r in enumerate(pool.map(_compile_job, job_args)):
                results.append(r)
                if log:
                    log(f"{n + 1}/{len(work)} compiled")
    else:
        results = [_compile_job(j) for j in job_args]
    rows = []
    for (arch, i, variants), res in zip(work, results):
        rec = _table(arch, presets, dtypes)[i]
        dtype = _dname(rec.case.dtype)
        variant = variants[0] + (f" (+{len(variants) - 1} alike)" if len(variants) > 1 else "")
        row = dict(kernel=rec.launch.name, variant=variant, arch=arch, dtype=dtype, **res)
        rows.append(check(row, arch, dtype))
    keys = ("kernel", "variant", "arch", "dtype", "ok", "error", "registers", "spill_bytes", "shared_bytes")
    rows = [{k: r[k] for k in keys + ("shared_limit_bytes", "seconds")} for r in rows]
    return {"triton": triton.__version__, "rows": rows}


def markdown(result: dict) -> str:
    """Per kernel and dtype, the worst row per architecture: registers / spill bytes / shared bytes."""
    archs = sorted({r["arch"] for r in result["rows"]})
    worst: dict = {}
    for r in result["rows"]:
        k = (r["kernel"], r["dtype"])
        cur = worst.setdefault(k, {}).get(r["arch"])
        score = (not r["ok"], r["spill_bytes"], r["shared_bytes"], r["registers"])
        if cur is None or score > (not cur["ok"], cur["spill_bytes"], cur["shared_bytes"], cur["registers"]):
            worst[k][r["arch"]] = r
    n = {}
    for r in result["rows"]:
        n[(r["kernel"], r["dtype"])] = n.get((r["kernel"], r["dtype"]), 0) + 1
    head = "| kernel | dtype | launches | " + " | ".join(f"sm_{a} regs / spill B / smem B" for a in archs) + " | ok |"
    lines = [head, "|" + "---|" * (4 + len(archs))]
    for (kernel, dtype), per in sorted(worst.items()):
        cells = []
        for a in archs:
            r = per.get(a)
            cells.append("-" if r is None else f"{r['registers']} / {r['spill_bytes']} / {r['shared_bytes']:,}")
        ok = all(r["ok"] for r in result["rows"] if (r["kernel"], r["dtype"]) == (kernel, dtype))
        lines.append(
            f"| {kernel} | {dtype} | {n[(kernel, dtype)]} | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |"
        )
    bad = [r for r in result["rows"] if not r["ok"]]
    lines.append("")
    lines.append(f"{len(result['rows'])} compiled launches, {len(bad)} not ok (Triton {result['triton']}).")
    for r in bad:
        lines.append(f"- {r['kernel']} sm_{r['arch']} {r['dtype']} ({r['variant']}): {r['error']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") == "1":
        print("aot_compile: triton was imported with TRITON_INTERPRET=1; run this script in its own process")
        return 2
    os.environ["TRITON_INTERPRET"] = "0"  # compiled kernels: before anything imports triton
    from alphafold_mem.kernels.launch_configs import ARCHS

    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--arch", type=int, nargs="+", default=list(ARCHS), help="compute capabilities, e.g. 80 86 90")
    p.add_argument("--json", type=Path, help="also write the JSON object to this file")
    p.add_argument("--markdown", action="store_true", help="print the per-kernel table (docs/kernels.md) too")
    p.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS), help="presets whose sizes are recorded")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "float16"])
    p.add_argument("--only", nargs="+", default=[], help="compile only these kernels (by name)")
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="compile processes")
    args = p.parse_args(argv)
    reason = private_helpers_reason()
    if reason is not None:
        print(f"skipped: {reason}", file=sys.stderr)
        return 2
    if not os.environ.get("TRITON_CACHE_DIR"):  # a fresh cache: every kernel compiled here, ptxas -v seen
        import tempfile

        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="aot_compile_")
    start = time.perf_counter()
    result = run(args.arch, args.presets, args.dtypes, args.only, args.jobs, log=lambda m: print(m, file=sys.stderr))
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    if args.markdown:
        print(markdown(result))
    print(f"aot_compile: {len(result['rows'])} launches in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0 if all(r["ok"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
