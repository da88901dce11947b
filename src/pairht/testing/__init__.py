"""Tools to verify designs and estimators yourself: hypothesis strategies and exact checkers.

Requires ``hypothesis`` (the ``dev`` extra) for the strategies.
"""

from __future__ import annotations

from pairht._lazy import lazy_exports

_EXPORTS: dict[str, tuple[str, ...]] = {
    "pairht.testing.strategies": ("inclusion_probabilities", "fixed_size_inclusion_probabilities"),
    "pairht.testing.unbiased": ("assert_design_unbiased", "exact_expectation"),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
