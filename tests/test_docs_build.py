"""The documentation site builds with ``mkdocs build --strict`` from the repository (what ``make docs``
runs): a broken link, a missing page of the nav, a docstring griffe cannot read or a failing hook is a
warning, and any warning fails the build. Without the ``docs`` extra this test fails (it does not
skip): CI installs ``.[test,docs]``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")  # the last: mkdocstrings-python


def test_docs_extra_is_installed():
    absent = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    assert not absent, f"missing {absent}: install the docs extra (pip install -e '.[docs]')"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (CI installs .[test,docs])")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", "mkdocs.yml", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not warnings, "mkdocs build --strict failed:\n" + "\n".join(
        warnings or log.splitlines()[-30:]
    )
    return out


def test_site_builds_strictly_with_the_generated_references(site):
    cli = (site / "reference" / "cli.html").read_text()
    for command in ("alphafold-mem predict", "alphafold-mem memory-plan", "alphafold-mem weights fetch"):
        assert command in cli
    api = (site / "reference" / "api.html").read_text()
    for name in ("alphafold_mem.binding.bind", "alphafold_mem.memory.policy.MemoryPolicy", "predict.runner.predict"):
        assert f'id="{name}' in api or f'id="alphafold_mem.{name}' in api, name
    # the docstrings' reStructuredText roles are shown as code (scripts/griffe_roles.py), not as raw text
    for page in sorted((site / "reference").glob("api*.html")):
        assert ":func:" not in page.read_text() and ":class:" not in page.read_text(), page.name
    assert (site / "benchmarks" / "index.html").exists()
    assert (site / "ablation" / "report.html").exists()


def test_docstring_roles_become_code_spans():
    sys.path.insert(0, str(ROOT / "scripts"))
    from griffe_roles import markdown_docstring  # scripts/ is not a package: loaded by path

    text = "Uses :func:`alphafold_mem.planner.plan` and :class:`~.policy.MemoryPolicy`, :mod:`.chunking`.\n"
    assert markdown_docstring(text) == "Uses `alphafold_mem.planner.plan` and `MemoryPolicy`, `chunking`.\n"
    assert markdown_docstring("Example::\n\n    x = 1\n") == "Example:\n\n    x = 1\n"
    assert markdown_docstring("a ``literal`` stays") == "a ``literal`` stays"
