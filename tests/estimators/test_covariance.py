"""Exact design covariance against enumeration, and the unbiased variance estimate.

The covariance is checked against the covariance of the pair-HT estimate over the design's
support and against Eq. general-covariance evaluated over explicit edge pairs. Tolerance:
1e-10 times the absolute scale sum_{e,f} P(I_e I_f) |h_e| |h_f| / (rho_e rho_f M^2) of the
terms, which bounds the round-off of either evaluation (the covariance itself can cancel to
far less than its terms, e.g. when pi is close to 1).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import Bernoulli, ConditionalPoisson, DependentRounding, Stratified
from pairht.estimators import design_covariance, pair_ht_gradient, variance_estimate
from pairht.estimators.covariance import _bernoulli_sigma, _general_sigma, _pair_coefficients
from pairht.testing import exact_expectation
from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)

from ._support import (
    DESIGN_KINDS,
    covariance_scale,
    designs_and_population,
    general_covariance_terms,
    rewards_for,
    scores_for,
    support_moments,
)

KINDS = sorted(DESIGN_KINDS)


def enumerated_covariance(r, s, design):
    masks, probs = design.support()
    estimates = pair_ht_gradient(r, s, masks, design.joint())
    return support_moments(estimates, probs)[1]


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=12)
@given(data=st.data())
def test_design_covariance_equals_covariance_over_support(kind, data):
    design, r, s = data.draw(designs_and_population(kind, max_dim=4))
    reference, scale = general_covariance_terms(r, s, design)
    # plus the smallest normal float64: tiny rewards (1e-161) make every term subnormal
    tol = 1e-10 * (scale + covariance_scale(r, s, design)) + np.finfo(np.float64).tiny
    cov = design_covariance(r, s, design)
    np.testing.assert_allclose(cov.matrix, enumerated_covariance(r, s, design), rtol=0, atol=tol)
    np.testing.assert_allclose(cov.matrix, reference, rtol=0, atol=tol)
    np.testing.assert_allclose(cov.trace, np.trace(reference), rtol=0, atol=tol)


@pytest.mark.parametrize(
    "design",
    [DependentRounding([0.5, 0.5, 0.5, 0.5, 0.6, 0.4]), Bernoulli([0.0, 0.5, 0.7, 0.9, 0.3, 1.0])],
    ids=["dependent_rounding", "bernoulli_with_zero_pi"],
)
def test_design_covariance_with_zero_pairs_drops_them_like_the_estimator(design):
    assert not design.all_pairs_positive()
    rng = np.random.default_rng(0)
    r, s = rng.random(6), rng.normal(size=(6, 3))
    np.testing.assert_allclose(design_covariance(r, s, design).matrix,
                               enumerated_covariance(r, s, design), rtol=1e-10, atol=1e-12)


@settings(max_examples=30)
@given(designs_and_population("bernoulli", max_dim=3))
def test_bernoulli_closed_form_equals_general_path(case):
    design, r, _ = case
    rho = design.joint()
    general = _general_sigma(_pair_coefficients(r[None], rho), design, rho, ht=False)[0]
    closed = _bernoulli_sigma(r[None], design.pi)[0]
    scale = covariance_scale(r, np.eye(r.shape[0]), design)
    np.testing.assert_allclose(closed, general, rtol=0, atol=1e-10 * scale)


def test_bernoulli_closed_form_equals_proposition_by_edges():
    # Proposition 1 written edge by edge, as printed in the paper
    rng = np.random.default_rng(1)
    pi = rng.uniform(0.2, 1.0, 6)
    r, s = rng.random(6), rng.normal(size=(6, 2))
    g, m = 6, 15
    h = {(i, j): 0.5 * (r[i] - r[j]) * (s[i] - s[j]) for i in range(g) for j in range(g)}
    cov = np.zeros((2, 2))
    for i, j in itertools.combinations(range(g), 2):
        cov += (1 / (pi[i] * pi[j]) - 1) * np.outer(h[i, j], h[i, j])
    for i in range(g):
        for j, k in itertools.combinations([u for u in range(g) if u != i], 2):
            term = (1 / pi[i] - 1) * np.outer(h[i, j], h[i, k])
            cov += term + term.T
    np.testing.assert_allclose(design_covariance(r, s, Bernoulli(pi)).matrix, cov / m**2,
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", ["bernoulli", "conditional_poisson"])
def test_trace_from_gram_equals_trace_from_scores(kind):
    rng = np.random.default_rng(2)
    pi = np.array([0.3, 0.5, 0.6, 0.7, 0.4, 0.5])
    design = Bernoulli(pi) if kind == "bernoulli" else ConditionalPoisson(pi)
    r, s = rng.random((2, 6)), rng.normal(size=(2, 6, 50))
    full = design_covariance(r, s, design)
    from_gram = design_covariance(r, None, design, gram=s @ np.swapaxes(s, -1, -2))
    np.testing.assert_allclose(from_gram.trace, full.trace, rtol=1e-12)
    assert from_gram.matrix is None and full.matrix.shape == (2, 50, 50)
    np.testing.assert_allclose(np.trace(full.matrix, axis1=-2, axis2=-1), full.trace, rtol=1e-12)
    assert design_covariance(r, s, design, full=False).matrix is None
    big = rng.normal(size=(6, 600))
    assert design_covariance(r[0], big, design).matrix is None  # auto: d > 512


@st.composite
def designs_with_positive_unions(draw, kind):
    """Designs whose inclusions of order 2-4 are all positive, generated valid by construction.

    Filtering random designs for positivity (``assume``) rejected most dependent-rounding
    draws and failed hypothesis' filter_too_much health check (issue 11). Instead:

    * fixed-size designs leave out exactly one unit (``sum(pi) = N - 1``, all ``pi`` in
      (0, 1), ``N >= 5``): then ``pi_S = sum_{u not in S} (1 - pi_u) > 0`` for every ``S``
      of at most ``N - 1`` units, whatever the design; conditional Poisson may also leave out
      two units, since every sample of its fixed size has positive probability;
    * Bernoulli (and its anchored form) with every ``pi > 0`` has ``pi_S = prod pi_k > 0``;
    * the anchored conditional Poisson base has ``n >= 2`` all free, so every base pair is
      positive, and the anchor's formula makes every set of 3 or 4 units positive.
    """
    build, integer_sum, largest = DESIGN_KINDS[kind]
    top = min(largest, 7)
    if kind == "anchored_conditional_poisson":
        pi = draw(fixed_size_inclusion_probabilities(2, top, allow_zero=False, allow_one=False))
        if pi.sum() < 1.5 and pi.size >= 4:
            pi = 1.0 - pi  # sum N - 1 >= 3
        design = build(pi)
    elif integer_sum:
        excluded = draw(st.sampled_from([1, 2])) if kind == "conditional_poisson" else 1
        pi = draw(fixed_size_inclusion_probabilities(
            4 + excluded, top, allow_zero=False, allow_one=False, n_excluded=excluded))
        design = build(pi)
    elif kind == "stratified":
        # levels 0.8 and 1: a stratum of N units draws floor(0.8 N) or one more, so it holds
        # min(N, 4) of its units with positive probability and every set of 4 is positive
        pi = draw(inclusion_probabilities(2, top, allow_zero=False))
        design = Stratified(np.where(pi > 0.5, 1.0, 0.8))
    else:
        design = build(draw(inclusion_probabilities(2, top, allow_zero=False)))
    g = design.n_units
    for k in (3, 4):  # the construction guarantees it: a failure here is a bug, not a filter
        if g >= k:
            rows = np.array(list(itertools.combinations(range(g), k)))
            assert np.all(design.inclusion(rows) > 0), (kind, design.pi)
    assert design.all_pairs_positive(), (kind, design.pi)
    return design, draw(rewards_for(g)), draw(scores_for(g, 3))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data())
def test_variance_estimate_is_unbiased(kind, data):
    design, r, s = data.draw(designs_with_positive_unions(kind))
    expectation = exact_expectation(
        lambda mask: variance_estimate(r, s, mask, design), design, vectorized=True
    )
    # each draw's terms, weighted by P(s) and summed over the support, are bounded by the
    # terms of the covariance formula itself: the same scale bounds the round-off
    _, scale = general_covariance_terms(r, s, design)
    trace = design_covariance(r, s, design).trace
    np.testing.assert_allclose(expectation, trace, rtol=0,
                               atol=1e-10 * (scale + covariance_scale(r, s, design))
                               + np.finfo(np.float64).tiny)


def test_variance_estimate_by_hand():
    # two units, both seen: V = (1 - rho) / rho^2 * |h|^2 = 0.75 / 0.0625 * 0.25
    assert variance_estimate([1.0, 0.0], np.array([[1.0], [0.0]]), [True, True],
                             Bernoulli([0.5, 0.5])) == pytest.approx(3.0, rel=1e-15)


def test_variance_estimate_ignores_unselected_and_accepts_gram():
    design = Bernoulli([0.5, 0.6, 0.7, 0.8])
    rng = np.random.default_rng(3)
    r, s = rng.random(4), rng.normal(size=(4, 3))
    mask = np.array([True, False, True, True])
    v = variance_estimate(r, s, mask, design)
    r_nan, s_nan = r.copy(), s.copy()
    r_nan[1], s_nan[1] = np.nan, np.nan
    assert variance_estimate(r_nan, s_nan, mask, design) == v
    np.testing.assert_allclose(variance_estimate(r, None, mask, design, gram=s @ s.T), v,
                               rtol=1e-13)


def test_variance_estimate_refuses_a_zero_union_inclusion():
    design = ConditionalPoisson([0.5, 0.5, 0.5, 0.5])  # n = 2: four units never together
    with pytest.raises(ValueError, match=r"design.inclusion\(\(0, 1, 2\)\) = 0.0"):
        variance_estimate(np.arange(4.0), np.ones((4, 1)), [True, True, False, False], design)
    with pytest.raises(ValueError, match=r"design.joint\(\)\[0, 1\] = 0.0"):
        variance_estimate(np.arange(4.0), np.ones((4, 1)), [True, False, True, False],
                          DependentRounding([0.5, 0.5, 0.5, 0.5]))


def test_design_covariance_rejects_bad_input():
    design = Bernoulli([0.5, 0.6, 0.7])
    r, s = np.array([1.0, 0.0, 1.0]), np.ones((3, 2))
    with pytest.raises(ValueError, match="exactly one of scores"):
        design_covariance(r, s, design, gram=np.eye(3))
    with pytest.raises(ValueError, match="exactly one of scores"):
        design_covariance(r, None, design)
    with pytest.raises(ValueError, match="gram must be symmetric"):
        design_covariance(r, None, design, gram=np.triu(np.ones((3, 3))))
    with pytest.raises(ValueError, match=r"gram must have shape \(\.\.\., G, G\)"):
        design_covariance(r, None, design, gram=np.eye(4))
    with pytest.raises(ValueError, match="full=True needs scores"):
        design_covariance(r, None, design, gram=np.eye(3), full=True)
    with pytest.raises(ValueError, match="scores must be finite"):
        design_covariance(r, np.full((3, 2), np.nan), design)
    with pytest.raises(ValueError, match=r"design\.n_units = 3 but rewards has G = 2"):
        design_covariance([1.0, 0.0], np.ones((2, 1)), design)


LINEAR_VARIANTS = [("clipped", {"w_max": 3.0}), ("unweighted", {}), ("marginal_only", {})]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("weighting", "extra"), LINEAR_VARIANTS)
@settings(max_examples=8)
@given(data=st.data())
def test_linear_variant_covariance_equals_covariance_over_support(kind, weighting, extra, data):
    """Eq. general-covariance with the variant's own edge weights w_e in place of 1/(M rho_e)
    is the exact covariance of that (biased) estimator over the design's support."""
    from pairht.estimators import pair_estimate

    design, r, s = data.draw(designs_and_population(kind, max_dim=3))
    masks, probs = design.support()
    pi_kw = {"pi": design.pi} if weighting == "marginal_only" else {}
    estimates = pair_estimate(r, s, masks, design.joint(), weighting=weighting, **extra, **pi_kw)
    reference = support_moments(estimates, probs)[1]
    # Tolerance: 1e-10 times the absolute size of the terms of the vertex form (as in
    # covariance_scale, with the variant's weights w_e: for a linear variant W = I * w, so the
    # largest |W| over the support recovers w on every edge that can be observed).
    from pairht.estimators import edge_weights

    w = np.abs(edge_weights(masks, design.joint(), weighting=weighting, **extra, **pi_kw))
    a = np.abs(r[:, None] - r[None, :]) * w.max(axis=0) / 2
    x = masks.astype(float)
    p4 = np.einsum("k,ki,kj,kl,kn->ijln", probs, x, x, x, x)
    rho = design.joint()
    n = np.linalg.norm(s, axis=1)
    both = p4 + np.einsum("ij,kl->ijkl", rho, rho)
    scale = float(np.einsum("ij,kl,ijkl,i,k->", a, a, both, n, n))
    cov = design_covariance(r, s, design, weighting=weighting, **extra)
    # plus the smallest normal float64: rewards near 1e-162 make every term subnormal, where
    # round-off is absolute (the scale itself underflows to 0)
    tiny = np.finfo(np.float64).tiny
    np.testing.assert_allclose(cov.matrix, reference, rtol=0, atol=1e-10 * scale + tiny)


@pytest.mark.parametrize("weighting", ["hajek", "observed_average"])
def test_ratio_variants_have_no_closed_form_covariance(weighting):
    with pytest.raises(ValueError, match="not linear"):
        design_covariance([1.0, 0.0, 1.0], np.eye(3), Bernoulli([0.5, 0.5, 0.5]),
                          weighting=weighting)


def test_clipped_covariance_needs_w_max():
    with pytest.raises(ValueError, match="needs w_max"):
        design_covariance([1.0, 0.0], np.eye(2), Bernoulli([0.5, 0.5]), weighting="clipped")
