"""``pair_batch``: one suffix budget for the batch, split across prompts by PAIR's value curves
(the exact grid optimum, checked by brute force), moved from the per-prompt split only as far
as the worst case of a factor-``kappa`` prediction error keeps the batch no worse, then
PAIR's program in each prompt; the pair HT estimator stays exactly unbiased (checked by
enumerating each prompt's design)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pairht.comparators.joint import split_grid
from pairht.estimators import pair_ht_gradient
from pairht.step import (
    ALLOCATORS,
    StepInputs,
    group_design,
    plan_continuations,
    program_allocators,
)
from pairht.testing import assert_design_unbiased


def _inputs(ratio: float = 0.5, fin: np.ndarray | None = None) -> StepInputs:
    p = np.array([[0.2, 0.5, 0.7, 0.9, 0.4, 0.6],
                  [0.1, 0.9, 0.4, 0.35, 0.5, 0.8],
                  [0.97, 0.98, 0.99, 0.96, 0.95, 0.99]])
    c = np.array([[10.0, 20.0, 30.0, 40.0, 25.0, 15.0],
                  [50.0, 10.0, 20.0, 5.0, 30.0, 60.0],
                  [15.0, 15.0, 15.0, 15.0, 15.0, 15.0]])
    fin = np.zeros(p.shape, dtype=bool) if fin is None else fin
    return StepInputs.from_ratio(p, c, fin, ratio, prefix_tokens=np.full(p.shape, 8.0))


def _brute_force_split(curves: np.ndarray) -> float:
    B, W = curves.shape[0], curves.shape[1] - 1
    return min(curves[np.arange(B), list(m)].sum()
               for m in itertools.product(range(W + 1), repeat=B) if sum(m) == W)


@pytest.mark.parametrize("convex", [True, False])
def test_split_grid_is_the_optimum_by_brute_force(convex):
    rng = np.random.default_rng(3 + convex)
    for _ in range(20):
        B, W = 3, 5
        # value curves: nonincreasing; convex (decrements sorted) or not (solver noise)
        dec = rng.exponential(size=(B, W))
        if convex:
            dec = np.sort(dec, axis=1)[:, ::-1]
        curves = 10.0 - np.concatenate([np.zeros((B, 1)), np.cumsum(dec, axis=1)], axis=1)
        m = split_grid(curves)
        assert m.sum() == W and np.all(m >= 0)
        best = _brute_force_split(curves)
        assert curves[np.arange(B), m].sum() <= best + 1e-12 * abs(best)


def test_split_grid_places_every_step_even_where_gains_are_zero():
    # not convex (gains 0.5, 0, 0.1), and a flat curve: the optimum needs 2 steps in prompt 1
    # and the third goes where it costs nothing.
    curves = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 1.5, 1.5, 1.4]])
    m = split_grid(curves)
    assert m.sum() == 3 and curves[np.arange(2), m].sum() == pytest.approx(2.4, abs=1e-15)


def test_registered_as_a_program_rule_and_spends_the_batch_budget():
    assert "pair_batch" in program_allocators() and "pair" in program_allocators()
    x = _inputs(0.4)
    pi, info = ALLOCATORS["pair_batch"].pi(x)  # Bernoulli program in each prompt
    cost = np.where(x.finished, 0.0, x.c_hat * pi).sum()
    np.testing.assert_allclose(cost, x.budget.sum(), rtol=1e-8)
    np.testing.assert_allclose(info["prompt_budget"].sum(), x.budget.sum(), rtol=1e-12)
    assert np.all(info["prompt_budget"] >= 0.08 * x.full_cost * (1 - 1e-12))
    assert np.all(pi >= 0.08 - 1e-12) and np.all(pi <= 1.0)
    np.testing.assert_allclose(info["unspent_budget"].sum(), x.budget.sum() - cost,
                               atol=1e-9 * x.budget.sum())


def test_the_plain_split_gives_the_confident_prompts_budget_to_the_uncertain_ones():
    x = _inputs(0.4)
    _, info = ALLOCATORS["pair_batch"].pi(x, size="auto", kappa=1.0, rate_prior=0.0)
    share = info["prompt_budget"] / x.budget
    assert share[2] < 1.0 and share[0] > 1.0  # p near 1 everywhere: little contrast
    assert info["split_move"] == 1.0
    np.testing.assert_allclose(info["prompt_budget"], info["split_budget"], rtol=0, atol=0)


def test_kappa_inf_is_the_per_prompt_rule_pair_exactly():
    x = _inputs(0.4)
    pi_b, info = ALLOCATORS["pair_batch"].pi(x, size="auto", kappa=float("inf"))
    pi_p, _ = ALLOCATORS["pair"].pi(x, size="auto")
    assert info["split_move"] == 0.0
    np.testing.assert_array_equal(info["prompt_budget"], x.budget)
    np.testing.assert_allclose(pi_b, pi_p, rtol=0, atol=1e-12)


def _random_inputs(seed: int, B: int = 5, G: int = 6) -> StepInputs:
    rng = np.random.default_rng(seed)
    # prompts from near all-fail to mixed; some candidates finished
    p = 1.0 / (1.0 + np.exp(-(rng.normal(0, 2.5, (B, 1)) + rng.normal(0, 1.0, (B, G)))))
    c = rng.uniform(5.0, 60.0, (B, G))
    fin = rng.random((B, G)) < 0.15
    return StepInputs.from_ratio(p, c, fin, rng.uniform(0.2, 0.7))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kappa", [1.5, 3.0])
def test_robust_move_never_raises_the_worst_case_or_the_predicted_variance(seed, kappa):
    import dataclasses

    from pairht.comparators.joint import rate_prior_predictions
    from pairht.step.allocators import _program_curves

    x = _random_inputs(seed)
    _, info = ALLOCATORS["pair_batch"].pi(x, kappa=kappa, grid=16)
    lv = np.stack([info["base_budget"], info["prompt_budget"]], axis=1)
    # the curves the split reads: the predictions through the rate prior (w = 1/2)
    read = dataclasses.replace(x, p_hat=rate_prior_predictions(x.p_hat, 0.5))
    V = _program_curves(read, lv, 0.08, "disagreement", True, {})
    d = V[:, 1] - V[:, 0]
    worst = np.where(d > 0, kappa * d, d / kappa).sum()
    scale = V[:, 0].sum()
    assert worst <= 1e-9 * scale           # R(lambda*) <= R(0) = 0
    assert d.sum() <= 1e-9 * scale         # and the predicted variance: never above pair's
    # a move is taken only when its gains beat kappa^2 times its losses
    if info["split_move"] > 0:
        assert d[d < 0].sum() < 0 and d[d > 0].sum() <= -d[d < 0].sum() / kappa**2 + 1e-9 * scale


@pytest.mark.parametrize("seed", range(4))
def test_robust_budgets_keep_floors_full_costs_and_the_batch_total(seed):
    x = _random_inputs(seed)
    _, info = ALLOCATORS["pair_batch"].pi(x, grid=16)
    floor, full = 0.08 * x.full_cost, x.full_cost
    beta = info["prompt_budget"]
    assert np.all(beta >= floor * (1 - 1e-12)) and np.all(beta <= full * (1 + 1e-12))
    assert beta.sum() <= x.budget.sum() * (1 + 1e-12)
    lam = info["split_move"]
    np.testing.assert_allclose(beta, info["base_budget"]
                               + lam * (info["split_budget"] - info["base_budget"]),
                               rtol=1e-12, atol=1e-12 * x.budget.sum())


def test_the_move_grows_as_kappa_falls():
    x = _random_inputs(2, B=6)
    moves = [ALLOCATORS["pair_batch"].pi(x, grid=16, kappa=k)[1]["split_move"]
             for k in (1.0, 1.5, 3.0, 10.0, float("inf"))]
    assert moves[0] == 1.0 and moves[-1] == 0.0
    assert all(a >= b for a, b in itertools.pairwise(moves))


def test_rate_prior_reads_g_predictions_as_g_outcomes_beside_w_at_one_half():
    from pairht.comparators.joint import rate_prior_predictions

    p = np.array([[0.0, 0.25, 1.0, 0.5], [0.1, 0.2, 0.3, 0.4]])
    np.testing.assert_allclose(rate_prior_predictions(p, 2.0), (4 * p + 1.0) / 6.0,
                               rtol=0, atol=1e-15)
    np.testing.assert_array_equal(rate_prior_predictions(p, 0.0), p)
    with pytest.raises(ValueError, match="rate_prior must be a finite number >= 0"):
        ALLOCATORS["pair_batch"].pi(_inputs(), rate_prior=-1.0)


def test_a_prompt_predicted_to_fail_everywhere_is_not_starved_by_the_default():
    # the failure: a prompt the head calls all-fail (it may hold a rare success) and
    # a mixed one. The plain split (kappa 1, no rate prior) takes its budget towards the
    # floor; the rate prior values it as a prompt expecting a quarter of a success, and the
    # robust move goes only part of the way there.
    p = np.vstack([np.full(16, 0.01), np.linspace(0.3, 0.7, 16)])
    x = StepInputs.from_ratio(p, np.full((2, 16), 100.0), np.zeros((2, 16), bool), 0.5)
    plain = ALLOCATORS["pair_batch"].pi(x, kappa=1.0, rate_prior=0.0)[1]["prompt_budget"]
    prior = ALLOCATORS["pair_batch"].pi(x, kappa=1.0)[1]["prompt_budget"]
    robust = ALLOCATORS["pair_batch"].pi(x)[1]["prompt_budget"]
    assert plain[0] < prior[0] < robust[0] < x.budget[0]
    assert robust[0] > 0.75 * x.budget[0] and plain[0] < 0.4 * x.budget[0]


@pytest.mark.parametrize("kappa", [0.5, -1.0, float("nan"), True, "3"])
def test_bad_kappa_is_refused_naming_it(kappa):
    with pytest.raises(ValueError, match=r"kappa must be a number >= 1"):
        ALLOCATORS["pair_batch"].pi(_inputs(), kappa=kappa)


def test_a_prompt_whose_candidates_agree_for_sure_keeps_its_floor():
    # p_hat = 0 everywhere in prompt 1: the disagreement proxy is 0, its curve flat.
    x = _inputs(0.3)
    p = x.p_hat.copy()
    p[1] = 0.0
    y = StepInputs(p, x.c_hat, x.finished, x.budget)
    _, info = ALLOCATORS["pair_batch"].pi(y, pi_min=0.08, kappa=1.0, rate_prior=0.0)
    np.testing.assert_allclose(info["prompt_budget"][1], 0.08 * y.full_cost[1], rtol=1e-12)


def test_identical_prompts_split_evenly_and_reduce_to_pair():
    x = _inputs(0.5)
    rows = np.array([0, 0])
    y = StepInputs(x.p_hat[rows], x.c_hat[rows], x.finished[rows], x.budget[rows])
    pi_b, info = ALLOCATORS["pair_batch"].pi(y, size="auto", grid=16)
    pi_p, _ = ALLOCATORS["pair"].pi(y, size="auto")
    np.testing.assert_allclose(info["prompt_budget"], y.budget, rtol=1e-12)
    np.testing.assert_allclose(pi_b, pi_p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("finished", [False, True])
def test_pair_ht_is_exactly_unbiased_under_the_plan(finished):
    fin = np.zeros((3, 6), dtype=bool)
    if finished:
        fin[0, 1] = fin[1, [0, 4]] = True
    x = _inputs(0.5, fin)
    plan = plan_continuations(x, allocator="pair_batch", rng=0)
    assert plan.design == "conditional_poisson"  # PAIR's default design, as for "pair"
    rng = np.random.default_rng(11)
    for b in range(3):
        comps = ((plan.info["pi_lo"][b], plan.info["pi_hi"][b],
                  float(plan.info["weight_hi"][b])) if plan.info["fixed_size"][b] else None)
        kind = plan.design if comps is not None else "bernoulli"
        d = group_design(kind, plan.pi_alloc[b], fin[b], rng=0, components=comps)
        np.testing.assert_allclose(d.joint(), plan.joint[b], rtol=0, atol=1e-12)
        assert_design_unbiased(pair_ht_gradient, d, rng.random(6), rng.normal(size=(6, 3)))


@pytest.mark.parametrize("grid", [0, -3, True, 2.5])
def test_bad_grid_is_refused_naming_it(grid):
    with pytest.raises(ValueError, match=r"grid must be a positive int .*got"):
        ALLOCATORS["pair_batch"].pi(_inputs(), grid=grid)


def test_an_unknown_option_is_refused_not_ignored():
    with pytest.raises(TypeError, match=r"allocator 'pair_batch' got unexpected options "
                                        r"\['tolerance'\]"):
        ALLOCATORS["pair_batch"].pi(_inputs(), tolerance=1e-3)


def test_budget_below_the_floor_is_refused():
    x = _inputs()
    y = StepInputs(x.p_hat, x.c_hat, x.finished, 0.01 * x.full_cost)
    with pytest.raises(ValueError, match="budget is infeasible"):
        ALLOCATORS["pair_batch"].pi(y)
