"""Issue 11: the allocation never returns a silent wrong answer.

Tied and nearly tied costs with a size (parallel budget and size rows), the least-cost face,
the fallback's residual, and the truthfulness contract of ``AllocationResult`` (``converged``
only when the KKT conditions hold at the returned point, checked independently; ``pi``
feasible unless the status says the solve failed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.allocation import (
    allocate,
    covariance_term,
    edge_proxy,
    kkt_residual,
    proxy_value,
    reference_slsqp,
    solve_program,
)

from .alloc_helpers import assert_kkt

ISSUE_P = [0.1, 0.5, 0.9, 0.5, 0.3, 0.7]
#: The statuses of a failed solve; every other status promises a feasible pi.
FAILED = ("max_iterations", "fallback_uniform")


def _ab(p):
    a = edge_proxy(p)
    return a, covariance_term(a)


def _least_cost_point(c, lo, n):
    """A least-cost point of n units in the box: the fractional-knapsack greedy (cheapest
    first), written here independently of the package (a linear program's 1e-9 tolerance is
    too coarse for budgets placed between nearly tied costs)."""
    pi = np.full(len(c), lo)
    left = n - lo * len(c)
    for i in np.argsort(c, kind="stable"):
        step = min(1.0 - lo, left)
        pi[i] += step
        left -= step
    return pi


def _least_cost(c, lo, n):
    return float(np.dot(c, _least_cost_point(c, lo, n)))


def _assert_feasible(pi, c, budget, lo, n=None, rtol=1e-12):
    assert np.all(pi >= lo * (1 - 1e-15)) and np.all(pi <= 1.0), pi
    assert c @ pi <= budget * (1 + rtol), (c @ pi, budget)
    if n is not None:
        assert abs(pi.sum() - n) <= 1e-12 * n, (pi.sum(), n)


# ------------------------------------------------------------------------ item 1: tied costs
def test_tied_costs_with_a_size_reach_the_optimum_not_the_uniform_point():
    """The issue's reproducer: old code returned pi = 0.5 everywhere (objective 156.229),
    status min_cost, converged; the optimum is non-uniform with objective 156.134."""
    c = np.full(6, 100.0)
    res = allocate(ISSUE_P, c, budget=300.0, size=3)
    a, b = _ab(np.array(ISSUE_P))
    assert res.status == "optimal" and res.converged
    assert_kkt(res.pi, a, b, c, 300.0, 0.08, size=3)
    ref = reference_slsqp(ISSUE_P, c, 300.0, size=3, fallback=False, ftol=1e-12, maxiter=500)
    # SLSQP meets its constraints to its own tolerance only (with scipy 1.17.1 on this CPU its
    # sum(pi) is 3 + 3.5e-7; other builds gave ~1e-8), so its KKT certificate may not hold at
    # 1e-8: it serves as a feasible-to-1e-6 comparison point. The objective falls as sum(pi)
    # grows, by the size multiplier (~6e-3) per unit, so that overspend lowers SLSQP's objective
    # by ~2e-9 (1e-11 relative), far inside the 1e-7 to which ours must reach it.
    assert abs(float(ref.pi.sum()) - 3.0) < 1e-6 and float(ref.pi @ c) <= 300.0 * (1 + 1e-6)
    assert res.objective <= ref.objective * (1 + 1e-7)
    assert res.objective < 156.2 and np.ptp(res.pi) > 0.02
    assert res.budget_multiplier == 0.0  # the budget row is implied by the size: dropped


@pytest.mark.parametrize("G", [4, 5, 7, 10])
def test_tied_costs_every_size_satisfies_kkt(G):
    rng = np.random.default_rng(G)
    p = rng.uniform(0.05, 0.95, G)
    c = np.full(G, 37.0)
    a, b = _ab(p)
    for n in range(2, G):
        for budget in (n * 37.0, n * 37.0 * 1.3):
            res = allocate(p, c, budget, size=n)
            assert res.converged, (n, res.status, res.kkt_residual)
            assert_kkt(res.pi, a, b, c, budget, 0.08, size=n)


def test_least_cost_face_with_tied_marginal_units_is_optimised():
    """Budget exactly the least cost of n units and three units tied at the marginal cost:
    the feasible set is a face, not a point; old code spread the tied units equally."""
    p = np.array([0.1, 0.5, 0.95, 0.5, 0.3])
    c = np.array([1.0, 2.0, 2.0, 2.0, 5.0])
    budget = _least_cost(c, 0.08, 3)
    res = allocate(p, c, budget, size=3)
    a, b = _ab(p)
    assert res.status == "min_cost" and res.converged
    assert_kkt(res.pi, a, b, c, budget, 0.08, size=3)
    assert res.pi[0] == 1.0 and res.pi[4] == 0.08
    np.testing.assert_allclose(res.pi[1:4].sum(), 3 - 1 - 0.08, rtol=1e-13)
    # the tied group is not uniform (p differ); the equal spread costs objective
    spread = res.pi.copy()
    spread[1:4] = spread[1:4].mean()
    assert res.objective < proxy_value(spread, a, b) * (1 - 1e-4)
    # multipliers are reported (not NaN) and reproduce the residual
    again = kkt_residual(res.pi, a, b, c, budget, 0.08, res.budget_multiplier,
                         res.size_multiplier, 3)
    assert again <= 1e-8


def test_single_point_least_cost_face_has_zero_residual_with_its_multipliers():
    p = np.array([0.2, 0.7, 0.4, 0.9])
    c = np.array([10.0, 20.0, 30.0, 40.0])
    budget = _least_cost(c, 0.1, 2)
    res = allocate(p, c, budget, pi_min=0.1, size=2)
    a, b = _ab(p)
    assert res.status == "min_cost" and res.iterations == 0 and res.converged
    assert np.isfinite(res.budget_multiplier) and np.isfinite(res.size_multiplier)
    again = kkt_residual(res.pi, a, b, c, budget, 0.1, res.budget_multiplier,
                         res.size_multiplier, 2)
    assert again <= 1e-12
    assert_kkt(res.pi, a, b, c, budget, 0.1, size=2)


# ------------------------------------------------------------------- item 2: near-tied costs
def test_nearly_tied_costs_with_a_size_converge_and_stay_feasible():
    """The issue's sweep: 1e-6 relative jitter, budget within 1e-9 of n mean(c). Old code:
    all but one ended at max_iterations, about a fifth with sum(pi) != n or over budget."""
    rng = np.random.default_rng(0)
    count = 0
    for G in range(4, 13):
        for n in range(2, G):
            p = rng.uniform(0.05, 0.95, G)
            c = 100 * (1 + 1e-6 * rng.uniform(-1, 1, G))
            budget = n * c.mean() * (1 + 1e-9 * rng.uniform(-1, 1))
            if _least_cost(c, 0.08, n) > budget:
                continue
            res = allocate(p, c, budget, size=n)
            assert res.converged, (G, n, res.status, res.kkt_residual)
            _assert_feasible(res.pi, c, budget, 0.08, n)
            a, b = _ab(p)
            assert_kkt(res.pi, a, b, c, budget, 0.08, size=n)
            count += 1
    assert count >= 40


def test_fallback_reports_the_residual_of_the_fallback_point():
    """Old code reported kkt_residual = 0 next to converged = False for the fallback."""
    rng = np.random.default_rng(2)
    p, c = rng.beta(0.7, 0.7, (4, 8)), 400 * np.exp(rng.normal(0, 0.5, (4, 8)))
    budget = 0.5 * c.sum(1)
    for size in (None, 3):
        fb = allocate(p, c, budget, size=size, max_iter=1, fallback=True)
        assert (fb.status == "fallback_uniform").all() and fb.fallback_used.all()
        a, b = _ab(p)
        again = kkt_residual(fb.pi, a, b, c, budget, 0.08, fb.budget_multiplier,
                             fb.size_multiplier, None if size is None else np.full(4, 3.0))
        np.testing.assert_allclose(fb.kkt_residual, again, rtol=1e-12)
        # uniform is not optimal for these p: the residual says so, and converged agrees
        assert (fb.kkt_residual > 1e-3).all() and not fb.converged.any()
        for k in range(4):
            _assert_feasible(fb.pi[k], c[k], budget[k], 0.08, size)


def test_failed_solve_reports_its_iterate_honestly():
    rng = np.random.default_rng(3)
    p, c = rng.beta(0.7, 0.7, (4, 8)), 400 * np.exp(rng.normal(0, 0.5, (4, 8)))
    budget = 0.5 * c.sum(1)
    res = allocate(p, c, budget, size=3, max_iter=1)
    assert (res.status == "max_iterations").all() and not res.converged.any()
    a, b = _ab(p)
    again = kkt_residual(res.pi, a, b, c, budget, 0.08, res.budget_multiplier,
                         res.size_multiplier, np.full(4, 3.0))
    np.testing.assert_allclose(res.kkt_residual, again, rtol=1e-9, atol=1e-15)
    assert (res.kkt_residual > 1e-8).all()


# ------------------------------------------------------------------- the contract, as a property
@st.composite
def sized_problems(draw):
    """Costs tied, nearly tied (relative jitter 1e-10..1e-4) or spread over 2 orders; a size;
    a budget at the least cost, the largest cost, or anywhere between (the edges included)."""
    G = draw(st.integers(3, 9))
    p = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=G, max_size=G)))
    kind = draw(st.sampled_from(["tied", "near", "random"]))
    base = draw(st.floats(1.0, 1e3))
    # Costs are exactly equal or differ by far more than 1e-12 relative: the solver counts
    # costs within 1e-12 of the marginal cost as tied (documented), so a KKT check with the
    # unsnapped costs would test that convention, not the solver.
    if kind == "tied":
        c = np.full(G, base)
    elif kind == "near":
        jit = 10.0 ** draw(st.floats(-10, -4))
        u = np.array(draw(st.lists(st.integers(-4, 4), min_size=G, max_size=G))) / 4
        c = base * (1 + jit * u)
    else:
        x = np.array(draw(st.lists(st.integers(0, 200), min_size=G, max_size=G))) / 100
        c = base * 10.0 ** x
    pi_min = draw(st.sampled_from([0.05, 0.08, 0.2]))
    lower = max(2, int(np.ceil(G * pi_min - 1e-12)))
    n = draw(st.integers(lower, G))
    lo_cost = _least_cost(c, pi_min, n)
    hi_cost = -_least_cost(-c, pi_min, n)
    where = draw(st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0.0, 1.5)))
    budget = lo_cost + where * (hi_cost - lo_cost)
    budget = max(budget, lo_cost)  # rounding must not make the size unaffordable
    max_iter = draw(st.sampled_from([100, 100, 3]))
    fallback = draw(st.booleans())
    return p, c, budget, pi_min, n, max_iter, fallback


@given(sized_problems())
@settings(max_examples=150, deadline=None)
def test_converged_means_kkt_holds_and_pi_is_feasible_unless_failed(prob):
    p, c, budget, pi_min, n, max_iter, fallback = prob
    res = allocate(p, c, budget, pi_min=pi_min, size=n, max_iter=max_iter, fallback=fallback)
    a, b = _ab(p)
    assert res.converged == (res.kkt_residual <= 1e-8)
    if res.status not in FAILED:
        _assert_feasible(res.pi, c, budget, pi_min, n)
        np.testing.assert_allclose(res.unspent_budget, budget - c @ res.pi, rtol=0,
                                   atol=1e-12 * budget)
        assert res.unspent_budget >= -1e-12 * budget
    if res.fallback_used:
        _assert_feasible(res.pi, c, budget, pi_min, n)
    if res.converged:
        if not np.all(a == 0):
            assert_kkt(res.pi, a, b, c, budget, pi_min, size=n)
    elif max_iter == 100:
        # a full solve must converge on every feasible problem
        raise AssertionError(f"not converged: {res.status}, residual {res.kkt_residual}")


@pytest.mark.parametrize(
    ("p", "c", "budget", "n"),
    [
        ([0.5, 0.5, 0.5, 0.5], [4.0, 1.0, 2.0, 2.0], 5.0200000000050204, 3),
        ([0.5, 0.5, 0.5], [3.0, 1.0, 2.0], 3.0100000000030107, 2),
        ([0.5, 0.5, 0.5], [1.0, 2.0, 2.0], 3.0000000000030003, 2),
    ],
)
def test_a_budget_a_hair_above_the_least_cost_is_solved_on_the_face(p, c, budget, n):
    """Found by the fuzz suite: a budget ~1e-12 above the least cost of n units left a sliver
    the interior-point method could not resolve (max_iterations, off the size row, or over
    budget). Within FACE_RTOL it is solved on the least-cost face: feasible and certified."""
    res = allocate(p, c, budget, pi_min=0.01, size=n)
    assert res.status == "min_cost" and res.converged
    assert abs(float(res.pi.sum()) - n) <= 1e-12 * n
    assert float(res.pi @ np.asarray(c)) <= budget * (1 + 1e-12)
    assert res.pi.min() >= 0.01 - 1e-15 and res.pi.max() <= 1.0


# Budgets just outside FACE_RTOL above the least cost of n units: the interior-point method
# runs in a sliver, its start ~1e-8 from several bounds and the budget. Found by hypothesis
# (the first: the start's duals at mu0 / slack, ~1e10 times the gradient, stalled the line
# search at the start point, residual 0.95) and by a stress run (the others: the budget and
# size multipliers grow to ~1e6, and the size row's rounding residual, ~1e-12, times them
# made every direction ascend the barrier merit; residual 0.23 and 0.31).
SLIVERS = [
    (np.array([0.0, 0.0, 0.0, 0.0, 1.0]),
     np.array([1.0, 1.02329299, 1.02329299, 1.04712855, 1.20226443]), 2.0334333442982913,
     0.05, 2),
    (np.array([0.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
     np.array([32.86, 5.24, 19.19, 5.78, 5.79, 10.18]), 11.469000022938001, 0.01, 2),
    (np.array([0.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
     np.array([32.85577562404471, 5.242927508694661, 19.187888185279625, 5.7804690283439655,
               5.794098384179934, 10.176674887076164]), 11.472322163919156, 0.01, 2),
]


@pytest.mark.parametrize("case", range(len(SLIVERS)))
@pytest.mark.parametrize("path", ["woodbury", "dense"])
def test_a_budget_a_sliver_above_the_least_cost_converges_to_a_kkt_point(path, case):
    """Through ``allocate`` the disagreement proxy takes the Woodbury path; the same program
    with its terms doubled (same argmin, no longer the disagreement of ``p``) the dense one.
    Optimality is certified independently (``assert_kkt``) and the point is no worse than the
    least-cost point, which is feasible."""
    p, c, budget, lo, n = SLIVERS[case]
    a, b = _ab(p)
    if path == "woodbury":
        res = allocate(p, c, budget, pi_min=lo, size=n, max_iter=100, fallback=False)
    else:
        res = solve_program(p, c, budget, 2.0 * a, 2.0 * b, lo, size=n, max_iter=100,
                            fallback=False)
    assert res.status == "optimal" and res.converged, (res.status, res.kkt_residual)
    _assert_feasible(res.pi, c, budget, lo, n)
    assert_kkt(res.pi, a, b, c, budget, lo, size=n)
    least = _least_cost_point(c, lo, n)
    assert c @ least <= budget
    assert proxy_value(res.pi, a, b) <= proxy_value(least, a, b)


def _sliver_grid():
    """Budgets 2e-9..1e-8 (relative) above the least cost of n units, outside FACE_RTOL: the
    class of SLIVER, over p in {0, 1} (and 1/2), tied, two-level and nearly tied costs."""
    rng = np.random.default_rng(7)
    for G in (4, 6):
        for p in (np.arange(G) % 2 * 1.0, (np.arange(G) == G - 1) * 1.0,
                  np.where(np.arange(G) % 3 == 0, 0.5, 1.0)):
            for c in (np.ones(G), np.where(np.arange(G) % 2 == 0, 1.0, 1.5),
                      1.0 + rng.integers(-4, 5, G) * 1e-6):
                for lo in (0.05, 0.3):
                    for n in (2, G - 1):
                        for rel in (2e-9, 5e-9, 1e-8):
                            yield p, c, _least_cost(c, lo, n) * (1 + rel), lo, n


def test_budgets_a_sliver_above_the_least_cost_all_converge_to_kkt_points():
    failed = []
    for p, c, budget, lo, n in _sliver_grid():
        res = allocate(p, c, budget, pi_min=lo, size=n, max_iter=100, fallback=False)
        if not res.converged:
            failed.append((p, c, budget, lo, n, res.status))
            continue
        _assert_feasible(res.pi, c, budget, lo, n)
        if np.ptp(p) > 0:  # a = 0 (all p equal in {0, 1}): every feasible point is optimal
            assert_kkt(res.pi, *_ab(p), c, budget, lo, size=n)
    assert not failed, failed[:3]


def test_a_budget_slack_by_a_millionth_next_to_a_small_multiplier_is_a_kkt_point():
    """Found by hypothesis: the solver's certificate (KKT residual 7e-10, converged) and
    ``assert_kkt`` disagreed on whether the budget binds. By the KKT conditions it does not:
    the program's optimum without the budget (solved below) costs 2.1e-6 less than the budget,
    so the budget's true multiplier is 0. The returned point lies 3e-7 from that optimum and
    carries ``lam = 2e-3`` with a relative slack of 1.1e-6: complementarity
    ``lam max(c) s / max|g|`` is 1e-10, a KKT point to the tolerance. ``assert_kkt`` wrongly
    demanded ``lam = 0`` at any slack above 1e-7 (exact complementarity); it must still
    reject a point off the optimum."""
    p = np.array([0.0, 0.5, 0.515625, 0.515625])
    c = np.array([1.0, 1.0, 1.02329299, 1.02329299])
    budget, lo = 2.023292992280754, 0.05
    a, b = _ab(p)
    res = allocate(p, c, budget, pi_min=lo, size=2)
    assert res.converged
    assert_kkt(res.pi, a, b, c, budget, lo, size=2)
    free = allocate(p, c, 10.0, pi_min=lo, size=2)  # budget implied by the size: dropped
    assert free.converged and c @ free.pi < budget  # the optimum is affordable: lam* = 0
    np.testing.assert_allclose(res.pi, free.pi, rtol=0, atol=1e-6)
    off = res.pi + 1e-4 * np.array([1.0, -1.0, 0.0, 0.0])  # same cost and size
    with pytest.raises(AssertionError, match="no KKT multipliers"):
        assert_kkt(off, a, b, c, budget, lo, size=2)
