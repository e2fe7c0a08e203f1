"""Benchmarks of the Triton kernels against their references (GPU; ``--smoke`` runs on CPU)."""
