"""Our optimum against other solvers, and the paper's variance argument."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import Bounds, LinearConstraint, minimize

from pairht.allocation import (
    allocate,
    covariance_term,
    edge_proxy,
    pointwise_allocation,
    proxy_value,
    reference_slsqp,
    uniform_allocation,
)

from .alloc_helpers import feasible_projection, problems

#: Our objective may exceed another solver's feasible objective by at most this (relative).
REL = 1e-7


def _trust_constr(a, b, c, budget, pi_min, size=None):
    """scipy 'trust-constr' on the pi-program with exact derivatives and tight tolerances."""
    G = len(c)

    def fun(pi):
        # written out: trust-constr also evaluates trial points outside the box, which the
        # public proxy_value refuses (pi must be positive there)
        u = 1 / pi
        return 0.5 * u @ a @ u + b @ u

    def jac(pi):
        u = 1 / pi
        return -(a @ u + b) * u * u

    def hess(pi):
        u = 1 / pi
        h = a * np.outer(u * u, u * u)
        h[np.diag_indices(G)] = 2 * (a @ u + b) * u**3
        return h

    cons = [LinearConstraint(c[None, :] / budget, -np.inf, 1.0)]
    if size is not None:
        cons.append(LinearConstraint(np.ones((1, G)), size, size))
    x0 = np.full(G, max(pi_min, min(1.0, budget / c.sum())) if size is None else size / G)
    res = minimize(fun, x0, jac=jac, hess=hess, method="trust-constr", constraints=cons,
                   bounds=Bounds(np.full(G, pi_min), np.ones(G)),
                   options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 3000})
    return res


@given(problems(min_g=2, max_g=7, allow_extreme_p=False))
@settings(max_examples=15)
def test_objective_not_worse_than_slsqp_and_trust_constr(prob):
    p, c, budget, pi_min = prob
    a = edge_proxy(p)
    b = covariance_term(a)
    ours = allocate(p, c, budget, pi_min=pi_min)
    assert ours.converged
    if budget <= pi_min * c.sum() * (1 + 1e-9):
        # The budget buys only the floor: pi = pi_min is the single feasible point, hence the
        # optimum. SLSQP reports "inequality constraints incompatible" and trust-constr runs
        # to maxiter there, so the comparison is with that point directly.
        # (within 1e-9 of the floor's cost: pi may rise above pi_min only by what is left)
        assert np.all(ours.pi >= pi_min)
        assert c @ (ours.pi - pi_min) <= budget - pi_min * c.sum() + 1e-12 * budget
        return
    ref = reference_slsqp(p, c, budget, pi_min=pi_min, fallback=False, ftol=1e-12,
                          maxiter=500)
    tc = _trust_constr(a, b, c, budget, pi_min)
    compared = 0
    for pi_other, ok in ((ref.pi, bool(ref.converged)), (tc.x, tc.status in (1, 2))):
        if not ok:
            continue
        other = proxy_value(feasible_projection(pi_other, c, budget, pi_min), a, b)
        assert ours.objective <= other * (1 + REL) + 1e-300
        compared += 1
    # At least one reference must have produced a comparison (nothing passes by skipping).
    assert compared >= 1


@given(problems(min_g=3, max_g=6, allow_extreme_p=False), st.integers(0, 5))
@settings(max_examples=10)
def test_size_route_objective_not_worse_than_trust_constr(prob, k):
    p, c, budget, pi_min = prob
    G = len(p)
    n = max(2, int(np.ceil(G * pi_min))) + k % 2
    n = min(n, G - 1)
    budget = max(budget, float(np.sort(c)[:n].sum() + pi_min * np.sort(c)[n:].sum()) * 1.05)
    budget = max(budget, 1.01 * (n / G) * c.sum() * 0.5)
    try:
        ours = allocate(p, c, budget, pi_min=pi_min, size=n)
    except ValueError:  # n below the floor's count for this pi_min: nothing to compare
        assert n < G * pi_min
        return
    a = edge_proxy(p)
    b = covariance_term(a)
    tc = _trust_constr(a, b, c, budget, pi_min, size=n)
    assert ours.converged
    assert tc.status in (1, 2), tc.message
    # trust-constr is feasible only to ~1e-9: compare with that slack
    other = proxy_value(np.clip(tc.x, pi_min, 1.0), a, b)
    assert ours.objective <= other * (1 + REL)


@given(problems(min_g=2, max_g=7, allow_extreme_p=False))
@settings(max_examples=10)
def test_objective_not_worse_than_cvxpy(prob):
    cp = pytest.importorskip("cvxpy")
    p, c, budget, pi_min = prob
    a = edge_proxy(p)
    b = covariance_term(a)
    G = len(p)
    ours = allocate(p, c, budget, pi_min=pi_min)
    x = cp.Variable(G)
    iu = np.triu_indices(G, 1)
    obj = cp.sum(cp.multiply(a[iu], cp.exp(x[iu[0]] + x[iu[1]]))) + b @ cp.exp(x)
    cons = [c @ cp.exp(-x) <= budget, x >= 0, x <= -np.log(pi_min)]
    prob_ = cp.Problem(cp.Minimize(obj), cons)
    try:
        prob_.solve(solver=cp.CLARABEL)
    except cp.SolverError:
        return  # the same claim is tested against SLSQP / trust-constr above
    if prob_.status != cp.OPTIMAL:
        return
    other = proxy_value(feasible_projection(np.exp(-x.value), c, budget, pi_min), a, b)
    assert ours.objective <= other * (1 + REL)


@given(problems(min_g=2, max_g=10))
def test_pair_proxy_not_above_uniform_and_pointwise_at_equal_cost(prob):
    """Figure 'mechanism' (c): at equal expected cost the PAIR design has the smallest proxy."""
    p, c, budget, pi_min = prob
    budget = min(budget, c.sum())
    a = edge_proxy(p)
    b = covariance_term(a)
    ours = allocate(p, c, budget, pi_min=pi_min)
    for base in (uniform_allocation(c, budget, pi_min), pointwise_allocation(p, c, budget, pi_min)):
        np.testing.assert_allclose(c @ base, budget, rtol=1e-12)
        assert ours.objective <= proxy_value(base, a, b) * (1 + 1e-9) + 1e-300


def _bernoulli_trace_times_m2(h, pi):
    """M^2 tr Cov of the pair-HT gradient under Bernoulli vertices, Proposition 'Bias and
    covariance' written term by term."""
    G = len(pi)
    tot = 0.0
    for i in range(G):
        for j in range(i + 1, G):
            tot += (1 / (pi[i] * pi[j]) - 1) * h[i, j] @ h[i, j]
    for i in range(G):
        for j in range(G):
            for k in range(G):
                if len({i, j, k}) == 3:  # ordered (j, k): the symmetric completion of 2 sum_{j<k}
                    tot += (1 / pi[i] - 1) * h[i, j] @ h[i, k]
    return tot


