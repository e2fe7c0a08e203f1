"""alphafold_mem.hugepages: importing the package changes no environment; the command line sets torch's
huge-page switch before the process's first CPU tensor, unless the user decided; huge_pages_status
reads the mapping flags of a real allocation."""

import os
import subprocess
import sys

import pytest

from alphafold_mem.hugepages import THP_ENV, _kernel_mode

#: Runs the command line's entry (``alphafold-mem`` with no command: the help, swallowed), then prints
#: the switch and the status of a fresh 4 MiB tensor.
PROBE = (
    "import contextlib, io, os, sys\n{first}from alphafold_mem.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    assert main([]) == 0\n"
    "from alphafold_mem.hugepages import huge_pages_status\n"
    "print(os.environ.get('THP_MEM_ALLOC_ENABLE')); print(huge_pages_status())"
)

#: Prints the environment variables that ``import alphafold_mem`` changed, then those that importing every
#: other module of the package (not ``__main__``, which runs the command line) changed. Lightning is
#: imported before the second snapshot: its own import sets variables of its own
#: (``PYTORCH_NVML_BASED_CUDA_CHECK``), which are not ours to judge.
IMPORT_ALL = """
import os, pkgutil, importlib
def changed(before):
    return sorted(k for k in before.keys() | os.environ.keys() if before.get(k) != os.environ.get(k))
before = dict(os.environ)
import alphafold_mem
print(changed(before))
import lightning
before = dict(os.environ)
modules = [m.name for m in pkgutil.walk_packages(alphafold_mem.__path__, "alphafold_mem.")]
for name in modules:
    if not name.endswith("__main__"):
        importlib.import_module(name)
print(len(modules) > 50, changed(before))
"""


def _python(code: str, **env: str) -> list[str]:
    """Lines printed by ``code`` in a fresh interpreter whose environment has neither switch, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in (THP_ENV, "ALPHAFOLD_MEM_MALLOC")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()


def _probe(first: str = "", **env: str) -> list[str]:
    return _python(PROBE.format(first=first), **env)


def test_importing_the_package_leaves_the_environment_unchanged():
    """``import alphafold_mem``, then every module of it, in a fresh interpreter: ``os.environ`` as before."""
    assert _python(IMPORT_ALL) == ["[]", "True []"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_the_command_line_requests_huge_pages_and_they_take_effect():
    value, status = _probe()
    assert value == "1" and "requested: THP_MEM_ALLOC_ENABLE=1" in status
    if _kernel_mode() in ("always", "madvise"):
        assert status.startswith("on:"), status
    else:
        assert status.startswith("off:"), status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
@pytest.mark.parametrize(
    "env, expect",
    [
        ({THP_ENV: "0"}, "left as set: THP_MEM_ALLOC_ENABLE=0"),
        ({"ALPHAFOLD_MEM_MALLOC": "default"}, "not requested: ALPHAFOLD_MEM_MALLOC=default"),
    ],
)
def test_the_users_choice_stands(env, expect):
    value, status = _probe(**env)
    assert value == env.get(THP_ENV, "None")  # printed: None when unset
    assert expect in status and status.startswith("off:"), status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_a_request_after_the_first_cpu_tensor_says_it_came_too_late():
    """c10 reads the switch at the process's first CPU allocation: a later request reaches only children."""
    value, status = _probe("import torch\ntorch.ones(1)\n")
    assert value == "1"
    assert status.startswith("off:") and "after this process's first CPU allocation" in status, status


@pytest.mark.parametrize("user_value, kept", [(None, False), ("0", True)])
def test_children_can_get_the_environment_as_the_user_left_it(user_value, kept):
    """The OpenFold side of scripts/compare_openfold.py runs without the switch a request added."""
    code = (
        "import os\nfrom alphafold_mem.hugepages import environment_as_found, request_huge_pages\n"
        "request_huge_pages()\n"
        "print('THP_MEM_ALLOC_ENABLE' in os.environ, 'THP_MEM_ALLOC_ENABLE' in environment_as_found(os.environ))"
    )
    lines = _python(code, **({} if user_value is None else {THP_ENV: user_value}))
    assert lines == [f"True {kept}"]
