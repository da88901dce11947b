"""Audit rows of the paper's comparators (pairht.audit.comparator_rows, issue 16): exact MSE
against brute-force enumeration of each design, written out independently here; unbiasedness;
the derived histories; the rollout budget nearest the cost target; DPPO's full cost."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pairht.audit import AuditConfig, Population, run_audit, synthetic_population
from pairht.audit import comparator_rows as cr
from pairht.audit.rows import ROWS
from pairht.comparators import COMPARATORS, dppo_keep_probabilities
from pairht.estimators import pair_gradient, pair_ht_gradient
from shared import srswor_support


def _population(seed: int = 3, P: int = 3, G: int = 4) -> Population:
    """A small population with finished candidates (free, always in) in two prompts."""
    base = synthetic_population(P, G, rng=seed, calibration="noisy", score_dim=3)
    fin = np.zeros((P, G), dtype=bool)
    fin[0, 0] = True
    fin[1, [1, 3]] = True
    return Population(p_hat=base.p_hat, c_hat=base.c_hat, rewards=base.rewards,
                      costs=base.costs, prefix_len=base.prefix_len, scores=base.scores,
                      finished=fin)


def _support_bernoulli(pi: np.ndarray):
    masks = np.array(list(itertools.product([False, True], repeat=pi.size)))
    return masks, np.prod(np.where(masks, pi, 1.0 - pi), axis=1)


def _support_dppo(q: float, o: np.ndarray):
    masks, probs = _support_bernoulli(o)
    probs = q * probs
    probs[~masks.any(axis=1)] += 1.0 - q
    return masks, probs


def _enumerated_mse(rewards, scores, masks, probs):
    """E||g_hat - g||^2 of the pair-HT estimator over the support, joints from the support."""
    joint = np.einsum("k,ki,kj->ij", probs, masks.astype(float), masks.astype(float))
    g = pair_gradient(rewards, scores)
    mse, mean = 0.0, np.zeros_like(g)
    for m, p in zip(masks, probs):
        est = pair_ht_gradient(rewards, scores, m, joint)
        mse += p * float((est - g) @ (est - g))
        mean += p * est
    return mse, mean - g


def _support(key: str, pop: Population, plan, q: int):
    fin = pop.finished[q]
    plan_pi = plan.pi
    if key == "pair_joint":  # PAIR's default design: the step's mixture of two CPS sizes
        masks, probs = plan.designs[q].support()
        assert np.all(masks[:, fin])  # finished candidates always in
        return masks, probs
    if key == "dppo":
        qk, o = dppo_keep_probabilities(pop.rewards - pop.rewards.mean(axis=1, keepdims=True))
        return _support_dppo(qk[q], o[q])
    U = int((~fin).sum())
    k = round(float(plan_pi[q][~fin].sum())) if U else 0
    assert np.allclose(plan_pi[q][~fin], k / max(U, 1), rtol=0, atol=1e-15)  # equal pi
    return srswor_support(fin, k)


def test_rows_are_registered_by_importing_the_module():
    for key in cr.COMPARATOR_ROWS:
        assert key in ROWS and ROWS[key].unbiased and ROWS[key].group == "extra"


@pytest.mark.parametrize("key", cr.COMPARATOR_ROWS)
def test_exact_mse_equals_brute_force_enumeration_and_bias_is_zero(key):
    pop = _population()
    cfg = AuditConfig(budget_ratio=0.5, pi_min=0.1)
    res = run_audit(pop, rows=[key], config=cfg, n_draws=0)
    row = res.rows[0]
    assert row.ok, row.status
    plan = ROWS[key].plan(pop, cfg, {})
    mses = []
    for q in range(pop.n_prompts):
        masks, probs = _support(key, pop, plan, q)
        assert probs.sum() == pytest.approx(1.0, abs=1e-14)
        mse, bias = _enumerated_mse(pop.rewards[q], pop.scores[q], masks, probs)
        assert np.abs(bias).max() <= 1e-12 * max(1.0, np.abs(pop.scores[q]).max())
        mses.append(mse)
    # float64 sums of at most 2^4 terms: agreement to rounding
    np.testing.assert_allclose(row.per_prompt["mse_exact"], mses, rtol=1e-10, atol=1e-14)
    assert row.metrics["bias_exact"] <= 1e-12


def test_histories_are_the_predicted_and_the_realised_successes():
    pop = _population()
    G = pop.group_size
    pred = cr.population_history(pop, "predictions")
    oracle = cr.population_history(pop, "oracle")
    np.testing.assert_array_equal(pred["trials"], np.full(pop.n_prompts, G))
    np.testing.assert_allclose(pred["successes"], pop.p_hat.sum(axis=1), rtol=0, atol=0)
    np.testing.assert_allclose(oracle["successes"], np.clip(pop.rewards, 0, 1).sum(axis=1),
                               rtol=0, atol=0)
    with pytest.raises(ValueError, match="history must be one of"):
        cr.population_history(pop, "previous_epoch")


@pytest.mark.parametrize("key", ["vip", "hora_oracle", "duet"])
def test_the_rollout_budget_is_the_one_nearest_the_cost_target(key):
    pop = synthetic_population(6, 5, rng=2, calibration="noisy")
    cfg = AuditConfig(budget_ratio=0.4, pi_min=0.1)
    row = ROWS[key]
    plan = row.plan(pop, cfg, {})
    C = cr.suffix_costs(pop)
    target = cfg.budget_ratio * C.sum()
    hist = None if row.history is None else cr.population_history(pop, row.history)
    inputs = cr._inputs(pop, cfg.budget_ratio * pop.c_hat.sum(axis=1), hist)
    gaps = {}
    for n in range(pop.p_hat.size + 1):  # every rollout budget, brute force
        try:
            pi = COMPARATORS[row.comparator].pi(inputs, rollout_budget=n, **row.options)[0]
        except ValueError:  # below the comparator's per-prompt minimums
            continue
        gaps[n] = abs(float((pi * C).sum()) - target)
    got = abs(float((plan.pi * C).sum()) - target)
    assert got == min(gaps.values())


def test_dppo_generates_everything_and_its_design_is_exact():
    pop = _population()
    res = run_audit(pop, rows=["dppo"], config=AuditConfig(budget_ratio=0.5, pi_min=0.1),
                    n_draws=0)
    assert res.rows[0].metrics["tokens_exact"] == pytest.approx(1.0, abs=1e-12)
    d = cr.PrunedBernoulli(0.5, np.array([0.5, 1.0, 0.25]))
    masks, probs = d.support()
    joint = np.einsum("k,ki,kj->ij", probs, masks.astype(float), masks.astype(float))
    np.testing.assert_allclose(d.joint(), joint, rtol=0, atol=1e-15)
    assert d.inclusion([0, 1, 2]) == pytest.approx(0.5 * 0.5 * 1.0 * 0.25, abs=1e-15)
    draws = d.sample(0, size=40000)
    np.testing.assert_allclose(draws.mean(axis=0), d.pi, atol=0.015)  # 5 sigma at n = 4e4
