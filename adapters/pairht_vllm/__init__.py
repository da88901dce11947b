"""pairht_vllm: PAIR's two-phase generation on vLLM (prefix, then resume the selected ones).

``VLLMTwoPhase`` has the interface of :class:`pairht_trl.generation.TransformersTwoPhase`
(``generate_prefixes``, ``continue_selected``, ``generate_full``), so that
``PairGRPOTrainer`` switches backend by configuration. Two modes, as TRL's: ``"colocate"`` (a
``vllm.LLM`` in the training process) and ``"server"`` (TRL's ``VLLMClient`` talking to
``trl vllm-serve`` / ``vllm serve``).

Importing this package never imports vLLM (or torch); constructing a backend does, and raises an
``ImportError`` that says ``pip install 'pairht[vllm]'`` when vLLM is missing. Written against
vLLM 0.31 (supported range ``>=0.31,<0.34``); the real-engine path is not exercised by the CPU
test suite (see docs/trl.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from pairht_vllm._guard import SUPPORTED_VLLM

_EXPORTS: dict[str, str] = {
    "VLLMTwoPhase": "pairht_vllm.two_phase",
    "VLLMPrefixState": "pairht_vllm.two_phase",
    "require_vllm": "pairht_vllm._guard",
}

__all__ = ["SUPPORTED_VLLM", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pairht_vllm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
