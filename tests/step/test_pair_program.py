"""PAIR's program in the step: finished edges folded into b, two neighbouring sizes mixed.

Exact claims are checked against brute-force enumeration of the design's support (float64
sums of at most 2**8 terms: 1e-12) or against an identity of the objective (1e-12 relative).
Solver agreements use 1e-6 in pi: the solver stops at KKT residual 1e-8.
"""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation import allocate, solve_program
from pairht.allocation.energy import length_energy
from pairht.estimators import pair_ht_gradient
from pairht.step import StepInputs, group_design, plan_continuations
from pairht.step.pair_program import fold_finished, program_terms
from pairht.testing import assert_design_unbiased


def _group(seed: int = 0, G: int = 8, ratio: float = 0.5, fin_idx=(1, 4)) -> StepInputs:
    rng = np.random.default_rng(seed)
    fin = np.zeros((1, G), dtype=bool)
    fin[0, list(fin_idx)] = True
    return StepInputs.from_ratio(rng.uniform(0.05, 0.95, (1, G)), rng.uniform(20, 400, (1, G)),
                                 fin, budget_ratio=ratio,
                                 prefix_tokens=rng.integers(4, 40, (1, G)).astype(float))


def _objective(a, b, pi):
    iu = np.triu_indices(pi.size, 1)
    return float((a[iu] / (pi[iu[0]] * pi[iu[1]])).sum() + (b / pi).sum())


def test_folding_finished_edges_into_b_is_the_whole_groups_objective_up_to_a_constant():
    inputs = _group(1)
    a, b = program_terms(inputs)
    unf = inputs.unfinished
    a_u, b_u = fold_finished(a, b, unf, 6)
    rng = np.random.default_rng(2)
    gaps = []
    for _ in range(3):
        pi = np.ones(8)
        pi[unf[0]] = rng.uniform(0.1, 1.0, 6)
        gaps.append(_objective(a[0], b[0], pi) - _objective(a_u[0], b_u[0], pi[unf[0]]))
    # the difference is the finished-finished edges and finished b: the same for every pi
    np.testing.assert_allclose(gaps, gaps[0], rtol=1e-12, atol=0)
    fin = ~unf[0]
    const = a[0][np.ix_(fin, fin)].sum() / 2 + b[0][fin].sum()
    np.testing.assert_allclose(gaps[0], const, rtol=1e-12)


def test_bernoulli_route_equals_the_whole_group_with_finished_at_negligible_cost():
    """The fold is exact; the old embedding (finished at a relative cost of 1e-9, budget raised
    by what they cost at 1) reaches the same optimum to the solver's tolerance."""
    inputs = _group(3)
    plan = plan_continuations(inputs, size=None, rng=0)
    fin = inputs.finished
    tiny = 1e-9 * inputs.c_hat[~fin].mean()
    c = np.where(fin, tiny, inputs.c_hat)
    res = allocate(inputs.p_hat, c, inputs.budget + tiny * fin.sum(), pi_min=0.08)
    np.testing.assert_allclose(plan.pi_alloc[~fin], res.pi[~fin], rtol=0, atol=1e-6)
    assert (res.pi[fin] > 1 - 1e-6).all()


