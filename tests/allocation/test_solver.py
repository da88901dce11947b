"""The batched PAIR allocation solver: KKT optimality checked independently, edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.allocation import (
    allocate,
    auto_size,
    covariance_term,
    edge_proxy,
    kkt_residual,
    proxy_value,
)

from .alloc_helpers import assert_kkt, grad_pi, phi_x, problems


def _ab(p, proxy="disagreement", cov=True, **kw):
    a = edge_proxy(p, proxy, **kw)
    return a, (covariance_term(a) if cov else np.zeros(np.shape(p)))


@given(problems())
def test_solution_satisfies_kkt_unbatched(prob):
    p, c, budget, pi_min = prob
    res = allocate(p, c, budget, pi_min=pi_min)
    a, b = _ab(p)
    assert res.converged and res.kkt_residual <= 1e-8
    assert res.pi.shape == p.shape and isinstance(res.objective, float)
    if res.status == "degenerate":  # a = 0: every feasible point is optimal
        assert np.all(a == 0)
        np.testing.assert_allclose(res.pi, min(1.0, budget / c.sum()), rtol=1e-14)
        return
    assert_kkt(res.pi, a, b, c, budget, pi_min)
    # The reported objective is the paper's Phi at x = -log pi.
    np.testing.assert_allclose(res.objective, phi_x(-np.log(res.pi), a, b), rtol=1e-12,
                               atol=1e-290)  # subnormal proxies lose relative precision


@given(st.lists(problems(min_g=5, max_g=5), min_size=1, max_size=6),
       st.lists(st.floats(0, 1.1), min_size=6, max_size=6), st.booleans())
def test_solution_satisfies_kkt_batched_and_matches_unbatched(probs, fracs, cov):
    p = np.stack([q[0] for q in probs])
    c = np.stack([q[1] for q in probs])
    pi_min = 0.08
    floor, full = pi_min * c.sum(1), c.sum(1)
    budget = floor + np.array(fracs[: len(probs)]) * (full - floor)
    res = allocate(p, c, budget, pi_min=pi_min, covariance_term=cov)
    assert res.pi.shape == p.shape and res.kkt_residual.shape == (len(probs),)
    assert res.converged.all()
    for k in range(len(probs)):
        a, b = _ab(p[k], cov=cov)
        one = allocate(p[k], c[k], budget[k], pi_min=pi_min, covariance_term=cov)
        np.testing.assert_allclose(res.pi[k], one.pi, rtol=1e-9, atol=1e-12)
        if res.status[k] != "degenerate":
            assert_kkt(res.pi[k], a, b, c[k], budget[k], pi_min)


@given(problems(min_g=3, max_g=8, allow_extreme_p=False), st.integers(0, 10))
def test_size_route_satisfies_kkt_with_exact_size(prob, n_draw):
    p, c, budget, pi_min = prob
    G = len(p)
    n_lo = max(2, int(np.ceil(G * pi_min - 1e-12)))
    n = n_lo + n_draw % (G - n_lo + 1)
    # the least cost of n units (cheapest at 1, the rest at the floor) must be affordable
    cs = np.sort(c)
    k = (n - G * pi_min) / (1 - pi_min)
    kk = int(np.floor(k))
    mincost = pi_min * c.sum() + (1 - pi_min) * (cs[:kk].sum() + (k - kk) * cs[min(kk, G - 1)])
    budget = max(budget, mincost * 1.01)
    res = allocate(p, c, budget, pi_min=pi_min, size=n)
    assert res.converged, (res.status, res.kkt_residual)
    assert abs(res.pi.sum() - n) <= 1e-12 * n
    a, b = _ab(p)
    if res.status not in ("degenerate", "full"):
        assert_kkt(res.pi, a, b, c, budget, pi_min, size=n)


def test_size_auto_is_the_best_affordable_size_by_enumeration():
    """size="auto" picks floor/ceil of the unsized optimum's sum; by convexity of the value in
    n that is the best affordable size. Checked against solving every affordable n."""
    rng = np.random.default_rng(7)
    p, c = rng.beta(0.7, 0.7, (12, 7)), 400 * np.exp(rng.normal(0, 0.8, (12, 7)))
    budget = rng.uniform(0.25, 0.7, 12) * c.sum(1)
    res = allocate(p, c, budget, size="auto")
    assert res.converged.all()
    np.testing.assert_array_equal(auto_size(p, c, budget), res.size)
    for k in range(12):
        objs = {}
        for n in range(2, 8):
            try:
                one = allocate(p[k], c[k], budget[k], size=n)
            except ValueError as err:  # unaffordable: the only refusal allowed here
                assert "infeasible with this budget" in str(err)
                continue
            assert one.converged
            objs[n] = float(one.objective)
        best = min(objs.values())
        assert res.objective[k] <= best * (1 + 1e-9)
        assert res.size[k] in objs
        assert abs(res.pi[k].sum() - res.size[k]) <= 1e-12 * res.size[k]
    assert np.all(res.expected_cost <= budget * (1 + 1e-12))
    np.testing.assert_allclose(res.unspent_budget, budget - res.expected_cost, rtol=0,
                               atol=1e-12 * budget.max())


def test_size_auto_reports_the_budget_an_integral_size_cannot_spend():
    """Tied costs, G = 5, half the budget: 2 units cost 0.8 of it and 3 are unaffordable;
    the unspent fifth is reported (old code: status optimal and nothing said)."""
    c = np.full(5, 100.0)
    res = allocate([0.1, 0.3, 0.5, 0.7, 0.9], c, 250.0, size="auto")
    assert res.size == 2 and res.converged
    np.testing.assert_allclose(res.unspent_budget, 50.0, rtol=1e-12)


def test_size_auto_takes_the_ceiling_when_it_is_affordable_and_better():
    """Heterogeneous costs: floor(G budget / sum c) = 2 (the old rule) but 3 units are
    affordable and give a smaller objective."""
    p = np.array([0.2, 0.8, 0.5, 0.6])
    c = np.array([50.0, 60.0, 70.0, 400.0])
    budget = 0.7 * c.sum()
    assert int(np.floor(4 * budget / c.sum())) == 2
    res = allocate(p, c, budget, size="auto")
    two = allocate(p, c, budget, size=2)
    assert res.size == 3 and res.objective < two.objective
    assert res.unspent_budget < two.unspent_budget


@given(problems(min_g=2, max_g=8), st.lists(st.floats(0, 1), min_size=4, max_size=4))
@settings(max_examples=20)
def test_more_budget_never_increases_objective(prob, fracs):
    p, c, _, pi_min = prob
    floor, full = pi_min * c.sum(), c.sum()
    budgets = floor + np.sort(np.array(fracs)) * (full - floor)
    res = allocate(np.tile(p, (4, 1)), np.tile(c, (4, 1)), budgets, pi_min=pi_min)
    assert res.converged.all()
    assert np.all(np.diff(res.objective) <= 1e-9 * res.objective[:-1])
    assert np.all(res.pi >= pi_min) and np.all(res.pi <= 1.0)
    assert np.all(res.expected_cost <= budgets * (1 + 1e-9))


def test_sixty_four_candidates_with_costs_over_three_orders_converge():
    rng = np.random.default_rng(11)
    p = rng.beta(0.7, 0.7, (16, 64))
    p[:, :4] = [0.0, 1.0, 0.0, 1.0]
    c = 10.0 ** rng.uniform(1, 4, (16, 64))
    budget = np.linspace(0.1, 0.9, 16) * c.sum(1)
    res = allocate(p, c, budget)
    assert res.converged.all() and np.all(res.kkt_residual <= 1e-8)
    for k in range(0, 16, 5):
        a, b = _ab(p[k])
        assert_kkt(res.pi[k], a, b, c[k], budget[k], 0.08)


def test_two_candidates_closed_form():
    """G = 2, b = 0: minimise 1/(pi_0 pi_1) on c . pi = B -> pi_i = B / (2 c_i) if interior."""
    c = np.array([100.0, 300.0])
    res = allocate([0.2, 0.9], c, 150.0, pi_min=0.1)
    np.testing.assert_allclose(res.pi, [0.75, 0.25], rtol=1e-9)
    assert res.status == "optimal"


def test_budget_at_floor_gives_floor():
    c = np.array([10.0, 1000.0, 50.0])
    res = allocate([0.3, 0.6, 0.5], c, 0.08 * c.sum())
    np.testing.assert_array_equal(res.pi, 0.08)
    assert res.status == "floor" and res.converged and res.kkt_residual == 0.0


@pytest.mark.parametrize("extra", [1.0, 1.5])
def test_budget_above_full_cost_gives_one(extra):
    c = np.array([10.0, 1000.0, 50.0])
    res = allocate([0.3, 0.6, 0.5], c, extra * c.sum())
    np.testing.assert_array_equal(res.pi, 1.0)
    assert res.status == "full" and res.converged


def test_saturated_predictions_are_degenerate_uniform():
    c = np.array([10.0, 1000.0, 50.0, 7.0])
    for p in ([0.0] * 4, [1.0] * 4):
        res = allocate(p, c, 0.3 * c.sum())
        np.testing.assert_allclose(res.pi, 0.3, rtol=1e-15)
        assert res.status == "degenerate" and res.objective == 0.0 and res.converged
    res = allocate([0.0] * 4, c, 0.3 * c.sum(), size=2)
    assert abs(res.pi.sum() - 2) <= 1e-12 and res.expected_cost <= 0.3 * c.sum() * (1 + 1e-12)


def test_isolated_vertex_gets_the_floor():
    """A vertex with no edge does not enter the proxy: it is left at pi_min (documented)."""
    c = np.array([100.0, 100.0, 100.0, 100.0])
    e = np.ones((4, 4)) - np.eye(4)
    e[2, :] = e[:, 2] = 0.0
    res = allocate([0.5] * 4, c, 200.0, proxy="energy", energy=e)
    assert res.pi[2] == 0.08 and res.converged
    np.testing.assert_allclose(res.pi[[0, 1, 3]], (200 - 8) / 300, rtol=1e-9)


def test_warm_start_reaches_the_same_solution():
    rng = np.random.default_rng(5)
    p, c = rng.beta(0.7, 0.7, (32, 16)), 400 * np.exp(rng.normal(0, 0.5, (32, 16)))
    budget = 0.5 * c.sum(1)
    cold = allocate(p, c, budget)
    warm = allocate(p, c, budget, warm_start=np.clip(cold.pi * 1.05, 0, 1))
    assert warm.converged.all()
    np.testing.assert_allclose(warm.pi, cold.pi, rtol=1e-6, atol=1e-8)
    # An arbitrary (even infeasible) previous step still works.
    other = allocate(p, c, budget, warm_start=np.ones_like(p))
    assert other.converged.all()


def test_fallback_only_on_failure_and_reported():
    rng = np.random.default_rng(2)
    p, c = rng.beta(0.7, 0.7, (4, 8)), 400 * np.exp(rng.normal(0, 0.5, (4, 8)))
    budget = 0.5 * c.sum(1)
    ok = allocate(p, c, budget, fallback=True)
    assert not ok.fallback_used.any() and ok.converged.all()
    failed = allocate(p, c, budget, max_iter=1)
    assert not failed.converged.any() and (failed.status == "max_iterations").all()
    assert not failed.fallback_used.any()
    fb = allocate(p, c, budget, max_iter=1, fallback=True)
    assert fb.fallback_used.all() and (fb.status == "fallback_uniform").all()
    np.testing.assert_allclose(fb.expected_cost, budget, rtol=1e-12)
    np.testing.assert_allclose(fb.pi, (budget / c.sum(1))[:, None] * np.ones(8), rtol=1e-12)
    # the residual is measured at the fallback point with its least-squares multipliers
    assert np.isfinite(fb.budget_multiplier).all()
    a, b = _ab(p)
    again = kkt_residual(fb.pi, a, b, c, budget, 0.08, fb.budget_multiplier)
    np.testing.assert_allclose(fb.kkt_residual, again, rtol=1e-12)
    assert not fb.converged.any()


def test_fallback_with_a_size_keeps_the_size_and_the_budget():
    rng = np.random.default_rng(3)
    p, c = rng.beta(0.7, 0.7, (3, 8)), 400 * np.exp(rng.normal(0, 0.5, (3, 8)))
    budget = 0.5 * c.sum(1)
    fb = allocate(p, c, budget, size=3, max_iter=1, fallback=True)
    assert fb.fallback_used.all()
    np.testing.assert_allclose(fb.pi.sum(1), 3.0, rtol=1e-12)
    assert (fb.expected_cost <= budget * (1 + 1e-12)).all()
    assert ((fb.pi >= 0.08 - 1e-15) & (fb.pi <= 1.0)).all()


@pytest.mark.parametrize(("size", "match"), [
    (9, "size must satisfy"), (2.5, "size"), ("big", "size must be None, 'auto' or an int"),
    (4, "infeasible with this budget"),
])
def test_reference_slsqp_checks_sizes_like_allocate(size, match):
    """Both solvers share the size rules (resolve_sizes): same problem, same refusal."""
    from pairht.allocation import reference_slsqp

    args = ([0.1, 0.5, 0.9, 0.5], [100.0, 400, 200, 300], 400.0)
    for solver in (allocate, reference_slsqp):
        with pytest.raises(ValueError, match=match):
            solver(*args, size=size)


@pytest.mark.parametrize(("max_iter", "error"), [(0, ValueError), (-1, ValueError),
                                                 (2.5, TypeError), (True, TypeError)])
def test_max_iter_must_be_a_positive_int(max_iter, error):
    with pytest.raises(error, match="max_iter must"):
        allocate([0.2, 0.8], [1.0, 1.0], 1.5, max_iter=max_iter)


def test_auto_size_validates_its_input():
    with pytest.raises(ValueError, match="c_hat"):
        auto_size([0.5, 0.5], [1.0, float("nan")], 3.0, 0.08)
    with pytest.raises(TypeError, match="do not pass size"):
        auto_size([0.5, 0.5], [1.0, 1.0], 3.0, size=2)
    assert int(auto_size([0.1, 0.5, 0.9, 0.3], [1.0, 2.0, 3.0, 4.0], 5.0, 0.08)) in (2, 3)


def test_reported_kkt_residual_is_measured_with_reported_multipliers():
    rng = np.random.default_rng(9)
    p, c = rng.beta(0.7, 0.7, (8, 10)), 400 * np.exp(rng.normal(0, 0.5, (8, 10)))
    budget = 0.4 * c.sum(1)
    res = allocate(p, c, budget, size=4)
    a, b = _ab(p)
    again = kkt_residual(res.pi, a, b, c, budget, 0.08, res.budget_multiplier,
                         res.size_multiplier, np.full(8, 4.0))
    # the solver evaluates stationarity as g + lam (c - min c) + (nu + lam min c): equal in
    # exact arithmetic; rounding of lam * min c (~1e-16 lam max c / max|g|) is the difference
    np.testing.assert_allclose(again, res.kkt_residual, rtol=1e-12, atol=1e-15)
    # lambda is the price of a token: d f* / d budget = -lambda (envelope theorem)
    h = 1e-4 * budget
    up = allocate(p, c, budget + h, size=4)
    dn = allocate(p, c, budget - h, size=4)
    # (a slack budget has lambda ~ mu / slack ~ 1e-8 at the interior-point exit: atol)
    np.testing.assert_allclose((up.objective - dn.objective) / (2 * h), -res.budget_multiplier,
                               rtol=1e-5, atol=1e-6 * np.max(res.budget_multiplier))


def test_objective_and_gradient_helpers_agree_with_x_space():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=6)
    a, b = _ab(p)
    pi = rng.uniform(0.1, 1, 6)
    assert np.isclose(proxy_value(pi, a, b), phi_x(-np.log(pi), a, b), rtol=1e-13)
    from pairht.allocation import proxy_gradient
    np.testing.assert_allclose(proxy_gradient(pi, a, b), grad_pi(pi, a, b), rtol=1e-12)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([0.1, 0.5], [1.0, 1.0], 0.1), {}, r"floor's cost pi_min \* sum\(c_hat\) = 0.16"),
        (([0.1, 0.5], [1.0, 0.0], 1.0), {}, "c_hat must be positive"),
        (([0.1, 0.5], [1.0, -2.0], 1.0), {}, "c_hat must be positive"),
        (([0.1, 1.5], [1.0, 1.0], 1.0), {}, "p_hat must lie in"),
        (([0.1, np.nan], [1.0, 1.0], 1.0), {}, "p_hat must be finite"),
        (([0.1, 0.5], [1.0, np.nan], 1.0), {}, "c_hat must be finite"),
        (([0.1, 0.5], [1.0, 1.0], np.nan), {}, "budget must be finite"),
        (([0.1, 0.5], [1.0, 1.0], 1.0), {"pi_min": 0.0}, r"pi_min must be a finite number in"),
        (([0.1, 0.5], [1.0, 1.0], 1.0), {"pi_min": 1.5}, r"pi_min must be a finite number in"),
        (([0.1, 0.5], [1.0, 1.0, 1.0], 1.0), {}, "c_hat must have the shape"),
        (([0.1], [1.0], 1.0), {}, "G >= 2"),
        (([[0.1, 0.5]], [[1.0, 1.0]], [1.0, 2.0]), {}, "budget must be a scalar or have"),
        (([0.1, 0.5], [1.0, 1.0], 1.0), {"warm_start": [0.5]}, "warm_start must have"),
        (([0.1, 0.5], [1.0, 1.0], 1.0), {"warm_start": [0.5, 2.0]}, "warm_start must lie"),
        (([0.1, 0.5, 0.4], [1.0, 1.0, 1.0], 1.0), {"size": 1}, "size must satisfy"),
        (([0.1, 0.5, 0.4], [1.0, 1.0, 1.0], 1.0), {"size": 4}, "size must satisfy"),
        (([0.1, 0.5, 0.4], [1.0, 1.0, 1.0], 1.0), {"size": 2.5}, "size must be None"),
        (([0.1, 0.5, 0.4], [1.0, 1.0, 1.0], 1.0), {"size": "big"}, "size must be None"),
        (([0.1, 0.5, 0.4], [1.0, 1.0, 10.0], 1.5), {"size": 2}, "size n = 2 is infeasible"),
        (([0.1, 0.5], [1.0, 1.0], 1.0), {"proxy": "bogus"}, "must be one of"),
    ],
)
def test_bad_input_raises_value_error(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        allocate(*args, **kwargs)
