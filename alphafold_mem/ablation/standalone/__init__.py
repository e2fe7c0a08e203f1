"""Modules that also run without this package, under any Python with torch and numpy (OpenFold's
environment): :mod:`.rss` (peak-RSS growth of a call) and :mod:`.openfold_worker` (one timed,
measured forward of OpenFold's model or ours in a fresh process). Run by file path, they import
each other by file name; nothing here imports :mod:`alphafold_mem` at module level."""
