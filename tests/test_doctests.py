"""Every numpydoc ``Examples`` section in the package runs, and prints what it says it prints.

One test per module of ``src/pairht`` (the core and its integration subpackages),
found by walking the source tree (not by importing packages), so that a module that stops
importing fails here instead of silently dropping out of the list. Each test imports its module,
collects the doctests of the objects *defined* in it (``doctest.DocTestFinder``, which skips
names re-exported from elsewhere, so nothing runs twice) and runs them with the standard library
runner and no option flags: an example that needs ``...`` or whitespace latitude says so with a
``# doctest: +ELLIPSIS`` directive of its own. A module without examples still has to import.

The examples run in a fresh temporary working directory (some write files) and with the module's
globals, as ``python -m doctest`` and pytest's ``--doctest-modules`` do.

Excluded modules: none. ``pairht.vllm`` imports without vLLM (the engine is imported only when
a backend is constructed) and its docstrings hold no example that needs the engine; vLLM is not
installed in the test environment (GPU only), so an example that needs it must be listed in
``NEEDS_VLLM`` below, which skips it *visibly* (with the reason) only while vLLM is missing.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (directory holding the top-level package, package name)
PACKAGES = ((ROOT / "src", "pairht"),)

#: module name -> reason. Every exclusion must say why.
EXCLUDED: dict[str, str] = {}

#: Modules whose examples need a real vLLM engine (skipped, with this reason, without vLLM).
NEEDS_VLLM: set[str] = set()

#: Packages whose modules need verl to import (skipped, with this reason, without verl; their
#: examples run in .venv-verl: tests/verl/test_doctests_verl.py).
NEEDS_VERL = "pairht.verl"

#: The standard runner's defaults: output must match exactly unless an example opts out.
OPTIONFLAGS = 0


def _module_names() -> list[str]:
    names = []
    for base, package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(parts))
    return names


MODULES = _module_names()


def test_module_walk_found_the_packages():
    # Guards the walk itself: a moved source tree must not turn this file into zero tests.
    for must in ("pairht.estimators.horvitz_thompson", "pairht.designs.conditional_poisson",
                 "pairht.allocation.solver", "pairht.torch.heads",
                 "pairht.verifiers.sandbox"):
        assert must in MODULES
    assert not set(EXCLUDED) - set(MODULES), "EXCLUDED names a module that does not exist"


@pytest.mark.parametrize("name", [m for m in MODULES if m not in EXCLUDED])
def test_examples_run(name, tmp_path, monkeypatch):
    if name in NEEDS_VLLM and importlib.util.find_spec("vllm") is None:
        pytest.skip(f"{name}: examples need a vLLM engine; vLLM is not installed here (the "
                    f"real engine runs in .venv-vllm: make test-vllm)")
    if name.split(".")[:2] == NEEDS_VERL.split(".") and not _has_verl():
        pytest.skip(f"{name}: needs verl, which is not installed here (its examples run in "
                    f"tests/verl/test_doctests_verl.py: make test-verl)")
    run_examples(name, tmp_path, monkeypatch)


def _has_verl() -> bool:
    # tests/verl is on sys.path's tests/ folder: a namespace package (no origin) is not verl
    spec = importlib.util.find_spec("verl")
    return spec is not None and spec.origin is not None


def run_examples(name: str, tmp_path, monkeypatch) -> None:
    """Run the examples defined in module ``name`` in ``tmp_path``; fail listing the failures."""
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = sorted((t for t in finder.find(module, name) if t.examples), key=lambda t: t.name)
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples failed in {name}:\n{report.getvalue()}"
    )
