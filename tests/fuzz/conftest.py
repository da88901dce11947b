"""The fuzz suite's long form: ``-m fuzz_long`` (or ``PAIRHT_FUZZ_LONG=1``) scales the examples.

Every test here carries the ``fuzz_long`` marker, so ``pytest -m fuzz_long`` selects exactly
the fuzz suite; selecting it that way also switches on the long form, as the environment
variable does. ``pytest tests`` (CI, no ``-m``) runs the short form. The scale is read by
:mod:`tests.fuzz._fuzz` when the test modules are imported, which is after this hook.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if "fuzz_long" in (config.getoption("markexpr", default="") or ""):
        os.environ.setdefault("PAIRHT_FUZZ_LONG", "1")
