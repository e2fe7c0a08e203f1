"""The package's structure: every module declares its memory behaviour, imports point one way, files
stay small.

* Every submodule of every preset's model declares a ``memory_spec`` in its own class body (or is
  explicitly exempt), and the policy binder refuses a model holding a module that declares nothing.
* The import graph of ``alphafold_mem`` and ``alphafold_mem.kernels`` (every ``import`` statement, function-level
  ones included, read with ``ast``) has no cycle between modules, and none between subpackages.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Optional

import pytest
import torch
from torch import Tensor

from alphafold_mem import AlphaFold, MemoryPolicy, bind, model_config
from alphafold_mem.config import PRESETS
from alphafold_mem.memory import (
    WHOLE,
    Shard,
    Split,
    UndeclaredModuleError,
    declare,
    declared_splits,
    run_split,
    spec_of,
    undeclared_modules,
)
from alphafold_mem.memory.axes import AXES, MemorySpec, exempt
from alphafold_mem.model.primitives import Transition
from alphafold_mem.model.triangle import TriangleMultiplication

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Import package -> its folder in the repository (the Triton kernels live in the top-level ``kernels/``
#: folder and install as ``alphafold_mem.kernels``: pyproject.toml's ``[tool.setuptools.package-dir]``).
PACKAGES = {"alphafold_mem": "alphafold_mem", "alphafold_mem.kernels": "kernels"}


# -- declarations ----------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_every_module_of_every_preset_declares(preset):
    with torch.device("meta"):
        model = AlphaFold(model_config(preset))
    assert undeclared_modules(model) == []
    for name, module in model.named_modules():
        spec = spec_of(module)
        assert spec.exempt is None or spec.exempt.strip(), name
        for split in spec.splits.values():
            assert split.axis in AXES


def test_declared_steps_cover_what_the_policy_chunks():
    """Every module the binder gives a chunk size runs declared steps; every declared step names its
    whole operands explicitly (the facts device sharding needs)."""
    model = AlphaFold(model_config("tiny"))
    steps = list(declared_splits(model))
    kinds = {type(m).__name__ for _, m, _, _ in steps}
    assert kinds == {
        "MSARowAttentionWithPairBias",
        "MSAColumnAttention",
        "MSAColumnGlobalAttention",
        "Transition",
        "OuterProductMean",
        "TriangleMultiplication",
        "TriangleAttention",
        "TemplatePointwiseAttention",
        "TemplateEmbedding",
        "InputEmbedder",
        "RecyclingEmbedder",
        "ExtraMsaEmbedder",
        "EvoformerStack",
        "InvariantPointAttention",
        "DistogramHead",
        "PredictedAlignedErrorHead",
    }
    bind(model, MemoryPolicy(chunk_size=7))
    chunked_modules = {id(m) for m in model.modules() if getattr(m, "chunk_size", None) == 7}
    assert chunked_modules == {id(m) for _, m, _, _ in steps}
    tri = TriangleMultiplication.memory_spec.splits
    assert tri["outgoing"].whole == (1,) and tri["incoming"].whole == (0,)  # the other projection is read whole


class _Forgetful(Transition):
    """A chunkable module whose class body lost its declaration (it inherits Transition's forward)."""


class _Undeclared(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


def test_a_module_without_declaration_is_refused():
    model = AlphaFold(model_config("tiny"))
    block = model.evoformer.blocks[0]
    block.msa_transition = _Forgetful(model.config.c_m, model.config.evoformer.transition_n)
    bad = undeclared_modules(model)
    assert bad == ["evoformer.blocks.0.msa_transition: _Forgetful"]
    with pytest.raises(UndeclaredModuleError, match=r"declare no memory_spec.*msa_transition: _Forgetful"):
        bind(model, MemoryPolicy.low_memory_inference())
    block.msa_transition = _Undeclared()
    with pytest.raises(UndeclaredModuleError, match="_Undeclared"):
        bind(model, MemoryPolicy.reference())


def test_removing_a_declaration_breaks_binding_and_forward(monkeypatch):
    """Take the declaration off a real chunkable class: the binder refuses the model, and the module's
    own forward cannot run its steps either (no silent unchunked fallback)."""
    model = AlphaFold(model_config("tiny"))
    monkeypatch.delattr(Transition, "memory_spec")
    assert any(entry.endswith(": Transition") for entry in undeclared_modules(model))
    with pytest.raises(UndeclaredModuleError):
        bind(model, MemoryPolicy(chunk_size=4))
    with pytest.raises(AttributeError):
        Transition(4, 2)(torch.zeros(1, 3, 5, 4), torch.ones(1, 3, 5))


def test_run_split_reads_the_declaration():
    class Doubler(torch.nn.Module):
        memory_spec = declare(splits={"rows": Split("pair_row", (Shard(-2), WHOLE), output=-2)})
        chunk_size: Optional[int] = None

        def forward(self, x: Tensor, w: Tensor) -> Tensor:
            return run_split(self, "rows", lambda xc, wc: xc * wc.sum(), x, w)

    op, x, w = Doubler(), torch.randn(5, 7, 3), torch.randn(4)
    ref = op(x, w)
    for chunk in (1, 2, 3, 7, 100):
        op.chunk_size = chunk
        torch.testing.assert_close(op(x, w), ref, rtol=0, atol=0)
    with pytest.raises(KeyError, match="no splittable step 'cols'"):
        run_split(op, "cols", lambda a: a, x)
    with pytest.raises(ValueError, match="unknown axis"):
        Split("diagonal", (Shard(-1),))
    with pytest.raises(ValueError, match="either declares"):
        MemorySpec()
    with pytest.raises(ValueError, match="reason"):
        exempt(" ")


# -- imports ---------------------------------------------------------------------------------------


def _module_name(package: str, path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT / PACKAGES[package]).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(pkg, p): p for pkg, folder in PACKAGES.items() for p in (ROOT / folder).rglob("*.py")}


def _resolve(current: str, is_package: bool, level: int, target: Optional[str]) -> str:
    if level == 0:
        return target or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (at any depth of the file: function-level imports count)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:  # `import a.b.c` names the module a.b.c, or a name inside a.b
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_cycle_between_modules():
    assert _cycles(import_graph()) == []


def test_no_import_cycle_between_subpackages():
    """Collapse modules to ``alphafold_mem.<subpackage or top-level module>``; the package root (which
    re-exports the public API from everywhere) is left out, as nothing below may import it."""
    graph = import_graph()
    assert not any("alphafold_mem" in deps for m, deps in graph.items() if m != "alphafold_mem"), (
        "a module imports the package root; import from the defining module instead"
    )
    sub: dict[str, set[str]] = {}
    for m, deps in graph.items():
        if m == "alphafold_mem":
            continue
        sub.setdefault(_subpackage(m), set()).update(_subpackage(d) for d in deps if _subpackage(d) != _subpackage(m))
    assert _cycles(sub) == []


def test_layers_point_one_way():
    graph = import_graph()
    below = {
        "alphafold_mem.memory": ("alphafold_mem.model", "alphafold_mem.planner", "alphafold_mem.distributed"),
        # device sharding reads declarations; it knows no model class
        "alphafold_mem.distributed": (
            "alphafold_mem.model",
            "alphafold_mem.planner",
            "alphafold_mem.predict",
            "alphafold_mem.train",
            "alphafold_mem.cli",
        ),
        "alphafold_mem.model": (
            "alphafold_mem.planner",
            "alphafold_mem.predict",
            "alphafold_mem.train",
            "alphafold_mem.cli",
        ),
    }
    for low, forbidden in below.items():
        for m, deps in graph.items():
            if m == low or m.startswith(low + "."):
                bad = [d for d in deps if any(d == f or d.startswith(f + ".") for f in forbidden)]
                assert not bad, f"{m} imports {bad}"
    # the kernels are the bottom layer: they import nothing of the package outside themselves
    for m, deps in graph.items():
        if m == "alphafold_mem.kernels" or m.startswith("alphafold_mem.kernels."):
            bad = [d for d in deps if not (d == "alphafold_mem.kernels" or d.startswith("alphafold_mem.kernels."))]
            assert not bad, f"{m} imports {bad}"


def test_only_the_cli_imports_the_ablation_package():
    """``alphafold_mem.ablation`` runs everything below it (train, predict, planner); nothing but the
    command line may depend on it."""
    graph = import_graph()
    bad = {
        m: sorted(d for d in deps if d.startswith("alphafold_mem.ablation"))
        for m, deps in graph.items()
        if not m.startswith(("alphafold_mem.ablation", "alphafold_mem.cli"))
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_cycle_check_can_fail():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _resolve("alphafold_mem.model.triangle", False, 2, "memory") == "alphafold_mem.memory"
    assert _resolve("alphafold_mem.memory", True, 1, "axes") == "alphafold_mem.memory.axes"


# -- size ------------------------------------------------------------------------------------------

#: Lines per module as ``ruff format`` lays them out (one argument per line where a call does not fit).
MAX_LINES = 450


def _long_modules(root: pathlib.Path, folders) -> dict[str, int]:
    """Every module under ``folders`` (relative to ``root``) longer than :data:`MAX_LINES`, with its lines."""
    long = {}
    for folder in folders:
        for p in (root / folder).rglob("*.py"):
            n = len(p.read_text().splitlines())
            if n > MAX_LINES:
                long[p.relative_to(root).as_posix()] = n
    return long


def test_no_module_over_max_lines():
    """Every module of the installed package (``alphafold_mem`` and its kernels) within 450 lines, no
    exceptions: a long table moves into a module of its own."""
    assert _long_modules(ROOT, PACKAGES.values()) == {}


def test_the_size_check_can_fail(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert _long_modules(tmp_path, ["pkg"]) == {"pkg/long.py": MAX_LINES + 1}
