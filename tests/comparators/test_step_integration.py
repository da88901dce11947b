"""The comparators run by name in ``pairht.step.plan_continuations`` and the step's exact
joints are the ones each comparator means."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.comparators import COMPARATORS
from pairht.step import ALLOCATORS, StepInputs, allocator_names, plan_continuations


def _inputs():
    rng = np.random.default_rng(5)
    B, G = 3, 5
    fin = np.zeros((B, G), dtype=bool)
    fin[1, 0] = True
    c = rng.uniform(10, 40, size=(B, G))
    c[fin] = 0.0
    return StepInputs.from_ratio(
        rng.random((B, G)), c, fin, budget_ratio=0.5,
        history={"successes": np.array([1, 4, 7]), "trials": np.array([8, 8, 8])})


def test_every_comparator_is_in_the_step_registry():
    names = allocator_names()
    for name, obj in COMPARATORS.items():
        assert name in names and ALLOCATORS[name] is obj


@pytest.mark.parametrize("name", ["vip", "hora", "duet"])
def test_step_joint_is_the_comparators_srswor_joint(name):
    inputs = _inputs()
    plan = plan_continuations(inputs, allocator=name, rng=0, rollout_budget=7)
    np.testing.assert_allclose(plan.pi, plan.pi_alloc, rtol=0, atol=1e-12)
    np.testing.assert_allclose(plan.joint, plan.info["joint"], rtol=0, atol=1e-12)
    unf = ~inputs.finished
    np.testing.assert_array_equal((plan.selected & unf).sum(axis=1), plan.info["k"])


@pytest.mark.parametrize("name", ["dppo", "pair_joint"])
def test_step_runs_the_other_comparators_by_name(name):
    inputs = _inputs()
    plan = plan_continuations(inputs, allocator=name, rng=0)
    assert np.all(plan.selected[inputs.finished])
    if name == "dppo":
        np.testing.assert_allclose(plan.joint, plan.info["joint"], rtol=0, atol=1e-12)
    else:  # one budget for the batch, then PAIR's default design (the step's "pair" rule)
        assert plan.design == "conditional_poisson" and "pi_lo" in plan.info
        assert plan.metrics["expected_suffix_cost"] <= plan.metrics["budget"] * (1 + 1e-6)


def test_a_size_is_refused_by_a_prompt_level_comparator():
    with pytest.raises(ValueError, match="size must be None for allocator 'vip'"):
        plan_continuations(_inputs(), allocator="vip", rng=0, size=2)


def test_an_unknown_option_is_refused_not_ignored():
    with pytest.raises(TypeError, match="rollout_budgte"):
        plan_continuations(_inputs(), allocator="hora", rng=0, rollout_budgte=3)


def test_the_registry_is_complete_on_first_read_in_a_fresh_process():
    """``ALLOCATORS`` lists the comparators without a call to allocator_names() first, and
    importing the step alone does not import the comparators (imports run one way)."""
    import subprocess
    import sys

    code = ("import sys; from pairht.step import ALLOCATORS; "
            "assert 'pairht.comparators' not in sys.modules; "
            "assert 'vip' in ALLOCATORS; print(sorted(ALLOCATORS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert {"vip", "hora", "duet", "dppo", "pair_joint", "pair", "srswor"} <= set(eval(out))
