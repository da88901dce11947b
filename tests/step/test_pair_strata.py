"""The ``pair_strata`` rule: predicted outcomes as strata, Neyman sizes, exact and unbiased."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import Stratified
from pairht.estimators import pair_estimate, pair_gradient
from pairht.step import ALLOCATORS, PREFIX_RULES, StepInputs, plan_continuations
from pairht.step.strata import THRESHOLD, joint_floor_size

RULE = ALLOCATORS["pair_strata"]


def _inputs(p, c, finished=None, ratio=0.5):
    p = np.atleast_2d(np.asarray(p, dtype=float))
    c = np.atleast_2d(np.asarray(c, dtype=float))
    fin = np.zeros(p.shape, bool) if finished is None else np.atleast_2d(finished)
    return StepInputs.from_ratio(p, c, fin, ratio)


def _random_group(seed, G, ratio, levels, finished_rate):
    """A group with p_hat on ``levels``, random costs and finished candidates, and its inputs."""
    rng = np.random.default_rng(seed)
    p = rng.choice(levels, G)
    c = rng.uniform(5, 50, G)
    fin = rng.random(G) < finished_rate
    return rng, p, c, fin, _inputs(p, c, fin, ratio)


def _expected_disagreements(p):
    """e_i = sum_{j != i} [p_i (1 - p_j) + p_j (1 - p_i)], written out independently."""
    e = p[:, None] * (1 - p[None]) + p[None] * (1 - p[:, None])
    np.fill_diagonal(e, 0.0)
    return e.sum(axis=1)


def _strata(p, fin):
    unf = ~fin
    return [m for m in (unf & (p >= THRESHOLD), unf & (p < THRESHOLD)) if m.any()]


@settings(max_examples=60, deadline=None)
@given(G=st.integers(3, 10), ratio=st.floats(0.2, 0.9), seed=st.integers(0, 2**16))
def test_budget_spent_exactly_floors_met_and_pi_constant_within_strata(G, ratio, seed):
    _, p, c, fin, x = _random_group(seed, G, ratio, [0.05, 0.3, 0.7, 0.95], 0.2)
    pi, info = RULE.pi(x)
    pi = pi[0]
    assert np.all(pi[fin] == 1.0)
    spent = float((pi[~fin] * c[~fin]).sum())
    assert spent == pytest.approx(min(float(x.budget[0]), c[~fin].sum()), rel=1e-9)
    status = info["status"][0]
    if status == "stratified":
        for m in _strata(p, fin):
            assert np.all(pi[m] == pi[m][0])            # one level per stratum
            n = int(m.sum())
            assert pi[m][0] * n >= joint_floor_size(n, 0.08) - 1e-9
    elif status in ("one_stratum", "floor"):
        assert np.all(pi[~fin] == pi[~fin][0])          # uniform among unfinished: SRSWOR


def test_interior_sizes_are_neymans():
    # 4 predicted successes, 12 failures, successes twice as long: n_h ∝ N_h e_h / sqrt(c_h)
    p = np.array([0.9] * 4 + [0.1] * 12)
    c = np.array([40.0] * 4 + [10.0] * 12)
    pi, info = RULE.pi(_inputs(p, c, ratio=0.4))
    assert info["status"][0] == "stratified"
    e = _expected_disagreements(p)
    n = np.array([pi[0, 0] * 4, pi[0, 4] * 12])
    w = np.array([4 * e[0] / np.sqrt(40.0), 12 * e[4] / np.sqrt(10.0)])
    assert 0.08 < pi[0, 0] < 1 and 0.08 < pi[0, 4] < 1      # both interior
    assert n[0] / w[0] == pytest.approx(n[1] / w[1], rel=1e-9)


def test_neyman_sizes_minimise_the_stratified_variance_proxy():
    # brute force over the size of stratum A on a fine grid at the same budget
    p = np.array([0.8] * 5 + [0.2] * 9)
    c = np.array([30.0] * 5 + [12.0] * 9)
    x = _inputs(p, c, ratio=0.35)
    pi, _ = RULE.pi(x)
    e = _expected_disagreements(p)
    W2 = np.array([(5 * e[0]) ** 2, (9 * e[5]) ** 2])
    N = np.array([5.0, 9.0])
    T = float(x.budget[0])

    def value(nA):
        nB = (T - nA * 30.0) / 12.0
        return W2[0] * (1 / nA - 1 / N[0]) + W2[1] * (1 / nB - 1 / N[1])

    grid = np.linspace(joint_floor_size(5, 0.08), 5.0, 20001)
    grid = grid[(T - grid * 30.0) / 12.0 >= joint_floor_size(9, 0.08)]
    best = grid[np.argmin([value(g) for g in grid])]
    assert pi[0, 0] * 5 == pytest.approx(best, abs=(grid[1] - grid[0]))


def test_uninformative_predictions_give_srswor_exactly():
    x = _inputs(np.full(8, 0.3), np.full(8, 20.0), ratio=0.45)
    pi, info = RULE.pi(x)
    assert info["status"][0] == "one_stratum"
    np.testing.assert_allclose(pi, 0.45, rtol=0, atol=1e-15)
    plan = plan_continuations(x, allocator="pair_strata", rng=0)
    from pairht.designs import MixedSize

    np.testing.assert_allclose(plan.joint[0], MixedSize(np.full(8, 0.45)).joint(), rtol=0,
                               atol=1e-13)


def test_floors_the_budget_cannot_pay_fall_back_to_uniform():
    # two strata of 8 need sizes >= 1.18 each (joint >= pi_min^2): 2.36 of 16 > budget 2.0
    x = _inputs([0.9] * 8 + [0.1] * 8, np.full(16, 10.0), ratio=2.0 / 16)
    pi, info = RULE.pi(x)
    assert info["status"][0] == "floor"
    np.testing.assert_allclose(pi, 2.0 / 16, rtol=0, atol=1e-15)


@settings(max_examples=30, deadline=None)
@given(G=st.integers(3, 8), ratio=st.floats(0.2, 0.8), seed=st.integers(0, 2**16))
def test_the_steps_pair_ht_is_unbiased_by_enumeration(G, ratio, seed):
    rng, _, _, fin, x = _random_group(seed, G, ratio, [0.1, 0.4, 0.6, 0.9], 0.25)
    plan = plan_continuations(x, allocator="pair_strata", rng=seed)
    r, s = rng.integers(0, 2, G).astype(float), rng.normal(size=(G, 2))
    from pairht.step import group_design

    design = group_design("stratified", plan.pi[0], fin)
    np.testing.assert_allclose(design.joint(), plan.joint[0], rtol=0, atol=1e-13)
    masks, probs = design.support()
    joint = plan.joint[0]
    est = np.array([pair_estimate(r, s, m, joint) for m in masks])
    np.testing.assert_allclose(probs @ est, pair_gradient(r, s), rtol=0, atol=1e-10)


def test_the_step_draws_the_stratified_design():
    x = _inputs([0.9] * 4 + [0.1] * 12, np.full(16, 10.0), ratio=0.4)
    plan = plan_continuations(x, allocator="pair_strata", rng=3)
    from pairht.step import group_design

    d = group_design("stratified", plan.pi[0], np.zeros(16, bool))
    assert isinstance(d.base, Stratified) and d.base.levels.size == 2
    sel = plan.selected[0]
    assert sel[:4].sum() in (int(np.floor(plan.pi[0, 0] * 4)), int(np.floor(plan.pi[0, 0] * 4)) + 1)


def test_bad_options_are_refused():
    x = _inputs([0.9, 0.1, 0.1], [10.0] * 3)
    with pytest.raises(ValueError, match="size must be None"):
        RULE.pi(x, size=2)
    with pytest.raises(TypeError, match="unexpected options"):
        RULE.pi(x, grid=4)
    with pytest.raises(ValueError, match="pi_min"):
        RULE.pi(x, pi_min=1.5)
    with pytest.raises(ValueError, match=r"score_norm must be .* \(B, G\) = \(1, 3\)"):
        RULE.pi(x, score_norm=np.ones((1, 4)))
    with pytest.raises(ValueError, match="negative or non-finite"):
        RULE.pi(x, score_norm=np.array([[1.0, -1.0, 1.0]]))


def test_it_is_a_prefix_rule():
    assert "pair_strata" in PREFIX_RULES


def test_zero_score_norms_in_a_stratum_still_spend_the_budget():
    # a stratum whose predicted score norms are all 0 has weight 0: it keeps its floor and
    # takes only what the other stratum cannot (no endless search for lambda)
    p = np.array([0.9] * 3 + [0.1] * 5)
    c = np.full(8, 10.0)
    m = np.array([0.0] * 3 + [1.0] * 5)
    x = _inputs(p, c, ratio=0.8)
    pi, info = RULE.pi(x, score_norm=m[None])
    assert info["status"][0] == "stratified"
    assert float((pi[0] * c).sum()) == pytest.approx(float(x.budget[0]), rel=1e-9)
    assert pi[0, 3] == 1.0                 # the weighted stratum is filled first
