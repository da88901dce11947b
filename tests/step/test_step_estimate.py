"""pairht.step's two calls on their own (numpy only): ``plan_step`` at every width and
``estimate`` with every registered estimator, checked against the core's formulas computed
here, and the plan's per-row form."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.comparators import dppo_design, dppo_keep_probabilities, dppo_sample
from pairht.estimators import difference_advantages, pair_advantages, prediction_baselines
from pairht.step import (
    ESTIMATORS,
    WIDTHS,
    StepPlan,
    estimate,
    plan_step,
    prefix_candidates,
    standardise,
)
from pairht.step.subset import take

B, G = 3, 6


def _plan(width: str, allocator: str = "pair", seed: int = 0) -> tuple[StepPlan, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.1, 0.9, (B, G))
    c = rng.uniform(20.0, 200.0, (B, G))
    done = rng.random((B, G)) < 0.2
    cands = prefix_candidates(width, B, G, prefix_group_size=4, rng=rng)
    plan = plan_step(p, c, done, budget_ratio=0.5, width=width, subset=cands, n_groups=B,
                     group_size=G, whole_group_size=3, allocator=allocator, rng=rng,
                     prefix_tokens=rng.integers(1, 9, (B, G)))
    rewards = np.where(plan.selected, rng.integers(0, 2, (B, G)).astype(float), np.nan)
    return plan, rewards


@pytest.mark.parametrize("width", WIDTHS)
def test_ht_estimate_is_pair_advantages_of_the_plans_design(width):
    plan, r = _plan(width)
    est = estimate(plan, r)
    assert est.estimator == "ht" and np.array_equal(est.mask, plan.selected)
    np.testing.assert_allclose(est.advantages, pair_advantages(r, plan.selected, plan.joint),
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize("width", ["prefixes", "subset"])
def test_difference_estimate_is_the_difference_estimator_on_the_rules_design(width):
    plan, r = _plan(width, allocator="pair_dr")
    est = estimate(plan, r)
    assert plan.estimator == est.estimator == "difference"
    base = prediction_baselines(plan.p_hat, r, plan.finished)
    if plan.subset is None:
        want = difference_advantages(r, plan.selected, plan.joint, base)
        np.testing.assert_allclose(est.advantages, want, rtol=0, atol=1e-15)
    else:  # the subset's block with the rule's own rho|S; nothing off the subset
        S = plan.subset
        want = difference_advantages(take(r, S), take(plan.selected, S), plan.inner_joint,
                                     take(base, S))
        np.testing.assert_allclose(take(est.advantages, S), want, rtol=0, atol=1e-15)
        off = np.ones((B, G), bool)
        off[np.arange(B)[:, None], S] = False
        assert np.all(est.advantages[off] == 0)


def test_dppo_estimate_prunes_with_its_generator_and_weighs_by_the_pruning_design():
    plan, r = _plan("prefixes", allocator="dppo")
    assert plan.estimator == "dppo" and plan.selected.all()
    est = estimate(plan, r, rng=np.random.default_rng(7))
    q, o = dppo_keep_probabilities(pair_advantages(r, plan.selected, plan.joint))
    pi, joint = dppo_design(q, o)
    kept = dppo_sample(q, o, np.random.default_rng(7))
    assert np.array_equal(est.mask, kept) and np.array_equal(est.joint, joint)
    assert np.array_equal(est.pi, pi)
    np.testing.assert_allclose(est.advantages, pair_advantages(r, kept, joint), rtol=0,
                               atol=1e-15)
    assert est.logged["dppo_kept_fraction"] == kept.mean()
    assert ESTIMATORS.capabilities("dppo").post_reward_design


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_rows_round_trip_gives_the_same_estimate(width):
    plan, r = _plan(width, allocator="pair_dr" if width != "whole" else "pair")
    rows = plan.as_rows()
    assert all(len(v) == B * G for v in rows.values())
    back = StepPlan.from_rows(rows, G)
    for name in ("pi", "selected", "joint", "pi_alloc", "p_hat", "finished", "budget"):
        assert np.array_equal(getattr(back, name), getattr(plan, name)), name
    assert (back.estimator, back.width) == (plan.estimator, plan.width)
    if plan.subset is not None:
        assert np.array_equal(back.subset, plan.subset)
        assert np.array_equal(back.inner_joint, plan.inner_joint)
    np.testing.assert_array_equal(estimate(back, r).advantages, estimate(plan, r).advantages)


def test_group_standardisation_divides_by_each_groups_sample_std():
    a = np.array([[1.0, -1.0, 0.0], [2.0, 0.0, -2.0]])
    r = np.array([[1.0, 0.0, np.nan], [3.0, 1.0, 2.0]])
    m = ~np.isnan(r)
    std = np.array([[np.std([1.0, 0.0], ddof=1)], [np.std([3.0, 1.0, 2.0], ddof=1)]])
    np.testing.assert_allclose(standardise(a, r, m, "group"), a / (std + 1e-4), rtol=1e-15)
    flat = np.std(r[m], ddof=1)
    np.testing.assert_allclose(standardise(a, r, m, "batch"), a / (flat + 1e-4), rtol=1e-15)
    assert np.array_equal(standardise(a, r, m, "none"), a)
    with pytest.raises(ValueError, match="scale_rewards must be 'none', 'group' or 'batch'"):
        standardise(a, r, m, "std")


def test_bad_input_names_the_argument_and_the_rule():
    plan, r = _plan("prefixes", allocator="pair_dr")
    with pytest.raises(ValueError, match=r"estimator must be one of \[.*'ht'.*\]; got 'nope'"):
        estimate(plan, r, estimator="nope")
    with pytest.raises(ValueError, match="estimator 'difference' has exact weights only"):
        estimate(plan, r, weighting="hajek")
    with pytest.raises(ValueError, match=r"rewards must have the plan's shape \(B, G\)"):
        estimate(plan, r[:, :2])
    with pytest.raises(ValueError, match="width must be one of"):
        plan_step(budget_ratio=0.5, width="all", rng=0)
    with pytest.raises(ValueError, match="group_size must be >= 2 and divide"):
        StepPlan.from_rows(plan.as_rows(), 4)
