"""Deprecated path: this module is now :mod:`pairht_rollout.transformers_backend`."""

from pairht_trl._moved import alias

alias("pairht_trl.generation", "pairht_rollout.transformers_backend")
