"""Tools to verify designs and estimators yourself: hypothesis strategies and exact checkers.

Requires ``hypothesis`` (the ``dev`` extra) for the strategies.
"""

from __future__ import annotations

from pairht._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "inclusion_probabilities": "pairht.testing.strategies",
    "fixed_size_inclusion_probabilities": "pairht.testing.strategies",
    "assert_design_unbiased": "pairht.testing.unbiased",
    "exact_expectation": "pairht.testing.unbiased",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
