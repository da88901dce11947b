"""pairht: PAIR (Pairwise-Aware Inclusion Reweighting) for adaptive rollout allocation in RLVR.

The estimator core needs only numpy, scipy and numba; ``import pairht`` never imports torch.
Top-level names are loaded lazily from their modules on first use, so that importing the
package stays cheap (numba compiles nothing until a hot loop is called).
"""

from __future__ import annotations

from pairht._lazy import lazy_exports

__version__ = "0.1.0"

# defining module -> names (one implementation of each formula, re-exported here)
_EXPORTS: dict[str, tuple[str, ...]] = {
    "pairht.estimators": (
        "pair_kernel", "pair_gradient", "loo_gradient", "group_mean_gradient", "pair_ht_gradient",
        "pair_advantages", "edge_weights", "conditional_bias", "design_covariance",
        "variance_estimate", "ess", "pair_estimate", "expected_edge_weights", "VARIANTS",
        "DesignCovariance",
    ),
    "pairht.allocation": ("allocate", "design_for"),
    "pairht.step": ("plan_continuations", "StepInputs", "ContinuationPlan"),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS, also=["__version__"])
