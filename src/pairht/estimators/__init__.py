"""The pair U-statistic target and its Horvitz-Thompson estimators (PAIR paper, Secs. 2-4).

- :mod:`~pairht.estimators.targets`: the pair kernel, the complete-pair target and the
  group-relative gradients it equals (Theorem 1).
- :mod:`~pairht.estimators.horvitz_thompson`: the pair-HT gradient and advantages from the
  completed candidates (Theorem 2), and the edge weights of every variant.
- :mod:`~pairht.estimators.variants`: the registry of edge-weighting variants.
- :mod:`~pairht.estimators.bias`: their exact conditional bias.
- :mod:`~pairht.estimators.covariance`: exact design covariance (numba) and its unbiased
  estimate.
- :mod:`~pairht.estimators.difference`: the difference estimator (HT advantages corrected
  by fixed reward predictions) and its exact moments.
- :mod:`~pairht.estimators.ess`: Kish effective sample size of the edge weights.
- :func:`~pairht.estimators.n_pairs`: the pair count ``M = G (G - 1) / 2``.
- :mod:`~pairht.estimators.tokens`: generated tokens of a draw and its HT full-suffix cost.
"""

from pairht.estimators._inputs import check_joint, n_pairs
from pairht.estimators.bias import BiasOptions, conditional_bias, expected_edge_weights
from pairht.estimators.covariance import DesignCovariance, design_covariance, variance_estimate
from pairht.estimators.difference import (
    DifferenceMoments,
    bernoulli_difference_trace,
    difference_advantages,
    difference_coefficients,
    difference_moments,
    prediction_baselines,
    target_coefficients,
)
from pairht.estimators.ess import ess
from pairht.estimators.horvitz_thompson import (
    WeightingOptions,
    check_edge_weights,
    edge_weights,
    pair_advantages,
    pair_advantages_from_weights,
    pair_estimate,
    pair_ht_gradient,
)
from pairht.estimators.targets import (
    MAX_KERNEL_ENTRIES,
    group_mean_gradient,
    loo_gradient,
    pair_gradient,
    pair_kernel,
)
from pairht.estimators.tokens import TokenCounts, token_counts
from pairht.estimators.variants import VARIANTS, Variant, register_variant

__all__ = [
    "MAX_KERNEL_ENTRIES",
    "VARIANTS",
    "BiasOptions",
    "DesignCovariance",
    "DifferenceMoments",
    "TokenCounts",
    "Variant",
    "WeightingOptions",
    "bernoulli_difference_trace",
    "check_edge_weights",
    "check_joint",
    "conditional_bias",
    "design_covariance",
    "difference_advantages",
    "difference_coefficients",
    "difference_moments",
    "edge_weights",
    "ess",
    "expected_edge_weights",
    "group_mean_gradient",
    "loo_gradient",
    "n_pairs",
    "pair_advantages",
    "pair_advantages_from_weights",
    "pair_estimate",
    "pair_gradient",
    "pair_ht_gradient",
    "pair_kernel",
    "prediction_baselines",
    "register_variant",
    "target_coefficients",
    "token_counts",
    "variance_estimate",
]
