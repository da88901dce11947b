"""DUET: proportional counts, and the marker-gated abort design is exact and unbiased by
enumeration over both phases."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.comparators import abort_design, informativeness, proportional_counts
from pairht.comparators._inputs import srswor_joint, srswor_pi
from pairht.estimators import pair_gradient, pair_ht_gradient

from .helpers import bernoulli_support, moments, srswor_support


def test_counts_are_proportional_when_no_bound_binds():
    # shares 12 * (3, 2, 1) / 6 = (6, 4, 2), all inside [2, 8]
    assert proportional_counts([0.3, 0.2, 0.1], [8, 8, 8], 12).tolist() == [6, 4, 2]


def test_counts_respect_bounds_and_spend_the_budget_exactly():
    rng = np.random.default_rng(0)
    for _ in range(200):
        B = int(rng.integers(1, 6))
        U = rng.integers(0, 9, size=B)
        u = rng.random(B) * rng.integers(0, 2, size=B)
        lo = np.minimum(U, 2)
        total = int(lo.sum() + rng.integers(0, 20))
        k = proportional_counts(u, U, total)
        assert np.all(k >= lo) and np.all(k <= U)
        assert k.sum() == min(total, U.sum())


def test_clipped_shares_are_proportional_among_unclipped_prompts():
    u = np.array([0.25, 0.09, 0.04, 0.0])
    # prompt 0 would get 12*.25/.38 > U=5: clipped; prompt 3 (u=0) at its floor of 2;
    # the rest split 12 - 5 - 2 = 5 in ratio .09 : .04 -> 3.46, 1.54 -> floor 1.54 to 2
    k = proportional_counts(u, [5, 8, 8, 8], 12)
    assert k.tolist() == [5, 3, 2, 2]


def test_surrogate_uses_history_posterior_mean_else_p_hat():
    p_hat = np.array([[0.2, 0.4], [0.9, 0.9]])
    np.testing.assert_allclose(informativeness([1, 3], [2, 8], p_hat),
                               [0.5 * 0.5, 0.4 * 0.6], rtol=0, atol=1e-15)
    np.testing.assert_allclose(informativeness(None, None, p_hat), [0.3 * 0.7, 0.9 * 0.1],
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("keep_prob", [0.05, 0.5, 1.0])  # 1.0: plain SRSWOR (VIP, HORA)
def test_abort_design_is_exact_and_pair_ht_is_unbiased_by_enumeration(k, keep_prob):
    fin = np.array([[False, True, False, False, False]])
    marker = np.array([[True, False, False, True, False]])
    kk = np.array([k])
    pi, joint, kappa = abort_design(srswor_pi(kk, fin), srswor_joint(kk, fin), marker, fin,
                                    keep_prob)
    rng = np.random.default_rng(k)
    r = rng.integers(0, 2, size=5).astype(float)
    r[0] = 1.0 - r[2]
    S = rng.normal(size=(5, 2))
    y = rng.normal(size=5)
    support = []
    for m1, p1 in srswor_support(fin[0], k):
        for m2, p2 in bernoulli_support(np.where(m1, kappa[0], 0.0)):
            support.append((m2, p1 * p2))
    emp_pi, emp_joint = moments(support, 5)
    np.testing.assert_allclose(emp_pi, pi[0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(emp_joint, joint[0], rtol=0, atol=1e-14)
    point = sum(p * np.sum(np.where(m, y / pi[0], 0.0)) for m, p in support)
    assert abs(point - y.sum()) <= 1e-12           # DUET's 1/keep_prob reweighting
    if k >= 2:                                      # every rho > 0: pair-HT exactly unbiased
        est = sum(p * pair_ht_gradient(r, S, m, joint[0]) for m, p in support)
        np.testing.assert_allclose(est, pair_gradient(r, S), rtol=0, atol=1e-12)


def test_keep_prob_zero_is_refused():
    fin = np.zeros((1, 2), bool)
    with pytest.raises(ValueError, match="keep_prob must lie in \\(0, 1\\]"):
        abort_design(np.ones((1, 2)), np.ones((1, 2, 2)), fin, fin, 0.0)
