"""How the project installs: the repository's top-level ``kernels/`` folder is the package
``alphafold_mem.kernels`` (a top-level ``kernels`` would collide with the public index's package of
that name), and the public ``kernels`` installs beside it (it is in the ``test`` extra)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: import package -> its folder in the repository
FOLDERS = {"alphafold_mem": ROOT / "alphafold_mem", "alphafold_mem.kernels": ROOT / "kernels"}


def _setuptools() -> dict:
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_listed_packages_are_the_folders():
    """pyproject.toml lists the packages (find cannot rename kernels/): every folder holding an
    ``__init__.py`` is listed under its import name, and nothing else is."""
    config = _setuptools()
    assert config["package-dir"] == {"alphafold_mem.kernels": "kernels"}
    on_disk = {
        ".".join([name, *init.parent.relative_to(folder).parts])
        for name, folder in FOLDERS.items()
        for init in folder.rglob("__init__.py")
    }
    listed = set(config["packages"])
    assert listed == on_disk, (
        f"pyproject.toml [tool.setuptools] packages: add {sorted(on_disk - listed)}, remove {sorted(listed - on_disk)}"
    )


def test_data_files_are_package_data():
    """Every file in the package folders that is not Python source ships as package data."""
    data = _setuptools().get("package-data", {})
    shipped = {
        (FOLDERS[name] if name in FOLDERS else FOLDERS["alphafold_mem"].joinpath(*name.split(".")[1:])) / f
        for name, files in data.items()
        for f in files
    }
    found = {
        p
        for folder in FOLDERS.values()
        for p in folder.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }
    assert found == shipped, f"[tool.setuptools.package-data]: add {sorted(map(str, found - shipped))}"


def test_public_kernels_package_installs_beside_ours(tmp_path):
    """From outside the checkout (what an installed environment sees): ``import kernels`` is the public
    index's package, not the repository's folder, ``alphafold_mem.kernels`` is ours, and one of our
    fused kernels runs (Triton's interpreter on CPU) and matches its reference, in the same process."""
    code = textwrap.dedent(
        f"""
        import os, pathlib, sys
        import torch
        import kernels as public
        from alphafold_mem import kernels as ours
        from alphafold_mem.kernels import _triton_support, reference

        repo_kernels = pathlib.Path({str(ROOT / "kernels")!r})
        assert pathlib.Path(public.__file__).resolve().parent != repo_kernels, public.__file__
        assert hasattr(public, "get_kernel"), sorted(vars(public))  # the public package's entry point
        assert ours.__name__ == "alphafold_mem.kernels" and hasattr(ours, "triangle_multiplication")
        assert sys.modules["kernels"] is public and public is not ours
        reason = _triton_support.triton_unavailable_reason()
        if reason is not None:
            print("no triton:", reason)
            raise SystemExit(0)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(3, 5, 24, generator=g, requires_grad=True)
        w = torch.randn(24, generator=g, requires_grad=True)
        b = torch.randn(24, generator=g, requires_grad=True)
        out = ours.layer_norm(x, w, b, impl="triton")
        ref = reference.layer_norm(x, w, b)
        grads = torch.autograd.grad(out.sum(), (x, w, b))
        ref_grads = torch.autograd.grad(ref.sum(), (x, w, b))
        for got, want in zip((out, *grads), (ref, *ref_grads)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        print("fused layer_norm ok beside", public.__name__, public.__file__)
        """
    )
    env = dict(os.environ)
    if "TRITON_INTERPRET" not in env and not _cuda():
        env["TRITON_INTERPRET"] = "1"
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    if "No module named 'kernels'" in res.stderr:
        pytest.fail("the public 'kernels' package is not installed: pip install -e '.[test]'")
    assert res.returncode == 0, res.stderr[-3000:]
    if "no triton:" in res.stdout:
        pytest.skip(res.stdout.strip())
    assert "fused layer_norm ok beside kernels" in res.stdout


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_checkout_on_sys_path_does_not_pass_for_the_public_kernels():
    """Run from the repository root (its folder first on sys.path), ``import kernels`` finds the
    kernels/ folder before the installed package: it refuses in one line naming the way out, instead
    of standing in for the public package; ``python -P`` (3.11+: no script directory on sys.path)
    imports the public one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    res = subprocess.run(
        [sys.executable, "-c", "import kernels"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:") and "import it as alphafold_mem.kernels" in last and "python -P" in last
    if sys.version_info < (3, 11):
        return
    res = subprocess.run(
        [sys.executable, "-P", "-c", "import kernels; print(kernels.__file__)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert pathlib.Path(res.stdout.strip()).resolve().parent != ROOT / "kernels"


def test_the_wheel_ships_no_benchmark_module(tmp_path):
    """``pip wheel .`` (offline, no build isolation) of a copy of the sources: the wheel holds the
    package and its kernels, and no benchmark or measurement module (they live in ``benchmarks/``)."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("alphafold_mem", "kernels", "benchmarks"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        cwd=src,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # the checkout's kernels/ is not `kernels`
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = tmp_path.glob("alphafold_mem-*.whl")
    files = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")]
    assert "alphafold_mem/kernels/fused_attention.py" in files and "alphafold_mem/predict/runner.py" in files
    measuring = [n for n in files if "benchmark" in n or "/bench_" in n or n.startswith("benchmarks/")]
    assert measuring == [], f"the wheel ships measurement code: {measuring}"
