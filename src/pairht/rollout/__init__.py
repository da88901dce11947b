"""pairht.rollout: the two-phase generation contract and its transformers backend.

Phase 1 decodes every candidate to a prefix checkpoint; phase 2 resumes only the selected ones.

==========================  ==============================================================
module                      what it holds
==========================  ==============================================================
``contract``                ``TwoPhaseBackend`` (the Protocol a trainer calls),
                            ``PrefixResult``, ``parse_selection``, ``check_prompts``
``snapping``                ``snap_cut`` (where a prefix ends), ``trim_after_eos``,
                            ``snap_token_ids_from_tokenizer``
``features``                ``prefix_features`` (the heads' input, from the policy)
``sync_check``              engine vs policy log-probabilities after a weight sync
``transformers_backend``    ``TransformersTwoPhase``: exact KV-cache resumption on ``generate``
``tiny_model``              ``tiny_llama``: the random-init tiny policy of the toy tasks and tests
==========================  ==============================================================

:mod:`pairht.vllm` implements the same contract on vLLM and imports only this package and the
core. Depends on torch and transformers, never on TRL. Names are loaded on first use.
"""

from __future__ import annotations

from pairht._extras import require
from pairht._lazy import lazy_exports

require("pairht.rollout", "trl", "torch", "transformers")


_EXPORTS: dict[str, tuple[str, ...]] = {
    "pairht.rollout.contract": (
        "PrefixResult", "TwoPhaseBackend", "check_prompts", "parse_selection",
    ),
    "pairht.rollout.features": ("prefix_features",),
    "pairht.rollout.snapping": ("snap_cut", "snap_token_ids_from_tokenizer", "trim_after_eos"),
    "pairht.rollout.transformers_backend": ("TransformersTwoPhase",),
    "pairht.rollout.tiny_model": ("tiny_llama",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
