"""pair_joint: the two-level allocation is exactly unbiased by enumeration, its prompt-level
split is the grid optimum, and it is never worse than fixed per-prompt budgets."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation import allocate
from pairht.comparators import pair_joint_allocate
from pairht.estimators import pair_gradient, pair_ht_gradient

from .helpers import bernoulli_support, feasible_allocations, moments


def _batch(G, finished_one=False):
    p = np.array([[0.2, 0.5, 0.7, 0.9][:G], [0.1, 0.9, 0.4, 0.35][:G]])
    c = np.array([[10.0, 20.0, 30.0, 40.0][:G], [50.0, 10.0, 20.0, 5.0][:G]])
    fin = np.zeros((2, G), dtype=bool)
    if finished_one:
        fin[0, 1] = True
    return p, c, fin


@pytest.mark.parametrize(("G", "finished_one"), [(3, False), (4, False), (4, True)])
def test_pair_ht_is_exactly_unbiased_under_the_joint_allocation(G, finished_one):
    p, c, fin = _batch(G, finished_one)
    T = 0.5 * np.where(fin, 0.0, c).sum()
    res = pair_joint_allocate(p, c, fin, T, grid=8)
    assert np.all(res.pi[fin] == 1.0) and np.all(res.pi >= 0.08 - 1e-12)
    rng = np.random.default_rng(G)
    r = rng.integers(0, 2, size=(2, G)).astype(float)
    S = rng.normal(size=(2, G, 3))
    target = pair_gradient(r, S).sum(axis=0)
    supports = [bernoulli_support(res.pi[b]) for b in range(2)]
    est = np.zeros(3)
    for m0, p0 in supports[0]:
        for m1, p1 in supports[1]:
            mask = np.stack([m0, m1])
            joint = res.pi[:, :, None] * res.pi[:, None, :]
            joint[:, np.arange(G), np.arange(G)] = res.pi
            est += p0 * p1 * pair_ht_gradient(r, S, mask, joint).sum(axis=0)
    np.testing.assert_allclose(est, target, rtol=0, atol=1e-12)
    # and the Bernoulli moments are the ones the estimator was given
    emp_pi, _ = moments(supports[0], G)
    np.testing.assert_allclose(emp_pi, res.pi[0], rtol=0, atol=1e-14)


def test_prompt_split_is_the_grid_optimum_by_brute_force():
    rng = np.random.default_rng(7)
    B, G, M = 3, 4, 6
    p = rng.random((B, G))
    c = rng.uniform(5, 50, size=(B, G))
    fin = np.zeros((B, G), dtype=bool)
    res = pair_joint_allocate(p, c, fin, 0.4 * c.sum(), grid=M)
    best = min(res.curves[np.arange(B), m].sum()
               for m in feasible_allocations([0] * B, [M] * B, M))
    assert abs(res.curves[np.arange(B), res.steps].sum() - best) <= 1e-12 * best
    # the curves are value functions of a convex program in its budget: nonincreasing, convex
    d = np.diff(res.curves, axis=1)
    assert np.all(d <= 1e-9 * res.curves[:, :1])
    assert np.all(np.diff(d, axis=1) >= -1e-7 * res.curves[:, :1])


def test_never_worse_than_fixed_equal_budgets_when_those_lie_on_the_grid():
    # equal costs per row and a grid divisible by B: the equal split is a grid point
    p = np.array([[0.5, 0.5, 0.4, 0.6], [0.95, 0.9, 0.97, 0.92]])
    c = np.full((2, 4), 25.0)
    fin = np.zeros((2, 4), dtype=bool)
    T = 100.0
    fixed = allocate(p, c, np.array([T / 2, T / 2]))
    for kappa in (1.0, 3.0):    # the plain split and the robust move
        res = pair_joint_allocate(p, c, fin, T, grid=16, kappa=kappa)
        assert res.objective.sum() <= fixed.objective.sum() * (1 + 1e-8)
        assert abs(res.budgets.sum() - T) <= 1e-9 * T
    res = pair_joint_allocate(p, c, fin, T, grid=16, kappa=1.0)
    # the plain split gives the uncertain prompt the larger share
    assert res.budgets[0] > res.budgets[1] and res.move == 1.0
    # the predicted gain is within a factor kappa = 3 of noise: each prompt keeps its own
    res = pair_joint_allocate(p, c, fin, T, grid=16)
    np.testing.assert_array_equal(res.budgets, [T / 2, T / 2])
    assert res.move == 0.0


@pytest.mark.parametrize("finished_one", [False, True])
def test_pair_ht_is_exactly_unbiased_under_the_default_fixed_size_design(finished_one):
    """Through the step (size "auto"), pair_joint runs PAIR's default design at its split."""
    from pairht.step import StepInputs, group_design, plan_continuations
    from pairht.testing import assert_design_unbiased

    p, c, fin = _batch(4, finished_one)
    x = StepInputs.from_ratio(p, np.where(fin, 0.0, c), fin, 0.6)
    plan = plan_continuations(x, allocator="pair_joint", rng=0, grid=8, kappa=1.0)
    assert plan.design == "conditional_poisson" and plan.info["fixed_size"].any()
    assert np.all(plan.pi[fin] == 1.0) and np.all(plan.pi >= 0.08 - 1e-12)
    rng = np.random.default_rng(5)
    for b in range(2):
        comps = ((plan.info["pi_lo"][b], plan.info["pi_hi"][b],
                  float(plan.info["weight_hi"][b])) if plan.info["fixed_size"][b] else None)
        kind = plan.design if comps is not None else "bernoulli"
        d = group_design(kind, plan.pi_alloc[b], fin[b], rng=0, components=comps)
        np.testing.assert_allclose(d.joint(), plan.joint[b], rtol=0, atol=1e-12)
        assert np.all(d.joint() > 0)
        assert_design_unbiased(pair_ht_gradient, d, rng.random(4), rng.normal(size=(4, 3)))


def test_kappa_inf_gives_every_prompt_its_own_budget_and_pairs_pi():
    from pairht.step import ALLOCATORS, StepInputs

    p, c, fin = _batch(4, True)
    x = StepInputs.from_ratio(p, np.where(fin, 0.0, c), fin, 0.5)
    pi_j, info = ALLOCATORS["pair_joint"].pi(x, kappa=float("inf"), size="auto")
    pi_p, _ = ALLOCATORS["pair"].pi(x, size="auto")
    np.testing.assert_allclose(info["prompt_budget"], x.budget, rtol=1e-12)
    np.testing.assert_allclose(pi_j, pi_p, rtol=0, atol=1e-12)


def test_a_size_outside_the_step_is_refused_naming_the_step():
    from pairht.comparators.allocators import PairJointAllocator
    from pairht.step import StepInputs

    p, c, fin = _batch(4)
    x = StepInputs.from_ratio(p, c, fin, 0.5)
    with pytest.raises(ValueError, match=r"pair_joint at a size runs the step's 'pair' rule"):
        PairJointAllocator().pi(x, size="auto")   # unbound: no step has lent its rule


def test_budget_below_the_floor_is_refused():
    p, c, fin = _batch(3)
    with pytest.raises(ValueError, match="total_budget must be at least the floor's cost"):
        pair_joint_allocate(p, c, fin, 1.0)
