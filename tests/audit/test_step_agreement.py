"""The audit's allocation rules are the step's (``pairht.step.ALLOCATORS``), computed another way.

The audit solves PAIR's program over the unfinished candidates exactly (finished fixed at 1,
their edges folded into ``b``); the step embeds the whole group with finished candidates at a
negligible cost. Both must give the same probabilities: exactly where no candidate finished,
and to the embedding's precision where some did.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pairht.audit import AuditConfig, synthetic_population
from pairht.audit.allocations import allocator_pi
from pairht.step import ALLOCATORS, StepInputs


def _population(with_finished: bool):
    pop = synthetic_population(6, 8, calibration="noisy", rng=21)
    if not with_finished:
        return pop
    fin = np.zeros((6, 8), dtype=bool)
    fin[0, [0, 3]] = fin[2, [1, 2, 5]] = fin[4, 7] = True
    return dataclasses.replace(pop, finished=fin)


@pytest.mark.parametrize("with_finished", [False, True])
@pytest.mark.parametrize("name", ["uniform", "srswor", "pointwise", "pair"])
def test_audit_allocations_equal_the_step_allocators(name, with_finished):
    pop = _population(with_finished)
    cfg = AuditConfig(budget_ratio=0.4, pi_min=0.08)
    fin = np.zeros(pop.p_hat.shape, dtype=bool) if pop.finished is None else pop.finished
    inputs = StepInputs.from_ratio(pop.p_hat, pop.c_hat, fin, budget_ratio=0.4)
    want, _ = ALLOCATORS[name].pi(inputs, pi_min=0.08)
    got, notes = allocator_pi(name, pop, 0.4, cfg)
    assert not notes
    # The step's solver stops at KKT residual 1e-8 (pi units) and embeds finished candidates
    # at a relative cost of 1e-9: agreement to 1e-6 in pi.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got[fin], 1.0)
