"""HORA: hit utility against numerical integration, concavity, and the allocation against
brute force."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from pairht.comparators import hit_utility, hora_extra_rollouts
from pairht.comparators.hora import hit_gains

from .helpers import feasible_allocations


@pytest.mark.parametrize(("s", "t", "k"), [(0, 0, 1), (0, 0, 5), (3, 4, 2), (0, 6, 3), (7, 9, 4)])
def test_hit_utility_equals_the_posterior_integral(s, t, k):
    post = stats.beta(1 + s, 1 + t - s)
    ref, _ = integrate.quad(lambda p: (1 - (1 - p) ** k) * post.pdf(p), 0, 1, epsabs=1e-14)
    assert abs(float(hit_utility(s, t, k)) - ref) <= 1e-10


def test_uniform_prior_worked_example_is_k_over_k_plus_one():
    # no history: E[(1-p)^k] = 1/(k+1) under Beta(1,1), so H(k) = k/(k+1)
    k = np.arange(0, 7)
    np.testing.assert_allclose(hit_utility(0, 0, k), k / (k + 1.0), rtol=0, atol=1e-14)


def test_marginal_hit_utility_is_the_difference_and_nonincreasing():
    s = np.array([0.0, 1.0, 5.0, 8.0, 3.0])
    t = np.array([0.0, 8.0, 8.0, 8.0, 3.0])
    W = 10
    g = hit_gains(s, t, W)
    k = np.arange(W + 1)
    H = hit_utility(s[:, None], t[:, None], k[None, :])
    np.testing.assert_allclose(g, np.diff(H, axis=1), rtol=0, atol=1e-14)
    assert np.all(np.diff(g, axis=1) <= 1e-15)   # concave: greedy is exact


@pytest.mark.parametrize("seed", range(12))
def test_allocation_maximises_total_hit_utility_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    B = 3
    t = rng.integers(0, 9, size=B).astype(float)
    s = np.floor(rng.random(B) * (t + 1))
    U = rng.integers(0, 5, size=B)
    total = int(rng.integers(0, U.sum() + 2))
    k = hora_extra_rollouts(s, t, U, total)
    lower = np.zeros(B, dtype=int)

    def util(kk):
        return float(np.sum(hit_utility(s, t, kk)))

    best = max(util(m) for m in feasible_allocations(lower, U, total))
    assert k.sum() <= total and np.all(k <= U)
    assert abs(util(k) - best) <= 1e-12


def test_hard_prompts_with_no_success_get_rollouts_before_saturated_ones():
    # 0/8 correct: Beta(1, 9), first extra rollout hits w.p. 0.1; 8/8 correct: 0.9 but HORA
    # maximises P(at least one correct) -> the saturated prompt is worth the most per rollout
    k = hora_extra_rollouts([0, 8, 4], [8, 8, 8], [8, 8, 8], 3)
    gains = hit_gains(np.array([0.0, 8.0, 4.0]), np.array([8.0, 8.0, 8.0]), 3)
    order = np.argsort(-gains.ravel(), kind="stable")[:3]
    expect = np.bincount(order // 3, minlength=3)
    assert k.tolist() == expect.tolist()