@pytest.mark.parametrize("ratio", [0.35, 0.6, 0.7])  # S = 2.1, 3.6, 4.2 of k = 6
def test_default_plan_is_the_exact_mixture_of_two_solved_sizes(ratio):
    inputs = _group(4, ratio=ratio)
    plan = plan_continuations(inputs, rng=0)
    info = plan.info
    unf = inputs.unfinished[0]
    k = int(unf.sum())
    S = ratio * k
    n = int(np.floor(S + 1e-12))
    assert info["fixed_size"][0] and info["size"][0] == n and plan.design == "conditional_poisson"
    np.testing.assert_allclose(info["weight_hi"][0], S - n, rtol=0, atol=1e-12)
    lo, hi = info["pi_lo"][0], info["pi_hi"][0]
    np.testing.assert_allclose([lo[unf].sum(), hi[unf].sum()], [n, n + 1], rtol=0, atol=1e-9)
    # each size spends at most its share of the budget: n / k and (n + 1) / k of the full cost
    full = inputs.c_hat[0, unf].sum()
    assert inputs.c_hat[0, unf] @ lo[unf] <= full * n / k * (1 + 1e-9)
    assert inputs.c_hat[0, unf] @ hi[unf] <= full * (n + 1) / k * (1 + 1e-9)
    # the design: enumerate its support; pi, joint and the size law are exact
    d = group_design(plan.design, plan.pi_alloc[0], inputs.finished[0], rng=0,
                     components=(lo, hi, float(info["weight_hi"][0])))
    masks, probs = d.support()
    m = masks.astype(float)
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.T @ probs, plan.pi[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.einsum("k,ki,kj->ij", probs, m, m), plan.joint[0], rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(plan.pi[0], (1 - (S - n)) * lo + (S - n) * hi, rtol=0,
                               atol=1e-12)
    sizes = masks[:, unf].sum(axis=1)
    assert set(sizes.tolist()) == {n, n + 1} and masks[:, ~unf].all()
    np.testing.assert_allclose(probs[sizes == n + 1].sum(), S - n, rtol=0, atol=1e-12)
    rng = np.random.default_rng(5)
    assert_design_unbiased(pair_ht_gradient, d, rng.random(8), rng.normal(size=(8, 3)))


def test_groups_that_afford_no_size_of_two_are_drawn_bernoulli():
    # 3 unfinished at ratio 0.5: S = 1.5 < 2, no fixed size with a pair; 6 unfinished: S = 3
    rng = np.random.default_rng(6)
    fin = np.zeros((2, 8), dtype=bool)
    fin[0, :5] = True
    fin[1, :2] = True
    inputs = StepInputs.from_ratio(rng.uniform(0.1, 0.9, (2, 8)), rng.uniform(20, 400, (2, 8)),
                                   fin, budget_ratio=0.5)
    plan = plan_continuations(inputs, rng=0)
    assert plan.info["fixed_size"].tolist() == [False, True]
    bern = plan_continuations(inputs, size=None, rng=0)
    np.testing.assert_array_equal(plan.pi_alloc[0], bern.pi_alloc[0])
    pu = plan.pi[0]
    np.testing.assert_allclose(plan.joint[0], np.where(np.eye(8, dtype=bool), pu,
                                                       np.outer(pu, pu)), rtol=0, atol=1e-15)


def test_auto_with_a_random_size_design_solves_the_bernoulli_program():
    inputs = _group(7)
    a = plan_continuations(inputs, design="bernoulli", rng=0)
    b = plan_continuations(inputs, size=None, rng=0)
    np.testing.assert_array_equal(a.pi, b.pi)
    assert not a.info["fixed_size"].any()


def test_length_energy_proxy_in_the_step_is_the_allocation_modules():
    inputs = _group(8, fin_idx=())
    plan = plan_continuations(inputs, size=None, proxy="length_energy", rng=0)
    a, b = length_energy(inputs.p_hat, inputs.prefix_tokens + inputs.c_hat)
    res = solve_program(inputs.p_hat, inputs.c_hat, inputs.budget, a, b, pi_min=0.08)
    np.testing.assert_allclose(plan.pi_alloc, res.pi, rtol=0, atol=1e-9)
    other = plan_continuations(inputs, size=None, rng=0)
    assert np.abs(other.pi_alloc - plan.pi_alloc).max() > 1e-3  # the proxy matters here
    sized = plan_continuations(inputs, proxy="length_energy", rng=0)
    assert sized.info["fixed_size"].all()


def test_length_energy_needs_prefix_tokens():
    x = _group(9)
    bare = StepInputs(x.p_hat, x.c_hat, x.finished, x.budget)
    with pytest.raises(ValueError, match=r"proxy='length_energy' needs StepInputs\.prefix_tokens"):
        plan_continuations(bare, proxy="length_energy", rng=0)
    with pytest.raises(ValueError, match="proxy must be one of"):
        plan_continuations(x, proxy="nope", rng=0)
