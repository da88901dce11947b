"""pairht: PAIR (Pairwise-Aware Inclusion Reweighting) for adaptive rollout allocation in RLVR.

The estimator core needs only numpy, scipy and numba; ``import pairht`` never imports torch.
Top-level names are loaded lazily from their modules on first use, so that importing the
package stays cheap (numba compiles nothing until a hot loop is called).
"""

from __future__ import annotations

from pairht._lazy import lazy_exports

__version__ = "0.1.0"

# name -> module that defines it (one implementation of each formula, re-exported here)
_EXPORTS: dict[str, str] = {
    "pair_kernel": "pairht.estimators",
    "pair_gradient": "pairht.estimators",
    "loo_gradient": "pairht.estimators",
    "group_mean_gradient": "pairht.estimators",
    "pair_ht_gradient": "pairht.estimators",
    "pair_advantages": "pairht.estimators",
    "edge_weights": "pairht.estimators",
    "conditional_bias": "pairht.estimators",
    "design_covariance": "pairht.estimators",
    "variance_estimate": "pairht.estimators",
    "ess": "pairht.estimators",
    "pair_estimate": "pairht.estimators",
    "expected_edge_weights": "pairht.estimators",
    "VARIANTS": "pairht.estimators",
    "DesignCovariance": "pairht.estimators",
    "allocate": "pairht.allocation",
    "design_for": "pairht.allocation",
    "plan_continuations": "pairht.step",
    "StepInputs": "pairht.step",
    "ContinuationPlan": "pairht.step",
}

__all__ = ["__version__", *_EXPORTS]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, also=["__version__"])