@given(st.integers(3, 6), st.integers(0, 2**32 - 1), st.floats(1.0, 3.0))
@settings(max_examples=20)
def test_proxy_bounds_bernoulli_design_variance_on_frozen_population(G, seed, inflate):
    """Appendix 'Variance upper bound': with a_ij >= ||h_ij||^2,
    M^2 tr Cov + sum_{i<j} ||h_ij||^2 + sum_i b_i <= sum a/(pi pi) + sum b/pi for every pi."""
    rng = np.random.default_rng(seed)
    r = rng.integers(0, 2, G).astype(float)
    s = rng.normal(size=(G, 3))
    h = 0.5 * (r[:, None, None] - r[None, :, None]) * (s[:, None, :] - s[None, :, :])
    energy = np.sum(h * h, axis=-1) * inflate
    c = 100 * np.exp(rng.normal(size=G))
    p = rng.uniform(size=G)
    budget = 0.5 * c.sum()
    b = covariance_term(energy)
    iu = np.triu_indices(G, 1)
    const = np.sum(h[iu] * h[iu]) + b.sum()
    res = allocate(p, c, budget, proxy="energy", energy=energy)
    assert res.converged
    pis = [res.pi, uniform_allocation(c, budget), pointwise_allocation(p, c, budget),
           rng.uniform(0.08, 1, G)]
    try:
        from pairht.designs import Bernoulli
        from pairht.estimators import design_covariance
    except ImportError:  # pragma: no cover - estimators land separately
        design_covariance = None
    M = G * (G - 1) / 2
    for pi in pis:
        true = _bernoulli_trace_times_m2(h, pi)
        if design_covariance is not None:
            cov = design_covariance(r, s, Bernoulli(pi))
            np.testing.assert_allclose(M * M * cov.trace, true, rtol=1e-10, atol=1e-12)
        assert true + const <= proxy_value(pi, energy, b) * (1 + 1e-12) + 1e-12
    # and PAIR's own bound is the smallest among the equal-cost designs
    vals = [proxy_value(pi, energy, b) for pi in pis[:3]]
    assert vals[0] <= min(vals[1:]) * (1 + 1e-9) + 1e-300
