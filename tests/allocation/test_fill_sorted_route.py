"""The water-filling's two routes to its level (every breakpoint at once, or sorted cumulative
sums for one very large problem) give the same allocation, and the large route stays O(G)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation import baselines
from pairht.allocation.baselines import fill_to_budget


def _case(rng, m, G, *, ties, zeros):
    w = rng.gamma(0.7, size=(m, G))
    if ties:
        w = np.round(w * 4) / 4  # repeated weights: tied breakpoints
    if zeros:
        w[rng.random((m, G)) < 0.3] = 0.0
    c = rng.integers(0, 50, size=(m, G)).astype(float)
    lo = rng.choice([0.0, 0.05, 0.2], size=(m, G))
    full = c.sum(1)
    floor_cost = (c * lo).sum(1)
    budget = floor_cost + rng.uniform(-0.05, 1.1, size=m) * (full - floor_cost)
    return w, c, np.maximum(budget, floor_cost), lo


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("zeros", [False, True])
def test_sorted_route_equals_the_dense_route(monkeypatch, ties, zeros):
    rng = np.random.default_rng(7 + 2 * ties + zeros)
    for G in (1, 2, 5, 16, 40):
        w, c, budget, lo = _case(rng, 64, G, ties=ties, zeros=zeros)
        dense = fill_to_budget(w, c, budget, lo)
        monkeypatch.setattr(baselines, "_DENSE_ENTRIES", -1)  # force the sorted route
        sorted_ = fill_to_budget(w, c, budget, lo)
        monkeypatch.undo()
        np.testing.assert_allclose(sorted_, dense, rtol=0, atol=1e-12)
        # both spend the budget exactly (up to the units' total cost)
        spent = np.einsum("mg,mg->m", c, sorted_)
        np.testing.assert_allclose(spent, np.minimum(budget, c.sum(1)), rtol=1e-12, atol=1e-9)


def test_one_problem_over_a_whole_batch_takes_linear_memory():
    # 160,000 units in one problem: the dense route would need 160,000^2 floats (~200 GB).
    rng = np.random.default_rng(0)
    G = 160_000
    w, c = rng.gamma(0.7, size=(1, G)), rng.integers(1, 50, size=(1, G)).astype(float)
    budget = np.array([0.3 * c.sum()])
    pi = fill_to_budget(w, c, budget, 0.08)
    assert pi.shape == (1, G) and pi.min() >= 0.08 and pi.max() <= 1.0
    assert abs(float((c * pi).sum()) - budget[0]) <= 1e-9 * budget[0]
