"""Fuzz the framework-neutral step: bad inputs refused by name; valid plans are exact.

A valid plan is checked for what the estimators rely on: ``pi`` in [0, 1] with finished
candidates at 1, the predicted cost of the unfinished ones within the budget (relative 1e-9,
the solver's feasibility tolerance is far below), a joint matrix that is symmetric with ``pi``
on its diagonal and inside the Frechet bounds (to 1e-9, as the estimators check), every
finished candidate selected, and advantages computable from ``selected`` and ``joint``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pairht import pair_advantages
from pairht.step import StepInputs, plan_continuations

from ._fuzz import PROB_BAD, REAL_BAD, corrupt, fuzz_settings, raises_naming

pytestmark = pytest.mark.fuzz_long

P_HAT = np.array([[0.2, 0.9, 0.5, 0.7], [0.1, 0.4, 0.6, 0.8]])
C_HAT = np.array([[40.0, 30.0, 10.0, 20.0], [15.0, 25.0, 35.0, 45.0]])
FINISHED = np.array([[False, True, False, False], [False, False, False, False]])
BUDGET = np.array([30.0, 60.0])

CASES = [
    ("p_hat", PROB_BAD, lambda v: StepInputs(v, C_HAT, FINISHED, BUDGET)),
    # no finished candidate: a finished one's c_hat is never read (it may be NaN)
    ("c_hat", REAL_BAD, lambda v: StepInputs(P_HAT, v, np.zeros_like(FINISHED), BUDGET)),
    ("budget", (*REAL_BAD, "negative"), lambda v: StepInputs(P_HAT, C_HAT, FINISHED, v)),
]
GOOD = {"p_hat": P_HAT, "c_hat": C_HAT, "budget": BUDGET}


@pytest.mark.parametrize(("arg", "kinds", "call"), CASES, ids=[c[0] for c in CASES])
@fuzz_settings(10)
@given(data=st.data())
def test_step_inputs_refuse_bad_arrays_by_name(arg, kinds, call, data):
    kind = data.draw(st.sampled_from(kinds), label="kind")
    raises_naming(arg, lambda: call(corrupt(kind, GOOD[arg], data)))


@pytest.mark.parametrize("value", [[[0, 2, 0, 0]] * 2, "yes", None, [[False] * 3] * 2],
                         ids=repr)
def test_step_inputs_refuse_a_bad_finished_mask_by_name(value):
    raises_naming("finished", lambda: StepInputs(P_HAT, C_HAT, value, BUDGET))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"pi_min": np.nan}, "pi_min"), ({"pi_min": 1.5}, "pi_min"), ({"pi_min": "0.1"}, "pi_min"),
     ({"allocator": "nope"}, "allocator"), ({"rng": -5}, "rng"), ({"rng": "x"}, "rng")],
    ids=repr,
)
def test_plan_refuses_bad_options_by_name(kwargs, name):
    inputs = StepInputs(P_HAT, C_HAT, FINISHED, BUDGET)
    kw = {"rng": 0, **kwargs}
    raises_naming(name, lambda: plan_continuations(inputs, **kw))


@st.composite
def step_inputs(draw):
    b, g = draw(st.integers(1, 3)), draw(st.integers(2, 6))
    p = draw(hnp.arrays(np.float64, (b, g), elements=st.floats(0.0, 1.0)))
    c = draw(hnp.arrays(np.float64, (b, g), elements=st.floats(1.0, 100.0)))
    fin = draw(hnp.arrays(np.bool_, (b, g)))
    ratio = draw(st.floats(0.2, 1.0))
    return StepInputs.from_ratio(p, c, fin, budget_ratio=ratio)


@fuzz_settings(15)
@given(inputs=step_inputs(), allocator=st.sampled_from(["pair", "uniform", "full"]),
       seed=st.integers(0, 2**32 - 1))
def test_valid_plans_are_feasible_with_an_admissible_joint(inputs, allocator, seed):
    plan = plan_continuations(inputs, allocator=allocator, rng=seed, pi_min=0.05)
    pi, joint, fin = plan.pi, plan.joint, inputs.finished
    assert np.all((pi >= 0.0) & (pi <= 1.0)) and np.all(pi[fin] == 1.0)
    cost = np.where(fin, 0.0, np.nan_to_num(inputs.c_hat) * pi).sum(axis=1)
    if allocator != "full":  # "full" continues everything: the reference, not budgeted
        assert np.all(cost <= inputs.budget * (1.0 + 1e-9) + 1e-12), (cost, inputs.budget)
    assert np.array_equal(joint, np.swapaxes(joint, 1, 2))
    np.testing.assert_array_equal(np.diagonal(joint, axis1=1, axis2=2), pi)
    lo = np.maximum(pi[:, :, None] + pi[:, None, :] - 1.0, 0.0)
    hi = np.minimum(pi[:, :, None], pi[:, None, :])
    assert np.all(joint >= lo - 1e-9) and np.all(joint <= hi + 1e-9)
    assert np.all(plan.selected[fin])
    rewards = np.where(plan.selected, 1.0, np.nan)
    adv = pair_advantages(rewards, plan.selected, joint)  # the estimators accept the plan
    assert np.all(adv[~plan.selected] == 0.0)
