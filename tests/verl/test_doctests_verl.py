"""The examples of pairht.verl's modules run, here where verl is installed (the main
environment's tests/test_doctests.py skips them without verl)."""

from __future__ import annotations

import pytest

from test_doctests import MODULES, NEEDS_VERL, run_examples
from verl_required import require_verl_for_tests

require_verl_for_tests()

pytestmark = pytest.mark.verl

VERL_MODULES = [m for m in MODULES if m.split(".")[:2] == NEEDS_VERL.split(".")]


def test_the_walk_found_the_verl_modules():
    assert {"pairht.verl", "pairht.verl.rows", "pairht.verl.advantage"} <= set(VERL_MODULES)


@pytest.mark.parametrize("name", VERL_MODULES)
def test_examples_run(name, tmp_path, monkeypatch):
    run_examples(name, tmp_path, monkeypatch)
