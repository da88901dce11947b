"""The ``pair_dr`` rule: Neyman's allocation for the difference estimator, one batch budget.

References written here: ``E[c_i^2]`` by enumerating every reward vector, the allocation's
objective against scipy's SLSQP on the same program, and the difference estimator's exact
variance at the rule's ``pi`` against the Godambe-Joshi value it is built to attain.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from pairht.designs import Bernoulli
from pairht.estimators import pair_gradient
from pairht.estimators.difference import difference_advantages, difference_moments
from pairht.step import ALLOCATORS, StepInputs, plan_continuations
from pairht.step.neyman import coefficient_energy

RULE = ALLOCATORS["pair_dr"]


def _batch(seed, B, G, ratio, finished_rate=0.2, levels=None):
    rng = np.random.default_rng(seed)
    p = rng.random((B, G)) if levels is None else rng.choice(levels, (B, G))
    c = rng.uniform(5, 50, (B, G))
    fin = rng.random((B, G)) < finished_rate
    fin[:, 0] = False  # at least one unfinished candidate per prompt
    return rng, p, c, fin, StepInputs.from_ratio(p, c, fin, ratio)


def _objective(pi, w, unf):
    return float(((1.0 / pi - 1.0) * w)[unf].sum())


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), G=st.integers(2, 8), ratio=st.floats(0.15, 0.95),
       seed=st.integers(0, 2**16))
def test_batch_budget_spent_exactly_with_floors_and_finished_kept(B, G, ratio, seed):
    _, _, c, fin, x = _batch(seed, B, G, ratio)
    pi, info = RULE.pi(x)
    assert np.all(pi[fin] == 1.0)
    unf = ~fin
    assert np.all(pi[unf] >= 0.08 - 1e-12) and np.all(pi <= 1.0)
    spent = float((pi * np.where(unf, c, 0.0)).sum())
    assert spent == pytest.approx(min(float(x.budget.sum()), c[unf].sum()), rel=1e-9)
    assert info["design"] == "bernoulli"
    np.testing.assert_allclose(info["unspent_budget"].sum(), x.budget.sum() - spent,
                               atol=1e-9 * spent)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), G=st.integers(2, 6), ratio=st.floats(0.2, 0.8),
       seed=st.integers(0, 2**16))
def test_allocation_minimises_the_neyman_objective_like_slsqp(B, G, ratio, seed):
    rng, p, c, fin, x = _batch(seed, B, G, ratio)
    m = rng.uniform(0.5, 2.0, (B, G))
    pi, _ = RULE.pi(x, score_norm=m)
    unf = ~fin
    w = coefficient_energy(p, fin) * m**2
    total = min(float(x.budget.sum()), float(c[unf].sum()))
    res = minimize(lambda z: float(((1.0 / z - 1.0) * w[unf]).sum()), np.full(unf.sum(), 0.5),
                   jac=lambda z: -w[unf] / z**2, bounds=[(0.08, 1.0)] * int(unf.sum()),
                   constraints=[{"type": "eq", "fun": lambda z: float((z * c[unf]).sum()) - total,
                                 "jac": lambda z: c[unf]}],
                   method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000})
    assert _objective(pi, w, unf) <= res.fun * (1 + 1e-7) + 1e-15


@pytest.mark.parametrize("G", [2, 3, 5])
def test_coefficient_energy_by_enumerating_rewards(G):
    rng = np.random.default_rng(G)
    p = rng.random(G)
    fin = np.zeros(G, bool)
    fin[-1] = True
    known = np.zeros(G)
    known[-1] = 1.0
    M = G * (G - 1) / 2
    expect = np.zeros(G)
    for bits in itertools.product((0.0, 1.0), repeat=G - 1):
        r = np.array([*bits, 1.0])
        prob = np.prod([pj if rj else 1 - pj for pj, rj in zip(p[:-1], r[:-1])])
        c = np.array([sum(r[i] - r[j] for j in range(G) if j != i) for i in range(G)]) / (2 * M)
        expect += prob * c**2
    got = coefficient_energy(p[None], fin[None], known[None])[0]
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-15)


def test_hindsight_predictions_attain_the_godambe_joshi_value():
    # p = r, m = ||s||: the difference estimator at the rule's pi has exactly
    # sum (1/pi - 1) c_i^2 ||s_i||^2 as its variance when the scores are orthogonal
    rng = np.random.default_rng(3)
    G = 6
    r = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    norms = rng.uniform(0.5, 2.0, G)
    c = rng.uniform(5, 50, G)
    fin = np.zeros(G, bool)
    x = StepInputs.from_ratio(r[None], c[None], fin[None], 0.4)
    pi, _ = RULE.pi(x, score_norm=norms[None])
    mom = difference_moments(r, r, Bernoulli(pi[0]))
    coef = (G * r - r.sum()) / (G * (G - 1))
    gj = float(((1.0 / pi[0] - 1.0) * coef**2 * norms**2).sum())
    assert mom.trace(np.diag(norms**2)) == pytest.approx(gj, rel=1e-12)


def test_the_step_draw_is_unbiased_by_enumeration():
    rng, p, _c, fin, x = _batch(11, 2, 5, 0.4)
    plan = plan_continuations(x, allocator="pair_dr", rng=0)
    r = rng.integers(0, 2, p.shape).astype(float)
    s = rng.normal(size=(2, 5, 3))
    assert plan.design == "bernoulli"
    for b in range(2):
        design = Bernoulli(plan.pi[b])
        np.testing.assert_allclose(plan.joint[b], design.joint(), atol=1e-15)
        base = np.where(fin[b], r[b], p[b])
        masks, probs = design.support()
        est = sum(pr * difference_advantages(np.where(m, r[b], np.nan), m, plan.joint[b], base)
                  @ s[b] for m, pr in zip(masks, probs))
        np.testing.assert_allclose(est, pair_gradient(r[b], s[b]), atol=1e-12)


def test_no_predicted_contrast_spends_the_budget_uniformly():
    x = StepInputs.from_ratio(np.ones((2, 4)), np.full((2, 4), 10.0), np.zeros((2, 4), bool),
                              0.3)
    pi, info = RULE.pi(x)
    np.testing.assert_allclose(pi, 0.3)
    assert set(info["status"]) == {"floor"}


def test_bad_options_are_refused_with_their_name():
    _, p, c, fin, x = _batch(0, 2, 4, 0.5)
    with pytest.raises(ValueError, match="score_norm"):
        RULE.pi(x, score_norm=np.ones((2, 3)))
    with pytest.raises(ValueError, match="score_norm"):
        RULE.pi(x, score_norm=-np.ones((2, 4)))
    with pytest.raises(ValueError, match="known"):
        RULE.pi(x, known=np.ones((3, 4)))
    with pytest.raises((ValueError, TypeError), match="size"):
        RULE.pi(x, size="auto")
    with pytest.raises(ValueError, match="budget is infeasible"):
        RULE.pi(StepInputs.from_ratio(p, c, fin, 0.01))
