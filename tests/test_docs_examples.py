"""The Python examples of the API reference pages (docs/reference/api*.md) call what exists with
arguments it accepts: every ``alphafold_mem....(...)`` call in a ```python block is resolved to the
real object and its arguments are bound to its signature (nothing runs)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "reference").glob("api*.md"))
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def resolve(name: str):
    parts = name.split(".")
    obj = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


def call_problems(source: str) -> list[str]:
    """Calls of ``alphafold_mem.*`` in ``source`` whose name does not resolve or whose arguments do not
    bind to the signature."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if not name or not name.startswith("alphafold_mem."):
            continue
        try:
            target = resolve(name)
        except AttributeError as exc:
            problems.append(f"{name}: {exc}")
            continue
        kwargs = {k.arg: None for k in node.keywords if k.arg}
        try:
            inspect.signature(target).bind(*[None] * len(node.args), **kwargs)
        except TypeError as exc:
            problems.append(f"{name}({', '.join(kwargs)}): {exc}")
    return problems


def test_reference_pages_have_examples():
    assert any(BLOCK.search(p.read_text()) for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_call_real_api(page):
    problems = [p for block in BLOCK.findall(page.read_text()) for p in call_problems(block)]
    assert not problems, f"{page.name}: " + "; ".join(problems)


def test_a_wrong_keyword_or_name_is_found():
    assert call_problems('import alphafold_mem\nalphafold_mem.predict("x.fasta", out_dir="o", policy=1)')
    assert call_problems("import alphafold_mem\nalphafold_mem.MemoryPolicy.low_memory(chunk_size=4)")
    assert not call_problems('import alphafold_mem\nalphafold_mem.predict("x.fasta", out_dir="o")')
