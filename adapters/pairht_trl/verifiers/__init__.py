"""Deprecated path: the verifiers are :mod:`pairht_verifiers` (no torch, TRL or transformers)."""

import sys

from pairht_trl._moved import alias

_new = alias("pairht_trl.verifiers", "pairht_verifiers")
for _sub in ("boxed", "math_answers", "programs", "sandbox"):
    sys.modules[f"pairht_trl.verifiers.{_sub}"] = sys.modules[f"pairht_verifiers.{_sub}"]
