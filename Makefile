# The two README commands: `make demo` (the main job) and `make test` (install everything, run
# every test). Each does its own set-up in .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# torch==2.13.0 first: on this kind of machine it is the CPU build already on disk, so that pip
# does not fetch a multi-GB CUDA build when trl asks for torch.
STAMP  := $(VENV)/.installed
# A second environment at the lowest supported transformers (see constraints-lower.txt).
LOWER       := .venv-lower
LOWER_STAMP := $(LOWER)/.installed

.PHONY: demo test test-core test-lower lint bench docs clean

$(STAMP): pyproject.toml constraints-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints-ci.txt -e '.[cli,trl,verify,bench,dev]'
	touch $(STAMP)

$(LOWER_STAMP): pyproject.toml constraints-lower.txt
	$(PYTHON) -m venv $(LOWER)
	$(LOWER)/bin/python -m pip install -q --upgrade pip
	$(LOWER)/bin/python -m pip install -q torch==2.13.0
	$(LOWER)/bin/python -m pip install -q -c constraints-lower.txt -e '.[cli,trl,verify,dev]'
	touch $(LOWER_STAMP)

demo: $(STAMP)
	$(VENV)/bin/pairht demo

# Everything CI runs: lint, the whole suite (heavy end-to-end runs in their short form), and the
# TRL adapter's tests again at the lowest supported transformers.
test: test-core test-lower

test-core: $(STAMP)
	$(VENV)/bin/ruff check src adapters tests benchmarks examples
	PAIRHT_E2E_SHORT=1 $(PY) -m pytest -q -p no:cacheprovider --timeout=900 tests

test-lower: $(LOWER_STAMP)
	PAIRHT_E2E_SHORT=1 $(LOWER)/bin/python -m pytest -q -p no:cacheprovider --timeout=900 \
		tests/trl -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src adapters tests benchmarks examples
	$(VENV)/bin/mypy

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

docs: $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) $(LOWER) build *.egg-info src/*.egg-info adapters/*.egg-info
