"""The one rule both vLLM suites (tests/rollout, tests/vllm_engine) apply when vLLM is absent.

Skip, naming where the suite runs instead, or fail under ``PAIRHT_REQUIRE_VLLM=1`` (set by
``make test-vllm``), where a missing engine must not pass as a skip. A bare namespace package
named ``vllm`` counts as missing. (Kept in ``tests/``: ``pairht.vllm`` may not import pytest.)
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_vllm_for_tests(where: str) -> None:
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        if os.environ.get("PAIRHT_REQUIRE_VLLM") == "1":
            pytest.fail("PAIRHT_REQUIRE_VLLM=1 but vllm is not importable (build .venv-vllm)")
        pytest.skip(f"vllm is not installed: {where}")
