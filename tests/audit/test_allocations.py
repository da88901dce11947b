"""The audit's allocations are the step's allocators, and its ``pair`` row is the step's default.

One implementation: the audit calls :func:`pairht.step.get_allocator` on the population's
step inputs, so its probabilities equal the step's exactly (bit for bit), and the ``pair``
row's designs are those :func:`pairht.step.plan_continuations` draws by default (same pi and
joints to 1e-15: the same code on the same numbers).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pairht.audit import ROWS, AuditConfig, synthetic_population
from pairht.audit.allocations import allocation, matched_allocation, step_inputs
from pairht.step import ALLOCATORS, plan_continuations


@pytest.fixture(scope="module")
def pop():
    base = synthetic_population(6, 8, calibration="noisy", rng=21)
    fin = np.zeros((6, 8), dtype=bool)
    fin[0, [0, 3]] = fin[2, [1, 2, 5]] = fin[4, 7] = True
    fin[5, :6] = True  # two unfinished: no fixed size of two at 0.4, drawn Bernoulli
    return dataclasses.replace(base, finished=fin)


@pytest.mark.parametrize("size", [None, "auto"])
@pytest.mark.parametrize("proxy", ["disagreement", "length_energy"])
def test_pair_allocation_is_the_step_allocators(pop, size, proxy):
    cfg = AuditConfig(budget_ratio=0.4, pi_min=0.08)
    pi, info, notes = allocation("pair", pop, 0.45, cfg, proxy, size)
    want, want_info = ALLOCATORS["pair"].pi(step_inputs(pop, 0.45), pi_min=0.08, proxy=proxy,
                                            size=size)
    assert not notes
    np.testing.assert_array_equal(pi, want)
    np.testing.assert_array_equal(info["fixed_size"], want_info["fixed_size"])
    assert info["fixed_size"].sum() == (5 if size == "auto" else 0)


def test_the_pair_row_is_the_steps_default_plan(pop):
    cfg = AuditConfig(budget_ratio=0.4, pi_min=0.08)
    cache: dict = {}
    plan = ROWS["pair"].plan(pop, cfg, cache)
    _, _, scale, _ = matched_allocation("pair", pop, cfg, cache, "disagreement", "auto")
    step = plan_continuations(step_inputs(pop, scale), rng=0)
    np.testing.assert_allclose(plan.pi, step.pi, rtol=0, atol=1e-15)
    np.testing.assert_allclose(plan.joint, step.joint, rtol=0, atol=1e-15)
    # realised cost matched to the target, finished candidates free
    C = np.where(pop.finished, 0.0, pop.costs)
    np.testing.assert_allclose((plan.pi * C).sum(), 0.4 * C.sum(), rtol=1e-9)
    assert ROWS["pair"].estimator == "ht"  # plan.joint's weights, as pair_advantages uses


def test_bernoulli_pair_stays_available_under_its_name(pop):
    cfg = AuditConfig(budget_ratio=0.4, pi_min=0.08)
    plan = ROWS["pair_bernoulli"].plan(pop, cfg, {})
    pi = plan.pi
    off = ~np.eye(8, dtype=bool)
    np.testing.assert_allclose(plan.joint[:, off], (pi[:, :, None] * pi[:, None, :])[:, off],
                               rtol=0, atol=1e-15)
