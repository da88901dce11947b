"""VIP: the GP predictor against closed forms, the group sizes against brute force and the
paper's variance formulas."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from pairht.comparators import gp_success_probability, variance_shape, vip_group_sizes
from pairht.comparators.gp import smoothed_logit

from .helpers import feasible_allocations


def test_variance_shapes_match_the_paper_formulas():
    n = np.array([2.0, 3.0, 8.0])
    assert np.array_equal(variance_shape(n, "inverse"), 1.0 / n)
    assert np.array_equal(variance_shape(n, "rloo"), 1.0 / (n - 1.0))   # 4 s^2 p(1-p)/(n-1)
    assert np.array_equal(variance_shape(n, "dr_grpo"), (n - 1.0) / n**2)  # (n-1)/n^2


def test_square_root_rule_worked_example_inverse_model():
    # min w1/n1 + w2/n2, n1 + n2 = 16  ->  n_b = 16 sqrt(w_b) / sum sqrt(w): sqrt(.25)=.5,
    # sqrt(.09)=.3 -> 10 and 6 (integers, so the continuous optimum is the integer optimum)
    k = vip_group_sizes([0.5, 0.1], [0, 0], [16, 16], 16, model="inverse")
    assert k.tolist() == [10, 6]


def test_the_default_variance_shape_is_rloos():
    """RLOO's 1/(n-1), the shape of the trainer's pair-HT gradient on a uniform group (module
    doc). w = p(1-p) = 0.25 and 0.01, 12 rollouts: 1/(n-1) gives (9, 3) (0.25/8 + 0.01/2 =
    0.03625 against 0.25/9 + 0.01/1 = 0.0378 for (10, 2)); 1/n gives (10, 2)."""
    p = [0.5, (1.0 - np.sqrt(0.96)) / 2.0]  # p (1 - p) = 0.01
    assert vip_group_sizes(p, [0, 0], [12, 12], 12).tolist() == [9, 3]
    assert vip_group_sizes(p, [0, 0], [12, 12], 12, model="rloo").tolist() == [9, 3]
    assert vip_group_sizes(p, [0, 0], [12, 12], 12, model="inverse").tolist() == [10, 2]
    np.testing.assert_array_equal(variance_shape([2.0, 5.0]), [1.0, 0.25])


@pytest.mark.parametrize("model", ["inverse", "rloo", "dr_grpo"])
@pytest.mark.parametrize("seed", range(8))
def test_group_sizes_minimise_variance_by_brute_force(model, seed):
    rng = np.random.default_rng(seed)
    B, G = 3, 5
    p = rng.choice([0.0, 0.1, 0.3, 0.5, 0.5, 0.8, 1.0], size=B)
    F = rng.integers(0, 3, size=B)
    U = G - F
    lower = np.minimum(U, np.maximum(0, 2 - F))
    total = int(lower.sum() + rng.integers(0, int((U - lower).sum()) + 1))
    k = vip_group_sizes(p, F, U, total, model=model)

    def cost(kk):
        n = F + kk
        f = {"inverse": 1.0 / n, "rloo": 1.0 / (n - 1.0), "dr_grpo": (n - 1.0) / n**2}[model]
        return float(np.sum(p * (1 - p) * f))

    best = min(cost(m) for m in feasible_allocations(lower, U, total))
    assert k.sum() <= total and np.all(k >= lower) and np.all(k <= U)
    assert abs(cost(k) - best) <= 1e-12


def test_dr_grpo_curve_is_not_convex_so_dp_is_used_and_still_exact():
    # (n-1)/n^2 at n = 2, 3, 4: 1/4, 2/9, 3/16; steps -1/36 then -5/144 (steeper): not convex
    f = variance_shape([2, 3, 4], "dr_grpo")
    assert (f[1] - f[0]) > (f[2] - f[1])
    k = vip_group_sizes([0.5, 0.5], [0, 0], [4, 4], 6, model="dr_grpo")
    # brute force: (2,4) -> 1/4 + 3/16 = 0.4375 beats (3,3) -> 4/9 = 0.444
    assert sorted(k.tolist()) == [2, 4]


def test_min_group_below_two_is_refused_for_rloo():
    with pytest.raises(ValueError, match="min_group must be an int >= 2 for model 'rloo'"):
        vip_group_sizes([0.5], [0], [4], 4, model="rloo", min_group=1)


def test_gp_without_features_is_the_closed_form_shrinkage():
    s, t = np.array([3.0, 0.0, 0.0]), np.array([4.0, 2.0, 0.0])
    v = 0.7
    p, var = gp_success_probability(s, t, signal_var=v)
    m = np.log((s.sum() + 1) / (t.sum() - s.sum() + 1))
    y = np.log((s + 1) / (t - s + 1))
    noise = (t + 2) / ((s + 1) * (t - s + 1))
    mu = np.where(t > 0, m + v / (v + noise) * (y - m), m)
    np.testing.assert_allclose(p, expit(mu), rtol=0, atol=1e-14)
    np.testing.assert_allclose(var, np.where(t > 0, v - v * v / (v + noise), v), atol=1e-14)


def test_gp_noise_is_the_delta_method_variance_of_the_logit():
    s, t = np.array([0.0, 3.0, 10.0]), np.array([0.0, 10.0, 10.0])
    pt, n = (s + 1) / (t + 2), t + 2
    y, noise = smoothed_logit(s, t)
    np.testing.assert_allclose(y, np.log(pt / (1 - pt)), rtol=0, atol=1e-14)
    # Var(logit p_hat) ~ (d logit/dp)^2 Var(p_hat) = (1/(p(1-p)))^2 p(1-p)/n = 1/(n p (1-p))
    np.testing.assert_allclose(noise, 1.0 / (n * pt * (1 - pt)), rtol=1e-14, atol=0)


def test_gp_with_features_matches_an_explicit_two_point_solve():
    X = np.array([[0.0], [1.0], [3.0]])
    s, t = np.array([1.0, 4.0, 0.0]), np.array([4.0, 4.0, 0.0])
    v, ell, m = 1.3, 0.9, -0.2
    p, _ = gp_success_probability(s, t, X, signal_var=v, lengthscale=ell, prior_mean=m)
    k = lambda a, b: v * np.exp(-((a - b) ** 2) / (2 * ell**2))  # noqa: E731
    y = np.log((s[:2] + 1) / (t[:2] - s[:2] + 1))
    nz = (t[:2] + 2) / ((s[:2] + 1) * (t[:2] - s[:2] + 1))
    a11, a12, a22 = v + nz[0], k(0.0, 1.0), v + nz[1]
    det = a11 * a22 - a12 * a12
    alpha = np.array([a22 * (y[0] - m) - a12 * (y[1] - m), a11 * (y[1] - m) - a12 * (y[0] - m)])
    alpha /= det
    mu = [m + k(x, 0.0) * alpha[0] + k(x, 1.0) * alpha[1] for x in (0.0, 1.0, 3.0)]
    np.testing.assert_allclose(p, expit(np.array(mu)), rtol=0, atol=1e-13)
