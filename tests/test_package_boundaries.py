"""What is product and what is measurement: ``benchmarks/`` (harnesses that drive other systems, processes
that run without the package) is not installed and nothing installed imports it; ``alphafold-mem ablate``
runs where ``benchmarks`` cannot be imported."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Top-level folders of the repository that are not installed: the installed code must not import them.
NOT_INSTALLED = ("benchmarks", "scripts", "tests")


def _imported_top_levels(path: pathlib.Path) -> set[str]:
    """First name of every absolute import in ``path`` (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_installed_code_imports_nothing_that_is_not_installed():
    files = sorted((ROOT / "alphafold_mem").rglob("*.py")) + sorted((ROOT / "kernels").rglob("*.py"))
    assert len(files) > 50
    bad = {str(f.relative_to(ROOT)): sorted(_imported_top_levels(f) & set(NOT_INSTALLED)) for f in files}
    assert {f: names for f, names in bad.items() if names} == {}


def test_the_check_can_fail(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from benchmarks.openfold import run_cell\n")
    assert "benchmarks" in _imported_top_levels(module)


@pytest.mark.skipif(tomllib is None, reason="tomllib is Python 3.11's")
def test_benchmarks_is_not_a_distributed_package():
    """pyproject.toml names the installed packages (a list or a find rule); none is ``benchmarks``."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = setuptools.get("packages", [])
    named = list(packages) if isinstance(packages, list) else list(packages.get("find", {}).get("include", []))
    named += list(setuptools.get("package-dir", {}))
    assert named and any(n.startswith("alphafold_mem") for n in named)
    assert [n for n in named if n.split(".")[0].rstrip("*") in NOT_INSTALLED] == []
    assert (ROOT / "benchmarks" / "openfold.py").is_file()  # it exists, in the repository only


ABLATE_WITHOUT_BENCHMARKS = """
import contextlib, io
try:
    import benchmarks
    print("benchmarks importable from", benchmarks.__file__)
except ModuleNotFoundError:
    print("no benchmarks")
from alphafold_mem.cli.main import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = main(["ablate", "--list-techniques"])
print(rc, len(buf.getvalue().splitlines()), "reference" in buf.getvalue())
"""


def test_ablate_runs_where_benchmarks_cannot_be_imported(tmp_path):
    """An isolated interpreter outside the repository (the package only, as installed):
    ``alphafold-mem ablate --list-techniques`` lists the rows (the modules it imports later are
    covered by the import check above)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", ABLATE_WITHOUT_BENCHMARKS],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, last = proc.stdout.strip().splitlines()[0], proc.stdout.strip().splitlines()[-1]
    assert first == "no benchmarks"
    rc, rows, has_reference = last.split()
    assert rc == "0" and int(rows) >= 10 and has_reference == "True"
