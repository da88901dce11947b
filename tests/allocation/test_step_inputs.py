"""The budget's two forms on ``StepInputs``: the one given is kept exactly, the other derived
once, and no rule of the step converts the budget back into the form it came from."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pairht.allocation.inputs import StepInputs
from pairht.step import StepInputs as PublicStepInputs
from pairht.step import plan_continuations, plan_step, shrink_predictions

RNG = np.random.default_rng(11)
P = RNG.random((5, 6))
C = RNG.uniform(3.0, 70.0, (5, 6))
FIN = RNG.random((5, 6)) < 0.3
FIN[4] = True  # a group with nothing left to pay for


def test_the_step_exports_the_one_class():
    assert PublicStepInputs is StepInputs


@pytest.mark.parametrize("ratio", [0.1, 1.0 / 3.0, 0.55, 0.7, 1.0, 1.5])
def test_from_ratio_keeps_the_ratio_and_derives_the_tokens_once(ratio):
    x = StepInputs.from_ratio(P, C, FIN, ratio)
    full = np.where(FIN, 0.0, C).sum(axis=1)
    assert np.array_equal(x.budget_ratio, np.full(5, ratio))        # bit for bit, as given
    assert np.array_equal(x.budget, ratio * full)                   # derived once
    assert np.array_equal(x.share, np.minimum(1.0, np.full(5, ratio)))


def test_tokens_keep_the_tokens_and_derive_the_ratio_once():
    full = np.where(FIN, 0.0, C).sum(axis=1)
    budget = np.array([10.0, 20.0, 30.0, 40.0, 7.0])
    x = StepInputs(P, C, FIN, budget)
    assert np.array_equal(x.budget, budget)
    live = full > 0
    assert np.array_equal(x.budget_ratio[live], budget[live] / full[live])
    assert x.budget_ratio[4] == 1.0 and x.share[4] == 1.0  # all finished: nothing to pay for


def test_replace_passes_both_forms_and_they_must_agree():
    x = StepInputs.from_ratio(P, C, FIN, 0.4)
    y = dataclasses.replace(x, p_hat=np.clip(P + 0.01, 0.0, 1.0))  # same costs: both agree
    assert np.array_equal(y.budget_ratio, x.budget_ratio) and np.array_equal(y.budget, x.budget)
    with pytest.raises(ValueError, match=r"budget and budget_ratio disagree: give one.*"
                       r"StepInputs\.with_budget"):
        dataclasses.replace(x, budget=x.budget + 1.0)
    z = x.with_budget(x.budget + 1.0)
    assert np.array_equal(z.budget, x.budget + 1.0)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, r"budget or budget_ratio is required"),
    ({"budget_ratio": -0.1}, r"budget_ratio must be >= 0 \(a fraction of the cost\); got min "
                             r"-0\.1"),
    ({"budget_ratio": [0.5, 0.5]}, r"budget_ratio must have shape \(B,\) = \(5,\)"),
    ({"budget_ratio": np.nan}, r"budget_ratio"),
    ({"budget": -1.0}, r"budget must be >= 0 \(suffix tokens\)"),
])
def test_a_bad_budget_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StepInputs(P, C, FIN, **kwargs)


def test_shrinking_keeps_the_ratio_bit_for_bit():
    x = StepInputs.from_ratio(P, C, FIN, 1.0 / 3.0)
    y = shrink_predictions(x, 0.3, 0.2)
    assert np.array_equal(y.budget_ratio, x.budget_ratio)
    assert np.array_equal(y.budget, x.budget_ratio * y.full_cost)
    t = StepInputs(P, C, FIN, [10.0, 20.0, 30.0, 40.0, 7.0])
    assert shrink_predictions(t, 0.0, 0.0).budget[4] == 7.0  # nothing to pay: tokens kept


def test_a_ratio_reaches_the_uniform_rules_unconverted():
    # ratio 0.49 of 7 unit-cost candidates: 0.49 * 7 / 7 is not 0.49 in floating point, so a
    # round trip through the tokens would move pi by an ulp; the carried ratio does not.
    assert (0.49 * 7.0) / 7.0 != 0.49
    x = StepInputs.from_ratio(np.full((1, 7), 0.5), np.ones((1, 7)), np.zeros((1, 7), bool),
                              0.49)
    for name, size in (("uniform", None), ("srswor", None), ("pair", None)):
        plan = plan_continuations(x, allocator=name, size=size, rng=0)
        assert np.all(plan.pi_alloc == 0.49), name
    whole = plan_step(width="whole", n_groups=2, group_size=7, whole_group_size=3.43,
                      budget_ratio=0.49, rng=0)
    assert np.all(whole.continuation.pi_alloc == 3.43 / 7.0)  # the rule's pi, before the draw


@pytest.mark.parametrize("allocator", ["pair", "uniform", "pointwise", "pair_strata",
                                       "pair_dr", "pair_batch"])
def test_a_ratio_and_its_tokens_plan_the_same_step(allocator):
    # the tokens are the ratio's derived form: the plans agree to rounding (1e-12: the
    # ratio read back from the tokens differs from the given one in the last bit)
    r = StepInputs.from_ratio(P, C, FIN, 0.45)
    t = StepInputs(P, C, FIN, r.budget)
    a = plan_continuations(r, allocator=allocator, rng=3)
    b = plan_continuations(t, allocator=allocator, rng=3)
    np.testing.assert_allclose(a.pi, b.pi, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.joint, b.joint, rtol=0, atol=1e-12)
