"""``min_rollouts`` of VIP and DUET (as HORA's): at least ``min(U_b, m)`` continuations per
prompt even when finished candidates already fill ``min_group``. With ``m >= 1`` every pair
is observable (``rho_ij > 0``: one continuation is drawn Bernoulli(1/U_b), two or more by
SRSWOR) and the pair-HT estimator is exactly unbiased. The allocator objects default to
``m = 1``; ``m = 0`` (the rules as read from the papers) is passed explicitly here, and the
planners refuse the plan it leaves with a prompt of no continuation."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from pairht.comparators import (
    COMPARATORS,
    comparator_plan,
    hora_extra_rollouts,
    proportional_counts,
    vip_group_sizes,
)
from pairht.step import StepInputs


def _inputs():
    fin = np.array([[True, True, False, False, False],
                    [False, False, False, False, False],
                    [True, True, True, False, False]])
    return StepInputs(p_hat=np.array([[0.9] * 5, [0.5] * 5, [0.99] * 5]),
                      c_hat=np.full((3, 5), 10.0), finished=fin,
                      budget=np.full(3, 15.0),
                      history={"successes": np.array([9.0, 4.0, 10.0]),
                               "trials": np.array([10.0, 8.0, 10.0])})


@pytest.mark.parametrize("name", ["vip", "duet"])
def test_min_rollouts_two_gives_every_prompt_a_pair_of_continuations(name):
    inp = _inputs()
    U = (~inp.finished).sum(axis=1)
    _, base = COMPARATORS[name].pi(inp, rollout_budget=6, min_rollouts=0)
    # without it the finished pairs fill min_group = 2: some prompt gets k < min(2, U)
    assert np.any(base["k"] < np.minimum(2, U))
    # a pair is unobservable exactly where a prompt gets no continuation (VIP's prompt 2)
    np.testing.assert_array_equal(base["all_pairs_positive"], base["k"] >= np.minimum(1, U))
    if name == "vip":
        assert base["k"][2] == 0 and not base["all_pairs_positive"][2]
    _, info = COMPARATORS[name].pi(inp, rollout_budget=6, min_rollouts=2)
    assert np.all(info["k"] >= np.minimum(2, U))
    assert info["all_pairs_positive"].all()
    assert info["k"].sum() == 6
    # the default, min_rollouts=1: every prompt continues at least one, every pair positive
    _, default = COMPARATORS[name].pi(inp, rollout_budget=6)
    assert np.all(default["k"] >= np.minimum(1, U)) and default["all_pairs_positive"].all()
    assert default["k"].sum() == 6
    if name == "vip":
        assert default["k"][2] == 1
        # what min_rollouts=0 leaves (prompt 2: k = 0 of U = 2) the planner refuses
        with pytest.raises(ValueError, match=r"allocator 'vip' continues k_b = 0 of the U_b = 2 "
                           r"unfinished candidates of prompt b = 2: .*min_rollouts >= 1"):
            comparator_plan(inp, name, rng=0, rollout_budget=6, min_rollouts=0)


@pytest.mark.parametrize("name", ["vip", "hora", "duet"])
def test_the_step_allocators_default_to_one_rollout_and_the_published_rules_to_none(name):
    """``.pi()`` of the step's allocator objects defaults to ``min_rollouts=1``; the
    underlying published rule (``vip_group_sizes``, ``hora_extra_rollouts``,
    ``proportional_counts``) keeps its own default."""
    sig = inspect.signature(COMPARATORS[name].pi)
    assert sig.parameters["min_rollouts"].default == 1
    assert inspect.signature(vip_group_sizes).parameters["min_rollouts"].default == 0
    for rule in (hora_extra_rollouts, proportional_counts):
        assert inspect.signature(rule).parameters["lower"].default is None


def test_vip_min_rollouts_is_the_exact_optimum_over_the_raised_floor():
    """Brute force over every allocation with k_b >= min(U_b, 2) and sum k = N."""
    p = np.array([0.5, 0.9, 0.2])
    F, U, N = np.array([2, 0, 1]), np.array([3, 4, 3]), 7
    k = vip_group_sizes(p, F, U, N, min_rollouts=2)  # the default variance shape, RLOO's
    w = p * (1 - p)
    best, arg = np.inf, None
    for a in range(2, 4):
        for b in range(2, 5):
            c = N - a - b
            if 2 <= c <= 3:
                v = (w / (F + np.array([a, b, c]) - 1.0)).sum()
                if v < best - 1e-15:
                    best, arg = v, [a, b, c]
    assert k.tolist() == arg
    with pytest.raises(ValueError, match="min_rollouts must be an int >= 0"):
        vip_group_sizes(p, F, U, N, min_rollouts=-1)
