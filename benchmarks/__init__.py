"""Measurement code that is not the product: harnesses that drive other systems (OpenFold, side by
side with ours: :mod:`.openfold`), processes that run without the package (:mod:`.standalone`) and
the Triton kernels' benchmarks against their references (:mod:`.kernels`).

This tree sits beside ``scripts/`` in the repository and is not installed (pyproject.toml's
``[tool.setuptools]`` lists the installed packages; ``tests/test_packaging.py`` builds the wheel and
finds no benchmark module in it); the scripts and the tests import it
with the repository root on ``sys.path``. It imports :mod:`alphafold_mem`; nothing in
:mod:`alphafold_mem` imports it (``tests/test_package_boundaries.py``).
"""
