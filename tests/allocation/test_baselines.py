"""Uniform and pointwise (Neyman-style) allocations at exactly the same expected cost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from pairht.allocation import pointwise_allocation, uniform_allocation

from .alloc_helpers import problems


def _bisect_level(w, c, budget, lo):
    """Reference: bisection on log t for sum c clip(t w, lo, 1) = budget (w > 0 everywhere).

    The level lies in [lo / max w, 1 / min w], which can span hundreds of orders of
    magnitude (tiny p), hence bisection on log t."""
    l_lo, l_hi = np.log(lo / np.max(w)), np.log(1.0 / np.min(w))
    for _ in range(300):
        mid = 0.5 * (l_lo + l_hi)
        if c @ np.clip(np.exp(mid) * w, lo, 1.0) < budget:
            l_lo = mid
        else:
            l_hi = mid
    return np.clip(np.exp(0.5 * (l_lo + l_hi)) * w, lo, 1.0)


@given(problems(min_g=2, max_g=12))
def test_pointwise_matches_the_neyman_rule_at_equal_cost(prob):
    p, c, budget, pi_min = prob
    pi = pointwise_allocation(p, c, budget, pi_min)
    assert np.all(pi >= pi_min) and np.all(pi <= 1.0)
    np.testing.assert_allclose(c @ pi, min(budget, c.sum()), rtol=1e-12)
    w = np.sqrt(p * (1 - p) / c)
    if np.all(w > 0) and budget < c.sum():
        np.testing.assert_allclose(pi, _bisect_level(w, c, budget, pi_min), rtol=1e-9,
                                   atol=1e-12)
    # zero-variance candidates (p in {0, 1}) stay at the floor unless the rest is saturated
    if np.any(w == 0) and np.any(pi[w > 0] < 1.0 - 1e-9):
        np.testing.assert_array_equal(pi[w == 0], pi_min)


@given(problems(min_g=2, max_g=12))
def test_uniform_spends_the_budget(prob):
    _, c, budget, pi_min = prob
    pi = uniform_allocation(c, budget, pi_min)
    assert np.ptp(pi) == 0.0 and pi_min * (1 - 1e-12) <= pi[0] <= 1.0
    np.testing.assert_allclose(c @ pi, min(budget, c.sum()), rtol=1e-12)


def test_baselines_are_batched():
    rng = np.random.default_rng(0)
    p, c = rng.uniform(size=(3, 5)), rng.uniform(1, 10, (3, 5))
    budget = 0.5 * c.sum(1)
    pw = pointwise_allocation(p, c, budget)
    un = uniform_allocation(c, budget)
    for k in range(3):
        np.testing.assert_array_equal(pw[k], pointwise_allocation(p[k], c[k], budget[k]))
        np.testing.assert_array_equal(un[k], uniform_allocation(c[k], budget[k]))


def test_baselines_reject_infeasible_budget():
    with pytest.raises(ValueError, match="floor's cost"):
        uniform_allocation([1.0, 1.0], 0.1, 0.08)
    with pytest.raises(ValueError, match="c_hat must be positive"):
        pointwise_allocation([0.5, 0.5], [1.0, 0.0], 1.0)
