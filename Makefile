# The two README commands: `make demo` (the main job) and `make test` (install everything, run
# every test). Each does its own set-up in .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch==2.13.0 first: on this kind of machine it is the CPU build already on disk, so that pip
# does not fetch a multi-GB CUDA build when trl asks for torch.
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench docs clean

$(STAMP): pyproject.toml constraints-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints-ci.txt -e '.[cli,trl,verify,bench,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pairht demo

test: $(STAMP)
	$(VENV)/bin/ruff check src adapters tests benchmarks examples
	PAIRHT_E2E_SHORT=1 $(PY) -m pytest -q -p no:cacheprovider --timeout=900 tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src adapters tests benchmarks examples
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info adapters/*.egg-info
