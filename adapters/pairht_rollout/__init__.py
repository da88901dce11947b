"""pairht_rollout: the two-phase generation contract and its transformers backend.

Phase 1 decodes every candidate to a prefix checkpoint; phase 2 resumes only the selected ones.
:mod:`pairht_rollout.transformers_backend` implements it on Hugging Face ``generate`` with exact
KV-cache resumption; :mod:`pairht_vllm` implements the same contract on vLLM. Depends on torch and
transformers, never on TRL.
"""
