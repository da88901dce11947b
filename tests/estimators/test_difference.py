"""The difference pair estimator: unbiasedness and exact covariance, by enumeration.

Every check enumerates the design's support (every sample and its probability) and forms
``A_i`` from :func:`difference_advantages` on each sample, against the definitions
``c_i = (1/2M) sum_j (r_i - r_j)`` and ``Cov(A_i, A_k)`` written out here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pairht.designs import Bernoulli
from pairht.estimators.difference import (
    bernoulli_difference_trace,
    difference_advantages,
    difference_coefficients,
    difference_moments,
)

from ._support import positive_pair_designs, rewards_for

KINDS = ["bernoulli", "conditional_poisson", "stratified", "randomized_dependent_rounding"]


def _target(r: np.ndarray) -> np.ndarray:
    g = r.shape[0]
    return np.array([sum(r[i] - r[j] for j in range(g) if j != i) for i in range(g)]) / (
        g * (g - 1))


def _enumerated(design, r, b):
    masks, probs = design.support()
    adv = np.stack([difference_advantages(np.where(m, r, np.nan), m, design.joint(), b)
                    for m in masks])
    mean = probs @ adv
    cov = (adv - mean).T @ ((adv - mean) * probs[:, None])
    return mean, cov


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_unbiased_and_exact_covariance_by_enumeration(kind: str, data: st.DataObject) -> None:
    design = data.draw(positive_pair_designs(kind, max_size=7))
    g = design.n_units
    r = data.draw(rewards_for(g))
    b = data.draw(hnp.arrays(np.float64, g, elements=st.floats(-1.0, 2.0)))
    mean, cov = _enumerated(design, r, b)
    np.testing.assert_allclose(mean, _target(r), atol=1e-10)  # unbiased for any baselines
    mom = difference_moments(r, b, design)
    np.testing.assert_allclose(mom.mean_advantages, _target(r), atol=1e-10)
    np.testing.assert_allclose(mom.target_advantages, _target(r), atol=1e-12)
    np.testing.assert_allclose(mom.advantage_covariance, cov, atol=1e-9, rtol=1e-9)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_exact_baselines_give_the_unit_level_ht_estimator(data: st.DataObject) -> None:
    design = data.draw(positive_pair_designs("conditional_poisson", max_size=7))
    g = design.n_units
    r = data.draw(rewards_for(g))
    mom = difference_moments(r, r, design)
    pi = design.pi
    c = _target(r)
    # A_i = J_i c_i / pi_i: covariance c_i c_k (pi_ik - pi_i pi_k) / (pi_i pi_k)
    joint = design.joint()
    expect = np.outer(c, c) * (joint - np.outer(pi, pi)) / np.outer(pi, pi)
    np.testing.assert_allclose(mom.advantage_covariance, expect, atol=1e-10)
    masks, _ = design.support()
    for m in masks[:8]:
        # A_i carries a factor 1/pi_i (up to 1e6 for the strategy's pi = 1e-6), which scales
        # its round-off; the error times pi_i is held to 1e-12 (absolute where pi_i = 1).
        err = difference_advantages(r, m, joint, r) - np.where(m, c / pi, 0.0)
        np.testing.assert_array_less(np.abs(err) * pi, 1e-12)


def test_zero_inclusion_leaves_the_missing_terms_as_bias() -> None:
    # unit 1 is never completed: E[A_1] = 0, and unit 0 misses the (b_1 - r_1) correction
    design = Bernoulli([0.5, 0.0, 1.0])
    r, b = np.array([1.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0])
    mean, _ = _enumerated(design, r, b)
    mom = difference_moments(r, b, design)
    np.testing.assert_allclose(mom.mean_advantages, mean, atol=1e-12)
    assert mom.mean_advantages[1] == 0.0
    assert not np.allclose(mom.mean_advantages, mom.target_advantages)
    g = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(mom.bias(g), (mean - _target(r)) @ g, atol=1e-12)


def test_bad_inputs_name_the_argument() -> None:
    joint = Bernoulli([0.5, 0.5]).joint()
    with pytest.raises(ValueError, match="baselines"):
        difference_advantages([1.0, 0.0], [True, True], joint, [np.nan, 0.0])
    with pytest.raises(ValueError, match="baselines"):
        difference_coefficients([1.0, 0.0], [1.0, 0.0, 0.0], joint)
    with pytest.raises(ValueError, match="joint"):
        difference_advantages([1.0, 0.0], [True, True], np.eye(3), [1.0, 0.0])
    with pytest.raises(ValueError, match="positive on every pair"):
        difference_advantages([1.0, 0.0], [True, True], np.diag([0.5, 0.5]), [1.0, 0.0])
    with pytest.raises(ValueError, match="rewards"):
        difference_moments([1.0, 0.0, 1.0], [1.0, 0.0], Bernoulli([0.5, 0.5]))



@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_bernoulli_closed_form_trace_matches_enumeration(data: st.DataObject) -> None:
    """The batched closed form of ``tr Cov(sum_i A_i s_i)`` under Bernoulli against the
    enumerated covariance of the advantages, ``sum_ik Cov(A_i, A_k) K_ik``; some ``pi = 1``
    (finished candidates)."""
    g = data.draw(st.integers(2, 6))
    r = data.draw(hnp.arrays(np.float64, g, elements=st.sampled_from([0.0, 0.5, 1.0])))
    b = data.draw(hnp.arrays(np.float64, g, elements=st.floats(0.0, 1.0)))
    pi = data.draw(hnp.arrays(np.float64, g, elements=st.sampled_from([0.1, 0.3, 0.7, 1.0])))
    s = data.draw(hnp.arrays(np.float64, (g, 3), elements=st.floats(-2.0, 2.0)))
    K = s @ s.T
    _, cov = _enumerated(Bernoulli(pi), r, b)
    want = float(np.sum(cov * K))
    got = float(bernoulli_difference_trace(r, b, pi, K))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    # batched: two groups at once give each group's own trace
    both = bernoulli_difference_trace(np.stack([r, r[::-1]]), np.stack([b, b[::-1]]),
                                      np.stack([pi, pi[::-1]]),
                                      np.stack([K, K[::-1, ::-1]]))
    np.testing.assert_allclose(both, [got, got], rtol=1e-12, atol=1e-15)


def test_bernoulli_closed_form_refuses_bad_input() -> None:
    r, b, K = np.array([1.0, 0.0]), np.array([0.5, 0.5]), np.eye(2)
    with pytest.raises(ValueError, match=r"pi must be .* in \(0, 1\]"):
        bernoulli_difference_trace(r, b, np.array([0.0, 0.5]), K)
    with pytest.raises(ValueError, match="gram must be"):
        bernoulli_difference_trace(r, b, np.array([0.5, 0.5]), np.eye(3))
    with pytest.raises(ValueError, match="baselines must be"):
        bernoulli_difference_trace(r, np.array([0.5]), np.array([0.5, 0.5]), K)
