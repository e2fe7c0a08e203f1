"""Measurement code that is not the product: harnesses that drive other systems (OpenFold, side by
side with ours: :mod:`.openfold`) and processes that run without the package (:mod:`.standalone`).

This tree sits beside ``scripts/`` in the repository and is not installed (pyproject.toml's
``[tool.setuptools.packages.find]`` lists ``alphafold_mem`` only); the scripts and the tests import it
with the repository root on ``sys.path``. It imports :mod:`alphafold_mem`; nothing in
:mod:`alphafold_mem` imports it (``tests/test_package_boundaries.py``).
"""
