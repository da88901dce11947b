"""What the distribution is: a torch-free estimator core (a core install, ``pip install .``, never
pays for torch), and the packaging a published wheel needs (license, type markers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli backport
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]

CORE_MODULES = (
    "pairht",
    "pairht.designs",
    "pairht.estimators",
    "pairht.allocation",
    "pairht.calibration",
    "pairht.audit",
    "pairht.testing",
)


def test_the_core_imports_and_runs_without_torch_or_transformers():
    # Import every core module and run one allocation -> design -> estimate round trip, then
    # check that nothing heavy came in (a fresh interpreter: this test process has torch).
    code = (
        "import importlib, sys\n"
        f"for m in {CORE_MODULES!r}: importlib.import_module(m)\n"
        "import numpy as np, pairht\n"
        "res = pairht.allocate([0.2, 0.5, 0.9], [10.0, 20.0, 30.0], budget=30.0)\n"
        "d = pairht.design_for(res.pi, 'bernoulli')\n"
        "a = pairht.pair_advantages([1.0, 0.0, 1.0], np.ones(3, bool), d.joint())\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'trl', 'accelerate') "
        "if m in sys.modules)\n"
        "print(heavy); sys.exit(1 if heavy else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_top_level_names_resolve_to_their_single_implementation():
    import pairht
    from pairht import allocation, estimators, step

    for name in pairht.__all__:
        if name == "__version__":
            continue
        obj = getattr(pairht, name)
        home = allocation if name in {"allocate", "design_for"} else (
            step if name in {"plan_continuations", "StepInputs", "ContinuationPlan"}
            else estimators)
        assert obj is getattr(home, name), name


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_license_is_an_spdx_expression_with_the_full_apache_text_shipped():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    # setuptools refuses a License classifier next to an SPDX expression
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    # the whole text, not a pointer to it: the last section and the end of the terms
    assert "9. Accepting Warranty or Additional Liability." in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_one_top_level_package_shipped_with_a_py_typed_marker():
    cfg = _pyproject()["tool"]["setuptools"]
    # the package directories on disk are the ones the wheel's package search includes ...
    dirs = {d.name: d for d in (ROOT / "src").iterdir() if (d / "__init__.py").is_file()}
    assert set(dirs) == {"pairht"}
    include = {name.rstrip("*") for name in cfg["packages"]["find"]["include"]}
    assert set(dirs) == include
    # ... each holds the PEP 561 marker, and package data carries it into the wheel
    assert not [name for name, d in dirs.items() if not (d / "py.typed").is_file()]
    assert "py.typed" in cfg["package-data"]["*"]


def test_test_file_basenames_are_unique():
    # tests/ has no __init__.py (pytest's default "prepend" import mode): two test files with
    # one basename in different folders make collection of the whole suite fail.
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) > 100
    assert not sorted({n for n in names if names.count(n) > 1})
