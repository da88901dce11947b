"""One budget for the batch cannot lose to each prompt at its own: ``pair_batch`` and
``pair_joint`` have at most per-prompt ``pair``'s exact MSE at equal realised tokens, on a
rare-outcome population where the plain batch split loses (the excess on the prompts with 1-3
successes or failures) and on a SmolLM2 population (docs/step.md, "One budget for the batch").
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import pairht.comparators.joint as joint
from pairht.audit import AuditConfig, load_population, run_audit

from .conftest import rare_outcome_population

DATA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks", "data")
#: Floating point only: where the robust move is lambda* = 0 the batch rows run pair's own
#: budgets, program and designs, so their exact MSE equals pair's to rounding.
TOL = 1e-9
ROWS = ["pair", "pair_batch", "pair_joint"]


@pytest.fixture(scope="module")
def rare_pop():
    """24 prompts x 12: 40% with a rare outcome, the head near-certain they agree."""
    return rare_outcome_population(24, 12, seed=0)


@pytest.fixture(scope="module")
def smollm2_pop():
    return load_population(os.path.join(DATA, "smollm2_arith_tau8_small.npz"))


def _mse(pop, rows, budget):
    res = run_audit(pop, rows=rows, config=AuditConfig(budget_ratio=budget), n_draws=0)
    return {k: res.row(k).per_prompt["mse_exact"] for k in rows}


def _rare(pop):
    s, G = pop.rewards.sum(axis=1), pop.group_size
    return ((s >= 1) & (s <= 3)) | ((s >= G - 3) & (s <= G - 1))


@pytest.mark.parametrize("budget", [0.25, 0.5])
def test_batch_rules_never_lose_to_per_prompt_pair_on_the_rare_outcome_population(
        rare_pop, budget):
    m = _mse(rare_pop, ROWS, budget)
    pair = m["pair"].mean()
    assert m["pair_batch"].mean() <= pair * (1 + TOL)
    assert m["pair_joint"].mean() <= pair * (1 + TOL)


@pytest.mark.parametrize("budget", [0.25, 0.5])
def test_the_plain_batch_split_loses_there_on_the_rare_outcome_prompts(rare_pop, budget,
                                                                       monkeypatch):
    """The population shows the issue: without the rate prior and the robust move (kappa 1)
    the split starves the prompts with a rare outcome and loses to per-prompt ``pair``."""
    monkeypatch.setattr(joint, "KAPPA", 1.0)
    monkeypatch.setattr(joint, "RATE_PRIOR", 0.0)
    m = _mse(rare_pop, ["pair", "pair_batch"], budget)
    assert m["pair_batch"].mean() > 1.05 * m["pair"].mean()
    rare = _rare(rare_pop)
    assert m["pair_batch"][rare].sum() > 1.5 * m["pair"][rare].sum()


@pytest.mark.parametrize("budget", [0.25, 0.5])
def test_batch_rules_never_lose_to_per_prompt_pair_on_smollm2(smollm2_pop, budget):
    m = _mse(smollm2_pop, ROWS, budget)
    pair = m["pair"].mean()
    assert m["pair_batch"].mean() <= pair * (1 + TOL)
    assert m["pair_joint"].mean() <= pair * (1 + TOL)
    assert np.all(np.isfinite(m["pair_joint"]))
