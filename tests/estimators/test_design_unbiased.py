"""Theorem 2 (design-unbiased induced-edge estimator), proved by exact enumeration.

For every design with positive pairs, the expectation of the pair-HT gradient over the
design's whole support equals the complete-pair target. Tolerance 1e-10 absolute: each
support term ``P(s) h_e / (M rho_e)`` is bounded by ``|h_e| / M`` since ``P(s) <= rho_e``,
so the round-off of a sum of at most a few hundred such terms is far below it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import Bernoulli, DependentRounding
from pairht.estimators import (
    conditional_bias,
    pair_advantages,
    pair_estimate,
    pair_gradient,
    pair_ht_gradient,
)
from pairht.testing import assert_design_unbiased, exact_expectation

from ._support import (
    DESIGN_KINDS,
    designs_and_population,
    ht_by_edges,
    ht_term_scale,
    independent_joint,
)

KINDS = sorted(DESIGN_KINDS)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=20)
@given(data=st.data())
def test_pair_ht_is_design_unbiased(kind, data):
    design, r, s = data.draw(designs_and_population(kind))
    joint = design.joint()
    expectation = exact_expectation(
        pair_ht_gradient, design, r, s, joint=joint, vectorized=True
    )
    np.testing.assert_allclose(expectation, pair_gradient(r, s), rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=20)
@given(data=st.data())
def test_pair_advantages_are_design_unbiased_through_scores(kind, data):
    design, r, s = data.draw(designs_and_population(kind))
    joint = design.joint()
    masks, probs = design.support()
    adv = pair_advantages(r, masks, joint)  # (K, G)
    expectation = probs @ (adv @ s)
    np.testing.assert_allclose(expectation, pair_gradient(r, s), rtol=0, atol=1e-10)


@settings(max_examples=30)
@given(designs_and_population("conditional_poisson"), st.data())
def test_advantages_reproduce_edge_sum_of_ht_estimate(case, data):
    design, r, s = case
    joint = design.joint()
    mask = data.draw(st.sampled_from(list(design.support()[0])))
    adv = pair_advantages(r, mask, joint)
    reference = ht_by_edges(r, s, mask, joint)
    # relative to the size of the terms summed (the result itself may cancel to zero): the
    # edge terms, and the products A_i s_i the advantage route sums
    tol = 1e-12 * (ht_term_scale(r, s, mask, joint) + np.abs(adv) @ np.abs(s).max(axis=1))
    np.testing.assert_allclose(adv @ s, reference, rtol=0, atol=tol)
    np.testing.assert_allclose(pair_ht_gradient(r, s, mask, joint), reference, rtol=0, atol=tol)
    assert np.all(adv[~mask] == 0.0)
    assert abs(adv.sum()) <= 1e-12 * (np.abs(adv).sum() + 1e-300)


def test_advantages_match_paper_example_by_hand():
    # pi = (1/2, 1/2, 1): rho_02 = 1/2, M = 3, A_0 = (1/6) * (1 - 0) / (1/2) = 1/3
    pi = np.array([0.5, 0.5, 1.0])
    adv = pair_advantages([1.0, 0.0, 0.0], [True, False, True], independent_joint(pi))
    np.testing.assert_allclose(adv, [1 / 3, 0.0, -1 / 3], rtol=1e-15)


def test_dependent_rounding_loses_exactly_its_zero_pairs():
    # Ordered pivotal sampling never selects units 0 and 1 together: the HT estimate then
    # misses h_01 / M on average, and conditional_bias reports exactly that.
    design = DependentRounding([0.5, 0.5, 0.5, 0.5])
    assert design.joint()[0, 1] == 0.0
    rng = np.random.default_rng(3)
    r, s = rng.random(4), rng.normal(size=(4, 3))
    bias = exact_expectation(
        pair_ht_gradient, design, r, s, joint=design.joint(), vectorized=True
    ) - pair_gradient(r, s)
    zero_pairs = [(i, j) for i in range(4) for j in range(i + 1, 4) if design.joint()[i, j] == 0]
    lost = -sum(0.5 * (r[i] - r[j]) * (s[i] - s[j]) for i, j in zero_pairs) / 6
    np.testing.assert_allclose(bias, lost, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        conditional_bias(r, s, design, weighting="exact"), lost, rtol=0, atol=1e-12
    )


def test_batched_masks_and_groups_equal_rowwise_estimates():
    rng = np.random.default_rng(4)
    r, s = rng.random((3, 5)), rng.normal(size=(3, 5, 2))
    pis = rng.uniform(0.2, 1.0, (3, 5))
    joint = independent_joint(pis)
    masks = rng.random((3, 5)) < 0.7
    batched = pair_ht_gradient(r, s, masks, joint)
    for b in range(3):
        np.testing.assert_allclose(batched[b], pair_ht_gradient(r[b], s[b], masks[b], joint[b]),
                                   rtol=1e-15, atol=1e-15)


def test_unselected_entries_are_never_read():
    pi = np.array([0.5, 0.4, 0.9, 0.7])
    joint = independent_joint(pi)
    mask = np.array([True, False, True, True])
    r = np.array([1.0, np.nan, 0.0, 1.0])
    s = np.array([[1.0, 2.0], [np.nan, np.inf], [0.5, 0.0], [-1.0, 3.0]])
    filled_r, filled_s = np.nan_to_num(r, nan=7.0), np.nan_to_num(s, nan=7.0, posinf=7.0)
    np.testing.assert_array_equal(pair_ht_gradient(r, s, mask, joint),
                                  pair_ht_gradient(filled_r, filled_s, mask, joint))
    np.testing.assert_array_equal(pair_advantages(r, mask, joint),
                                  pair_advantages(filled_r, mask, joint))


def test_assert_design_unbiased_accepts_ht_and_rejects_unweighted():
    design = Bernoulli([0.3, 0.6, 0.8, 0.5])
    rng = np.random.default_rng(5)
    r, s = rng.random(4), rng.normal(size=(4, 2))
    assert_design_unbiased(pair_ht_gradient, design, r, s)

    def unweighted(rewards, scores, mask, joint):
        return pair_estimate(rewards, scores, mask, weighting="unweighted")

    with pytest.raises(AssertionError, match="complete-pair target"):
        assert_design_unbiased(unweighted, design, r, s)


def test_exact_expectation_vectorized_equals_loop():
    design = Bernoulli([0.3, 0.6, 0.8])
    rng = np.random.default_rng(6)
    r, s = rng.random(3), rng.normal(size=(3, 2))
    joint = design.joint()
    loop = exact_expectation(pair_ht_gradient, design, r, s, joint=joint)
    vec = exact_expectation(pair_ht_gradient, design, r, s, joint=joint, vectorized=True)
    np.testing.assert_allclose(loop, vec, rtol=1e-14, atol=1e-15)
    with pytest.raises(ValueError, match="leading axis"):
        exact_expectation(lambda mask: np.zeros(2), design, vectorized=True)
