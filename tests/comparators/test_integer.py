"""The exact integer allocators against brute force over every feasible allocation."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.comparators._integer import dp_allocation, greedy_allocation, is_concave

from .helpers import feasible_allocations


def _value(values, lower, n):
    return sum(values[b, n[b] - lower[b]] for b in range(len(n)))


def _concave_curves(rng, B, W):
    gains = np.sort(rng.random((B, W)) * rng.choice([0.0, 1.0, 5.0], size=(B, 1)), axis=1)[:, ::-1]
    # ties on purpose: round so equal gains occur across and within prompts
    gains = np.round(gains, 1)
    values = np.concatenate([np.zeros((B, 1)), np.cumsum(gains, axis=1)], axis=1)
    return gains, values


@pytest.mark.parametrize("seed", range(25))
def test_greedy_is_optimal_for_concave_curves_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    B, W = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    gains, values = _concave_curves(rng, B, W)
    lower = rng.integers(0, 2, size=B)
    upper = lower + rng.integers(0, W + 1, size=B)
    total = int(lower.sum() + rng.integers(0, int((upper - lower).sum()) + 2))
    vals = np.full((B, W + 1), -np.inf)
    for b in range(B):
        vals[b, : upper[b] - lower[b] + 1] = values[b, : upper[b] - lower[b] + 1]
    n = greedy_allocation(gains, lower, upper, total)
    best = max(_value(vals, lower, m) for m in feasible_allocations(lower, upper, total))
    assert n.sum() <= total and np.all(n >= lower) and np.all(n <= upper)
    assert abs(_value(vals, lower, n) - best) <= 1e-12


@pytest.mark.parametrize("seed", range(25))
def test_dp_is_optimal_for_arbitrary_curves_by_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    B, W = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    lower = rng.integers(0, 3, size=B)
    upper = lower + rng.integers(0, W + 1, size=B)
    total = int(lower.sum() + rng.integers(0, int((upper - lower).sum()) + 2))
    values = np.where(np.arange(W + 1)[None, :] <= (upper - lower)[:, None],
                      rng.normal(size=(B, W + 1)), -np.inf)
    n = dp_allocation(values, lower, upper, total)
    best = max(_value(values, lower, m) for m in feasible_allocations(lower, upper, total))
    assert n.sum() <= total and np.all(n >= lower) and np.all(n <= upper)
    assert abs(_value(values, lower, n) - best) <= 1e-12


def test_greedy_is_not_optimal_without_concavity_which_is_why_dp_exists():
    # prompt 0: the second unit is worth far more than the first (convex utility)
    values = np.array([[0.0, 0.1, 10.0], [0.0, 1.0, 1.5]])
    gains = np.diff(values, axis=1)
    lower, upper = np.array([0, 0]), np.array([2, 2])
    assert not is_concave(gains, np.ones_like(gains, bool))
    greedy = greedy_allocation(gains, lower, upper, 2)
    dp = dp_allocation(values, lower, upper, 2)
    assert dp.tolist() == [2, 0]
    assert greedy.tolist() == [1, 1]


def test_infeasible_minimums_raise_naming_the_budget():
    with pytest.raises(ValueError, match=r"budget infeasible.*sum\(lower\) = 4.*budget is 3"):
        greedy_allocation(np.zeros((2, 1)), np.array([2, 2]), np.array([3, 3]), 3)
