"""Audit rows claimed unbiased, on prompts with 0, 1, G - 2, G - 1 and G finished candidates.

The audit's exact bias (``bias_exact``) of every row with ``unbiased = True`` is 0, and for
the vertex rows (pair-HT, conditional pair-HT, difference estimator) and the comparator rows it
is checked against an enumeration done here: every sample of the row's design with its
probability (the comparators' SRSWOR of ``k_b`` unfinished candidates written out, not read
from the design), the support's moments equal to the plan's ``pi`` and ``rho``, and the
estimate's exact mean equal to the complete pair target. Tolerance: 1e-12 relative to the
largest estimate over the support (float64 sums of at most 2**5 terms).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pairht.audit import ROWS, AuditConfig, run_audit, synthetic_population
from pairht.audit import comparator_rows as cr
from pairht.estimators import difference_advantages, pair_estimate, pair_gradient
from shared import bernoulli_support, srswor_support

G = 5
FINISHED_COUNTS = (0, 1, G - 2, G - 1, G)
UNBIASED = [k for k, r in ROWS.items() if r.unbiased]
ENUMERATED = [k for k in UNBIASED
              if ROWS[k].estimator in ("ht", "conditional_ht", "difference")
              and k not in ("grpo_small", "dppo")]


@pytest.fixture(scope="module")
def pop():
    """One prompt per finished count (positions random), noisy predictions, 3-d scores."""
    base = synthetic_population(len(FINISHED_COUNTS), G, rng=7, calibration="noisy",
                                score_dim=3)
    rng = np.random.default_rng(7)
    fin = np.zeros((len(FINISHED_COUNTS), G), dtype=bool)
    for q, n in enumerate(FINISHED_COUNTS):
        fin[q, rng.choice(G, size=n, replace=False)] = True
    return dataclasses.replace(base, finished=fin)


@pytest.fixture(scope="module")
def cfg():
    return AuditConfig(budget_ratio=0.4, pi_min=0.1, seed=3, enum_limit=2**G)


@pytest.fixture(scope="module")
def audit(pop, cfg):
    return run_audit(pop, UNBIASED, cfg, n_draws=0)


@pytest.mark.parametrize("key", UNBIASED)
def test_every_row_claimed_unbiased_has_zero_exact_bias(audit, key):
    row = audit.row(key)
    assert row.ok, row.status
    assert row.metrics["bias_exact"] <= 1e-12


def _written_out_srswor(pi_row, fin):
    """SRSWOR of k = sum(pi_u) unfinished candidates (finished in), or Bernoulli(pi) below a
    size of two: every sample and its probability."""
    unf = np.flatnonzero(~fin)
    k = round(float(pi_row[unf].sum())) if unf.size else 0
    if unf.size and k < 2:
        return bernoulli_support(pi_row)
    return srswor_support(fin, k)


@pytest.mark.parametrize("key", ENUMERATED)
def test_the_unbiased_vertex_rows_by_enumeration_of_their_designs(pop, cfg, key):
    row = ROWS[key]
    plan = row.plan(pop, cfg, {})
    L = pop.reduced_scores()
    g = pair_gradient(pop.rewards, L)
    for q, design in enumerate(plan.designs):
        fin = pop.finished[q]
        if isinstance(row, cr.ComparatorRow):  # min_rollouts = 2: k_b >= min(2, U_b)
            masks, probs = _written_out_srswor(plan.pi[q], fin)
        else:
            masks, probs = design.support(max_units=G)
        assert probs.sum() == pytest.approx(1.0, abs=1e-13)
        assert masks[:, fin].all()
        m = masks.astype(float)
        np.testing.assert_allclose(probs @ m, plan.pi[q], rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.einsum("k,ki,kj->ij", probs, m, m), plan.joint[q],
                                   rtol=0, atol=1e-12)
        if row.estimator == "difference":
            base = np.where(fin, pop.rewards[q], pop.p_hat[q])
            est = np.stack([difference_advantages(pop.rewards[q], s, plan.joint[q], base) @ L[q]
                            for s in masks])
        elif row.estimator == "conditional_ht" and hasattr(design, "components"):
            comps = {round(float(c.pi.sum())): c for c in design.components if c is not None}
            est = np.stack([pair_estimate(pop.rewards[q], L[q], s,
                                          joint=comps[int(s.sum())].joint()) for s in masks])
        else:
            est = np.stack([pair_estimate(pop.rewards[q], L[q], s, joint=plan.joint[q])
                            for s in masks])
        scale = max(float(np.abs(est).max()), float(np.abs(g[q]).max()), 1e-300)
        np.testing.assert_allclose(probs @ est, g[q], rtol=0, atol=1e-12 * scale)


def test_the_population_has_every_finished_count(pop):
    assert pop.finished.sum(axis=1).tolist() == list(FINISHED_COUNTS)
