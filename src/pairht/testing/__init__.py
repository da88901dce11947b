"""Tools to verify designs and estimators yourself: hypothesis strategies and exact checkers.

Requires ``hypothesis`` (the ``dev`` extra) for the strategies.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "inclusion_probabilities": "pairht.testing.strategies",
    "fixed_size_inclusion_probabilities": "pairht.testing.strategies",
    "assert_design_unbiased": "pairht.testing.unbiased",
    "exact_expectation": "pairht.testing.unbiased",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pairht.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
