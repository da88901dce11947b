"""The Godambe-Joshi bound: below every unbiased prefix row under the model, attained by the
difference estimator with hindsight-perfect predictions."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.audit import AuditConfig, run_audit, synthetic_population, with_predictions
from pairht.audit.bounds import independent_directions, neyman_bound
from pairht.estimators.difference import target_coefficients

PREFIX_ROWS = ["uniform_ht", "srswor", "pair", "pair_batch", "pair_strata", "pair_dr"]


@pytest.fixture(scope="module")
def model_pop():
    return independent_directions(synthetic_population(6, 6, prefix_tokens=32, rng=4))


def _mse(res, key):
    return res.row(key).per_prompt["mse_exact"]


@pytest.mark.parametrize("budget", [0.25, 0.5])
def test_no_unbiased_prefix_row_goes_below_the_bound(model_pop, budget):
    cfg = AuditConfig(budget_ratio=budget)
    lo = neyman_bound(model_pop, budget).sum()
    for mode in ("stored", "hindsight"):
        res = run_audit(with_predictions(model_pop, mode), PREFIX_ROWS, cfg, n_draws=0)
        for key in PREFIX_ROWS:
            assert _mse(res, key).sum() >= lo * (1 - 1e-9), (mode, key)
    assert neyman_bound(model_pop, budget, batch=False).sum() >= lo * (1 - 1e-12)


def test_the_difference_estimator_attains_it_with_hindsight(model_pop):
    # with a floor near zero the rule's pi is the bound's: its exact MSE under the model is
    # the bound (the floor's candidates, whose terms are zero, cost a sliver of the budget)
    cfg = AuditConfig(budget_ratio=0.5, pi_min=1e-6)
    res = run_audit(with_predictions(model_pop, "hindsight"), ["pair_dr"], cfg, n_draws=0)
    got, lo = _mse(res, "pair_dr").sum(), neyman_bound(model_pop, 0.5).sum()
    assert lo > 0
    assert lo * (1 - 1e-9) <= got <= lo * (1 + 1e-3)


def test_target_coefficients_are_the_pair_sums():
    r = np.array([1.0, 0.0, 0.0, 1.0])
    c = [sum(r[i] - r[j] for j in range(4)) / 12 for i in range(4)]
    np.testing.assert_allclose(target_coefficients(r), c)


def test_budget_is_checked(model_pop):
    with pytest.raises(ValueError, match="budget_ratio must lie in"):
        neyman_bound(model_pop, 0.0)
