"""alphafold_mem.hugepages: torch's huge-page switch is set on import, before torch loads, unless
the user decided; huge_pages_status reads the mapping flags of a real allocation."""

import os
import subprocess
import sys

import pytest

from alphafold_mem.hugepages import THP_ENV, _kernel_mode

PROBE = (
    "import os, sys\n{first}import alphafold_mem\nfrom alphafold_mem.hugepages import huge_pages_status\n"
    "print(os.environ.get('THP_MEM_ALLOC_ENABLE')); print(huge_pages_status())"
)


def _python(code: str, **env: str) -> list[str]:
    """Lines printed by ``code`` in a fresh interpreter whose environment has neither switch, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in (THP_ENV, "ALPHAFOLD_MEM_MALLOC")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()


def _probe(first: str = "", **env: str) -> list[str]:
    return _python(PROBE.format(first=first), **env)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_import_requests_huge_pages_and_they_take_effect():
    value, status = _probe()
    assert value == "1" and "requested: THP_MEM_ALLOC_ENABLE=1" in status
    if _kernel_mode() in ("always", "madvise"):
        assert status.startswith("on:"), status
    else:
        assert status.startswith("off:"), status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
@pytest.mark.parametrize(
    "first, env, expect",
    [
        ("", {THP_ENV: "0"}, "left as set: THP_MEM_ALLOC_ENABLE=0"),
        ("", {"ALPHAFOLD_MEM_MALLOC": "default"}, "not requested: ALPHAFOLD_MEM_MALLOC=default"),
        ("import torch\n", {}, "not requested: torch was imported before alphafold_mem"),
    ],
)
def test_the_users_choice_or_an_earlier_torch_import_stands(first, env, expect):
    value, status = _probe(first, **env)
    assert value == str(env.get(THP_ENV))  # printed: None when unset
    assert expect in status and status.startswith("off:"), status


@pytest.mark.parametrize("user_value, kept", [(None, False), ("0", True)])
def test_children_can_get_the_environment_as_the_user_left_it(user_value, kept):
    """The OpenFold side of scripts/compare_openfold.py runs without the switch our import added."""
    code = (
        "import os, alphafold_mem\nfrom alphafold_mem.hugepages import environment_as_found\n"
        "print('THP_MEM_ALLOC_ENABLE' in os.environ, 'THP_MEM_ALLOC_ENABLE' in environment_as_found(os.environ))"
    )
    lines = _python(code, **({} if user_value is None else {THP_ENV: user_value}))
    assert lines == [f"True {kept}"]
