"""Exact conditional bias of the practical variants (PAIR paper, appendix).

Each test computes E_design[estimate] - g_pair by enumerating the design's support and
compares it with the appendix formula written out here edge by edge; tolerance 1e-10
absolute, as for Theorem 2 (each support term is bounded by the edge terms' size).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pairht.designs import Bernoulli, ConditionalPoisson
from pairht.estimators import (
    conditional_bias,
    expected_edge_weights,
    pair_estimate,
    pair_gradient,
)
from pairht.testing import exact_expectation

from ._support import DESIGN_KINDS, dense_kernel, designs_and_population, edges

KINDS = sorted(DESIGN_KINDS)


def enumerated_bias(r, s, design, weighting, joint=None, **kw):
    joint = design.joint() if joint is None else joint
    expectation = exact_expectation(
        pair_estimate, design, r, s, joint=joint, weighting=weighting, vectorized=True, **kw
    )
    return expectation - pair_gradient(r, s)


def assert_both_match(r, s, design, weighting, expected, estimator_kw, **bias_kw):
    """Enumeration of the estimator and the closed form of conditional_bias both equal
    ``expected`` (1e-10 absolute)."""
    np.testing.assert_allclose(enumerated_bias(r, s, design, weighting, **estimator_kw),
                               expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(conditional_bias(r, s, design, weighting=weighting, **bias_kw),
                               expected, rtol=0, atol=1e-10)


def formula(r, s, multiplier):
    """(1/M) sum_{i<j} c_ij h_ij with c from a closed form, edge by edge."""
    h = dense_kernel(r, s)
    e = edges(r.shape[0])
    return sum(multiplier[i, j] * h[i, j] for i, j in e) / len(e)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data())
def test_unweighted_bias_matches_appendix_formula(kind, data):
    design, r, s = data.draw(designs_and_population(kind))
    expected = formula(r, s, design.joint() - 1.0)
    assert_both_match(r, s, design, "unweighted", expected, {})


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data(), w_max=st.sampled_from([1.5, 4.0, 10.0, 50.0]))
def test_clipped_bias_matches_appendix_formula(kind, data, w_max):
    design, r, s = data.draw(designs_and_population(kind))
    expected = formula(r, s, np.minimum(1.0, w_max * design.joint()) - 1.0)
    assert_both_match(r, s, design, "clipped", expected, {"w_max": w_max}, w_max=w_max)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data())
def test_marginal_only_bias_matches_appendix_formula(kind, data):
    design, r, s = data.draw(designs_and_population(kind))
    assume(np.all(design.pi > 0))  # with a zero marginal the estimator divides by zero
    rho, pi = design.joint(), design.pi
    expected = formula(r, s, rho / np.outer(pi, pi) - 1.0)
    assert_both_match(r, s, design, "marginal_only", expected, {"pi": pi})


@settings(max_examples=30)
@given(designs_and_population("bernoulli"))
def test_marginal_only_is_unbiased_under_bernoulli(case):
    design, r, s = case
    np.testing.assert_allclose(conditional_bias(r, s, design, weighting="marginal_only"),
                               0.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["bernoulli", "conditional_poisson"])
@settings(max_examples=8)
@given(data=st.data(), noise=st.floats(0.5, 2.0))
def test_estimated_propensity_bias_matches_appendix_formula(kind, data, noise):
    design, r, s = data.draw(designs_and_population(kind))
    rho = design.joint()
    # a wrong but admissible estimate: scaled, then held inside the Frechet bounds (which the
    # estimators enforce), with pi on the diagonal
    pi = design.pi
    lower = np.maximum(pi[:, None] + pi[None, :] - 1.0, 1e-12)
    rho_hat = np.clip(rho * noise, lower, np.minimum(pi[:, None], pi[None, :]))
    np.fill_diagonal(rho_hat, pi)
    expected = formula(r, s, rho / rho_hat - 1.0)
    assert_both_match(r, s, design, "exact", expected, {"joint": rho_hat}, rho_hat=rho_hat)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8)
@given(data=st.data())
def test_exact_variant_has_zero_bias(kind, data):
    design, r, s = data.draw(designs_and_population(kind))
    assert np.all(conditional_bias(r, s, design, weighting="exact") == 0.0)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=10)
@given(data=st.data())
def test_observed_average_bias_matches_conditional_weight_form(kind, data):
    # appendix: E[sum I h / K_E | K_E > 0] = sum w_ij h_ij, w_ij = E[I_ij / K_E | K_E > 0];
    # the estimator is 0 when K_E = 0, so its expectation is P(K_E > 0) times that.
    design, r, s = data.draw(designs_and_population(kind))
    masks, probs = design.support()
    g = design.n_units
    sizes = masks.sum(axis=1)
    k_e = sizes * (sizes - 1) / 2
    some = k_e > 0
    p_some = probs[some].sum()
    w = np.zeros((g, g))
    for i, j in edges(g):
        ind = masks[some, i] & masks[some, j]
        w[i, j] = np.sum(probs[some] * ind / k_e[some]) / p_some
    target = pair_gradient(r, s)
    h = dense_kernel(r, s)
    expected = p_some * sum(w[i, j] * h[i, j] for i, j in edges(g)) - target
    assert_both_match(r, s, design, "observed_average", expected, {})


@pytest.mark.parametrize("kind", ["bernoulli", "conditional_poisson", "anchored_bernoulli"])
@settings(max_examples=10)
@given(data=st.data())
def test_hajek_bias_equals_enumerated_ratio_estimator(kind, data):
    design, r, s = data.draw(designs_and_population(kind))
    masks, probs = design.support()
    rho = design.joint()
    h = dense_kernel(r, s)
    total = np.zeros(s.shape[1])
    for mask, p in zip(masks, probs):  # the ratio estimator, from its definition
        obs = [(i, j) for i, j in edges(design.n_units) if mask[i] and mask[j]]
        if obs:
            num = sum(h[i, j] / rho[i, j] for i, j in obs)
            total += p * num / sum(1.0 / rho[i, j] for i, j in obs)
    expected = total - pair_gradient(r, s)
    np.testing.assert_allclose(conditional_bias(r, s, design, weighting="hajek"),
                               expected, rtol=0, atol=1e-10)


def test_hajek_is_exact_for_a_self_weighting_design():
    # conditional Poisson with equal pi: rho constant, every sample has the same K_E, so the
    # Hajek and HT estimates coincide and both are unbiased.
    design = ConditionalPoisson(np.full(6, 0.5))
    rng = np.random.default_rng(0)
    r, s = rng.random(6), rng.normal(size=(6, 2))
    np.testing.assert_allclose(conditional_bias(r, s, design, weighting="hajek"), 0.0,
                               atol=1e-12)
    np.testing.assert_allclose(conditional_bias(r, s, design, weighting="observed_average"),
                               0.0, atol=1e-12)


def test_expected_edge_weights_by_hand():
    # Bernoulli(1/2)^3: edge (0, 1) is seen with prob 1/4; then K_E = 3 or 1 equally often
    ew = expected_edge_weights(Bernoulli([0.5, 0.5, 0.5]), weighting="observed_average")
    np.testing.assert_allclose(ew[0, 1], 0.25 * (0.5 / 3 + 0.5 / 1), rtol=1e-15)


def test_bias_is_batched_over_groups():
    design = Bernoulli([0.3, 0.6, 0.9, 0.5])
    rng = np.random.default_rng(1)
    r, s = rng.random((3, 4)), rng.normal(size=(3, 4, 2))
    out = conditional_bias(r, s, design, weighting="hajek")
    for b in range(3):
        np.testing.assert_allclose(out[b], conditional_bias(r[b], s[b], design,
                                                            weighting="hajek"), rtol=1e-14)


def test_conditional_bias_rejects_bad_input():
    design = Bernoulli([0.3, 0.6, 0.9])
    r, s = np.array([1.0, 0.0, 1.0]), np.ones((3, 1))
    with pytest.raises(ValueError, match=r"design\.n_units = 3 but rewards has G = 4"):
        conditional_bias(np.zeros(4), np.ones((4, 1)), design, weighting="exact")
    with pytest.raises(ValueError, match=r"design must be a pairht\.designs\.Design"):
        conditional_bias(r, s, np.eye(3), weighting="exact")
    with pytest.raises(ValueError, match="needs w_max"):
        conditional_bias(r, s, design, weighting="clipped")
    with pytest.raises(ValueError, match=r"rho_hat .* only affects variants that use joint"):
        conditional_bias(r, s, design, weighting="unweighted", rho_hat=design.joint())
    zero = design.joint()
    zero[0, 1] = zero[1, 0] = 0.0
    with pytest.raises(ValueError, match=r"rho_hat must be > 0 on every edge.*rho_hat\[0, 1\]"):
        conditional_bias(r, s, design, weighting="exact", rho_hat=zero)
    with pytest.raises(ValueError, match="rewards must be finite"):
        conditional_bias([np.nan, 0.0, 1.0], s, design, weighting="exact")
    with pytest.raises(ValueError, match="support"):
        conditional_bias(np.zeros(21), np.ones((21, 1)), Bernoulli(np.full(21, 0.5)),
                         weighting="hajek")
