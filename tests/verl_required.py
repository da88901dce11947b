"""The rule of the verl suite (tests/verl) when verl is absent: skip, naming where it runs, or
fail under ``PAIRHT_REQUIRE_VERL=1`` (set by ``make test-verl``), where a missing verl must not
pass as a skip."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_verl_for_tests() -> None:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        if os.environ.get("PAIRHT_REQUIRE_VERL") == "1":
            pytest.fail("PAIRHT_REQUIRE_VERL=1 but verl is not importable (build .venv-verl)")
        pytest.skip("verl is not installed: the verl suite runs in .venv-verl (make test-verl)",
                    allow_module_level=True)
