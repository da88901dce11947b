"""The comparators as allocator objects: plan shapes, budget accounting, exact joints, errors."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.comparators import COMPARATORS, comparator_plan
from pairht.comparators._inputs import srswor_joint, srswor_pi
from pairht.step import StepInputs

from .helpers import moments, srswor_support


def _inputs(history=True):
    rng = np.random.default_rng(0)
    B, G = 4, 5
    fin = np.zeros((B, G), dtype=bool)
    fin[1, 0] = fin[2, :2] = True
    hist = {"successes": np.array([0, 3, 6, 2]), "trials": np.array([8, 8, 8, 4]),
            "features": rng.normal(size=(B, 3))} if history else None
    return StepInputs(p_hat=rng.random((B, G)), c_hat=rng.uniform(10, 40, size=(B, G)),
                      finished=fin, budget=np.full(B, 60.0), history=hist)


def test_every_paper_comparator_and_pair_joint_is_registered_by_name():
    assert set(COMPARATORS) == {"vip", "hora", "duet", "dppo", "pair_joint"}
    assert all(obj.name == name for name, obj in COMPARATORS.items())


@pytest.mark.parametrize("name", ["vip", "hora", "duet", "dppo", "pair_joint"])
def test_plan_is_consistent_finished_in_and_joint_diagonal_is_pi(name):
    inp = _inputs()
    plan = comparator_plan(inp, name, rng=1)
    B, G = inp.p_hat.shape
    assert plan.pi.shape == (B, G) and plan.joint.shape == (B, G, G)
    assert np.all(plan.pi[inp.finished] == 1.0) and np.all(plan.selected[inp.finished])
    np.testing.assert_array_equal(np.diagonal(plan.joint, axis1=1, axis2=2), plan.pi)
    assert np.all(plan.joint <= np.minimum(plan.pi[:, :, None], plan.pi[:, None, :]) + 1e-15)


@pytest.mark.parametrize("name", ["vip", "hora", "duet"])
def test_prompt_level_plans_continue_k_and_stay_within_the_rollout_budget(name):
    inp = _inputs()
    plan = comparator_plan(inp, name, rng=2, rollout_budget=9)
    k = plan.info["k"]
    assert k.sum() <= 9
    unf = ~inp.finished
    # k_b unfinished continued exactly, except one of U_b >= 2: Bernoulli(1/U_b) each
    bern = (k == 1) & (unf.sum(axis=1) >= 2)
    assert (~bern).any() and (bern.any() or name == "duet")  # DUET gives no prompt k = 1 here
    np.testing.assert_array_equal((plan.selected & unf).sum(axis=1)[~bern], k[~bern])
    np.testing.assert_allclose(np.where(unf, plan.pi, 0).sum(axis=1), k, rtol=0, atol=1e-12)


def test_default_rollout_budget_is_the_token_budget_at_the_mean_cost():
    inp = _inputs()
    plan = comparator_plan(inp, "duet", rng=0)
    cbar = inp.c_hat[~inp.finished].mean()
    assert plan.info["rollout_budget"] == int(np.floor(inp.budget.sum() / cbar))


def test_srswor_joint_with_finished_equals_enumeration():
    fin = np.array([[True, False, False, True, False, False]])
    for k in range(0, 5):
        kk = np.array([k])
        pi, joint = moments(srswor_support(fin[0], k), 6)
        np.testing.assert_allclose(srswor_pi(kk, fin)[0], pi, rtol=0, atol=1e-15)
        np.testing.assert_allclose(srswor_joint(kk, fin)[0], joint, rtol=0, atol=1e-15)


def test_prompt_level_comparator_without_history_raises_naming_history():
    with pytest.raises(ValueError, match=r"inputs\.history must hold per-prompt 'successes'"):
        COMPARATORS["vip"].pi(_inputs(history=False))


def test_duet_without_history_falls_back_to_p_hat():
    plan = comparator_plan(_inputs(history=False), "duet", rng=0, rollout_budget=10)
    assert plan.info["k"].sum() == 10


def test_unfinished_with_nonpositive_cost_is_refused():
    inp = _inputs()
    c = inp.c_hat.copy()
    c[0, 0] = 0.0
    with pytest.raises(ValueError, match=r"c_hat must be finite and > 0 where the candidate is "
                       r"unfinished.*c_hat\[0, 0\] = 0\.0"):
        StepInputs(inp.p_hat, c, inp.finished, inp.budget)


@pytest.mark.parametrize("name", ["vip", "hora", "duet", "dppo", "pair_joint"])
def test_a_comparator_reads_step_inputs_and_names_anything_else(name):
    inp = _inputs()
    loose = {k: getattr(inp, k) for k in ("p_hat", "c_hat", "finished", "budget", "history")}
    with pytest.raises(TypeError, match=r"inputs must be a pairht\.step\.StepInputs.*got dict"):
        COMPARATORS[name].pi(loose)
    with pytest.raises(TypeError, match=r"inputs must be a pairht\.step\.StepInputs.*got dict"):
        comparator_plan(loose, name)


def test_duet_minimum_group_counts_the_finished_candidates():
    # prompt 0 has 3 finished + 1 unfinished: its group already has 3 >= 2 members, so
    # min_group asks no continuation of it and, as read from the paper (min_rollouts=0), a
    # budget of 2 rollouts is feasible (prompt 1 takes both; prompt 0 gets k = 0, reported)
    fin = np.array([[True, True, True, False], [False, False, False, False]])
    inp = StepInputs(p_hat=np.full((2, 4), 0.5), c_hat=np.where(fin, 0.0, 50.0),
                     finished=fin, budget=np.array([25.0, 75.0]), history=None)
    _, info = COMPARATORS["duet"].pi(inp, min_rollouts=0)
    assert info["rollout_budget"] == 2 and info["k"].tolist() == [0, 2]
    assert info["all_pairs_positive"].tolist() == [False, True]
    # the default (min_rollouts=1) also gives prompt 0 one continuation: 1 + 2 = 3 > 2 refused
    with pytest.raises(ValueError, match="budget infeasible: the per-prompt minimums need 3 "
                       "rollouts but the budget is 2"):
        COMPARATORS["duet"].pi(inp)
    _, info = COMPARATORS["duet"].pi(inp, rollout_budget=3)
    assert info["k"].tolist() == [1, 2] and info["all_pairs_positive"].all()
