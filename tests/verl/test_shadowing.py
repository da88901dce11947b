"""The project's tests win over what the verl wheel installs.

verl's wheel puts top-level ``tests`` and ``scripts`` packages into site-packages, and this
folder is named ``verl``. pytest runs here in its default (prepend) import mode: the project's
``tests/`` has no ``__init__.py``, so no project test is ever imported as ``tests.*``, and a
folder without ``__init__.py`` is only a namespace package, which the installed ``verl`` (a
regular package) takes precedence over. These checks fail if either assumption breaks.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

import verl  # noqa: E402
import verl_batch  # noqa: E402

pytestmark = pytest.mark.verl

HERE = Path(__file__).resolve().parent
PROJECT_TESTS = HERE.parent


def test_the_verl_wheel_installs_a_top_level_tests_package_here():
    spec = importlib.util.find_spec("tests")
    assert spec is not None and spec.submodule_search_locations
    assert any("site-packages" in p for p in spec.submodule_search_locations)
    assert not (PROJECT_TESTS / "__init__.py").exists()


def test_project_test_modules_and_helpers_come_from_the_checkout():
    assert Path(verl_batch.__file__).resolve().parent == HERE
    assert Path(sys.modules["verl_required"].__file__).resolve().parent == PROJECT_TESTS
    assert not __name__.startswith("tests.")
    assert not [m for m in sys.modules if m.startswith("tests.") and "verl" in m]


def test_import_verl_is_the_installed_package_not_this_folder():
    assert verl.__file__ is not None
    assert "site-packages" in verl.__file__
    assert Path(verl.__file__).resolve().parent != HERE
