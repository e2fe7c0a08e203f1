"""Host memory a CPU machine sees: the glibc setting the CLI applies (fresh processes: the test
session itself keeps glibc's default, see conftest.py) and the malloc-level measure."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from alphafold_mem.memory.host import MallocPeak, malloc_in_use, rss_growth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Frees a large block (glibc's dynamic threshold then rises to its size), then makes 40 blocks of
#: 4 MB and frees all but the last (which pins the heap top): prints the RSS left (MB).
RETENTION = """
import sys
from alphafold_mem.memory.host import apply_malloc_remedy, _status_kb
print(apply_malloc_remedy() if sys.argv[1] == "release" else "default", file=sys.stderr)
import torch
big = torch.ones(2 * 2 ** 20); del big  # 8 MB: below the 32 MiB cap of the dynamic threshold
keep = [torch.ones(2 ** 20) for _ in range(40)]
base = _status_kb("VmRSS")
keep = keep[-1:]
print((base - _status_kb("VmRSS")) / 1024)
"""


def _run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ALPHAFOLD_MEM_MALLOC"))}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "PYTHONPATH": ROOT, **env},
        cwd=ROOT,
    )


@pytest.mark.skipif(malloc_in_use() is None, reason="needs glibc >= 2.33")
def test_remedy_returns_freed_memory_and_can_be_declined():
    default = _run(RETENTION, "default")
    release = _run(RETENTION, "release")
    assert release.stderr.startswith("applied: M_MMAP_THRESHOLD 65536"), release.stderr
    freed_default, freed_release = float(default.stdout), float(release.stdout)
    assert freed_release > 140  # 39 of the 40 blocks of 4 MB go back to the system at once
    assert freed_default < 20  # glibc keeps them: the heap top is pinned by the last block
    declined = _run(RETENTION, "release", ALPHAFOLD_MEM_MALLOC="default")
    assert declined.stderr.startswith("not applied: ALPHAFOLD_MEM_MALLOC=default")
    own = _run(RETENTION, "release", MALLOC_MMAP_THRESHOLD_="131072")
    assert own.stderr.startswith("not applied: MALLOC_*_THRESHOLD_ set")


#: Makes 40 blocks of 4 MB in the heap (the dynamic threshold raised as above), frees all but the last
#: (which pins the heap top), waits 1.5 s: prints the RSS given back (MB) after the wait.
TRIM = """
import sys, time
from alphafold_mem.memory.host import apply_malloc_setting, _status_kb
print(apply_malloc_setting(sys.argv[1]), file=sys.stderr)
if sys.argv[2:] == ["said"]:  # a run whose only check is that line: no blocks, no wait
    sys.exit()
import torch
big = torch.ones(2 * 2 ** 20); del big
keep = [torch.ones(2 ** 20) for _ in range(40)]
base = _status_kb("VmRSS")
keep = keep[-1:]
t0 = time.time()
x = 0
while time.time() - t0 < 1.5:  # busy in Python, as a model run is: the thread still gets its turn
    x += 1
print((base - _status_kb("VmRSS")) / 1024)
"""


@pytest.mark.skipif(malloc_in_use() is None, reason="needs glibc >= 2.33")
def test_trim_hands_free_pages_back_within_its_period():
    trim = _run(TRIM, "trim")
    assert trim.stderr.startswith("applied: malloc_trim(0) every 1 s"), trim.stderr
    assert float(trim.stdout) > 140  # the 39 freed blocks of 4 MB, below the pinned heap top
    plain = _run(TRIM, "default")
    assert plain.stderr.startswith("not applied"), plain.stderr
    assert float(plain.stdout) < 20
    declined = _run(TRIM, "trim", "said", ALPHAFOLD_MEM_MALLOC="default")
    assert declined.stderr.startswith("not applied: ALPHAFOLD_MEM_MALLOC=default")
    chosen = _run(TRIM, "", "said", ALPHAFOLD_MEM_MALLOC="release")  # the environment picks the default setting
    assert chosen.stderr.startswith("applied: M_MMAP_THRESHOLD 65536"), chosen.stderr


def test_cli_applies_it_unless_told_not_to(monkeypatch, tmp_path):
    import alphafold_mem.memory.host as host  # the cli imports it from there when a command runs
    from alphafold_mem.cli import main

    calls = []
    monkeypatch.setattr(host, "apply_malloc_setting", lambda s: calls.append(s) or "applied: test")
    main(["train", "--data", str(tmp_path / "none"), "--out", str(tmp_path), "--max-steps", "1"])
    main(["train", "--malloc", "default", "--data", str(tmp_path / "none"), "--out", str(tmp_path)])
    main(["train", "--malloc", "release", "--data", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert calls == [None, "default", "release"]
    with pytest.raises(SystemExit):
        main(["train", "--malloc", "nope", "--data", str(tmp_path / "none"), "--out", str(tmp_path)])


@pytest.mark.skipif(malloc_in_use() is None, reason="needs glibc >= 2.33")
def test_malloc_peak_and_rss_growth_see_an_allocation():
    import ctypes  # glibc only (the skip above)

    ctypes.CDLL(None).malloc_trim(0)  # free pages kept from earlier tests of this worker would serve it unseen
    with MallocPeak() as m, rss_growth() as r:
        x = torch.ones(25 * 10**6 // 4)  # 25 MB, touched
        del x
    assert 25e6 <= m.peak <= 26e6
    assert r.bytes >= 24e6


STANDALONE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("rss_by_path", sys.argv[1])
rss = importlib.util.module_from_spec(spec); spec.loader.exec_module(rss)
import torch
result = rss.measure(lambda: torch.ones(2 ** 23).add_(1))
print(rss.host_module().OPT_OUT_ENV, result["rss_bytes"] > 16 * 2 ** 20, "alphafold_mem" in sys.modules)
"""


def test_measure_loads_by_file_path_outside_the_package(tmp_path):
    """The measure OpenFold's environment runs (benchmarks/standalone/rss.py, host.py by file path) works in
    a fresh interpreter that cannot import alphafold_mem (cwd elsewhere, no PYTHONPATH) and sees a 32 MB
    tensor."""
    script = os.path.join(ROOT, "benchmarks", "standalone", "rss.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", STANDALONE, script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ALPHAFOLD_MEM_MALLOC", "True", "False"]
