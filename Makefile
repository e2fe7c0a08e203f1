# One-command set-up: `make demo` (the main job) and `make test` (the test suite) each create the
# virtual environment on first use. torch==2.13.0 is installed first so pip never pulls a CUDA build
# on CPU machines; GPU users: see environment.yml.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install test test-fast demo docs benchmarks clean-venv

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test,docs]"
	touch $(STAMP)

install: $(STAMP)

# ALPHAFOLD_MEM_TEST_CPU=1 ranks the tests by CPU time at the end (tests/conftest.py).
test: install
	$(PY) -m pytest -q -n 2

# The inner loop: everything but the few long cases (tests/conftest.py SLOW_TESTS).
test-fast: install
	$(PY) -m pytest -q -n 2 -m "not slow"

# Main job: predict 1LCD chain A from its FASTA + a3m with the shipped demo weights (CPU, ~1 min).
demo: install
	$(VENV)/bin/alphafold-mem predict data/fasta/per_entry/1lcd.fasta \
		--msa data/alignments/1lcd_A/jackhmmer_pool.a3m --out out/demo
	@echo "structure: out/demo/1lcd_A/ranked_0.pdb (pLDDT in the B-factor column); the rest of the target in out/demo/1lcd_A/"

# The documentation site (mkdocs.yml) into site/; any warning fails the build (tests/test_docs_build.py too).
# NO_MKDOCS_2_WARNING=1 silences mkdocs-material's end-of-life banner (material/templates/__init__.py).
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Regenerate docs/benchmarks/*.md from the benchmark scripts: MODE=quick (small sizes, minutes on a CPU)
# or MODE=full (the scripts' documented sizes); PAGES=memory,dap,... for some pages only.
MODE ?= quick
PAGES ?=
benchmarks: install
	$(PY) scripts/make_benchmarks.py --mode $(MODE) $(if $(PAGES),--pages $(PAGES))

clean-venv:
	rm -rf $(VENV)
