"""Imports sit at the top of their module, so a file's header says what it depends on. An import inside a
function is allowed only where it is optional (an extra that may be missing), heavy (seconds to load,
needed by few calls) or must wait (a file also loaded by path), and says which in a comment on its
line or the line above."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("alphafold_mem", "kernels")


def _commented(lines: list[str], first: int, last: int) -> bool:
    """A comment on the import's first or last line, or on the line above the run of import lines it
    belongs to (one comment may explain a group)."""
    if "#" in lines[first - 1] or "#" in lines[last - 1]:
        return True
    k = first - 2
    while k >= 0 and lines[k].strip().startswith(("import ", "from ")):
        if "#" in lines[k]:
            return True
        k -= 1
    return k >= 0 and lines[k].strip().startswith("#")


def function_level_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """``(line, source)`` of every import inside a function of ``path`` without a comment saying why."""
    text = path.read_text()
    lines = text.splitlines()
    bad = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                if not _commented(lines, sub.lineno, sub.end_lineno):
                    bad.append((sub.lineno, lines[sub.lineno - 1].strip()))
    return bad


def test_imports_inside_functions_say_why():
    bad = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            found = function_level_imports(p)
            if found:
                bad[p.relative_to(ROOT).as_posix()] = found
    assert bad == {}, f"{sum(map(len, bad.values()))} imports inside functions without a reason: {bad}"


def test_the_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "import os\n\n\ndef g():\n    import json\n\n    # optional: the extra\n    import yaml\n    import toml\n"
        "    x = 1\n    import csv\n"
    )
    assert function_level_imports(f) == [(5, "import json"), (11, "import csv")]
