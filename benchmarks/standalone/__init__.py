"""Modules that also run without :mod:`alphafold_mem` importable, under any Python with torch and numpy
(OpenFold's environment): :mod:`.rss` (the one peak-RSS measure of a call,
:func:`alphafold_mem.memory.host.rss_growth` loaded by file path, plus wall and CPU seconds, and the
glibc allocator settings; also used by the benchmark scripts) and :mod:`.openfold_worker` (one timed,
measured forward or training step of OpenFold's model or ours in a fresh process, for
``scripts/compare_openfold.py``). Run by file path, they import each other by file name; nothing here
imports :mod:`alphafold_mem` at module level."""
