"""Two-stage rows: prefixes for a uniform subset only, then an inner prefix row among them."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from pairht.audit import ROWS, AuditConfig, run_audit, synthetic_population, with_predictions
from pairht.audit.base import whole_tokens
from pairht.audit.exact import difference_baselines
from pairht.audit.two_stage import (
    narrow_width,
    plan_two_stage,
    whole_group_ratio,
    width_budget,
)
from pairht.estimators import difference_advantages, pair_gradient


@pytest.fixture(scope="module")
def tiny():
    """P = 3, G = 6, some prefixes finished, noisy heads: small enough to enumerate every
    subset and every Bernoulli outcome within it."""
    pop = synthetic_population(3, 6, calibration="noisy", prefix_tokens=8, rng=11)
    fin = np.zeros((3, 6), dtype=bool)
    fin[0, [2]] = fin[1, [0, 5]] = True
    return dataclasses.replace(pop, finished=fin)


def brute_force(pop, cfg, width):
    """Mean and MSE of the two-stage ``pair_dr`` estimate by enumerating every subset and
    every outcome of the inner Bernoulli draw (an independent path: estimates from
    :func:`pairht.estimators.difference_advantages`, probabilities multiplied out)."""
    ts = plan_two_stage(pop, cfg, width, ROWS["pair_dr"])
    L = pop.reduced_scores()
    g = pair_gradient(pop.rewards, L)
    base = difference_baselines(ts.sub)
    n = ts.n_subsets
    mean = np.zeros_like(g)
    mse = np.zeros(pop.n_prompts)
    for q in range(pop.n_prompts):
        for s, S in enumerate(ts.subsets):
            k = q * n + s
            pi, joint, r = ts.plan.pi[k], ts.plan.joint[k], ts.sub.rewards[k]
            for bits in itertools.product((False, True), repeat=width):
                m = np.array(bits)
                prob = float(np.prod(np.where(m, pi, 1.0 - pi)))
                if prob == 0.0:
                    continue
                est = difference_advantages(np.where(m, r, 0.0), m, joint, base[k]) @ L[q][S]
                mean[q] += prob * est / n
                mse[q] += prob * float(np.sum((est - g[q]) ** 2)) / n
    return mean, mse, g


@pytest.mark.parametrize("width", [4, 5])
def test_exact_moments_match_enumerating_subsets_and_outcomes(tiny, width):
    cfg = AuditConfig(budget_ratio=0.5, pi_min=0.1)
    mean, mse, g = brute_force(tiny, cfg, width)
    np.testing.assert_allclose(mean, g, rtol=0, atol=1e-12 * np.abs(g).max())  # unbiased
    b_w = width_budget(tiny, 0.5, width)
    from pairht.audit.advice import two_stage_mse

    got, got_b = two_stage_mse(tiny, 0.5, width, row="pair_dr", pi_min=0.1)
    assert got_b == pytest.approx(b_w, rel=1e-12)
    np.testing.assert_allclose(got, mse, rtol=1e-10)
    assert np.all(mse > 0)


def test_the_row_is_unbiased_spends_grpos_tokens_and_agrees_with_its_monte_carlo(tiny):
    cfg = AuditConfig(budget_ratio=0.5, pi_min=0.1, seed=3)
    res = run_audit(tiny, rows=["pair_dr_narrow", "grpo_small"], config=cfg, n_draws=20_000)
    row, grpo = res.row("pair_dr_narrow"), res.row("grpo_small")
    assert row.ok and not row.flags, (row.status, row.flags)
    assert row.metrics["bias_exact"] <= 1e-12
    # the same expected total generated tokens as small-group GRPO (and full-width PAIR)
    assert row.metrics["generated_exact"] == pytest.approx(grpo.metrics["generated_exact"],
                                                           rel=1e-12)
    assert row.per_prompt["generated"].sum() / whole_tokens(tiny) == pytest.approx(
        row.metrics["generated_exact"], rel=1e-12)
    # the Monte Carlo replay's MSE within 5 standard errors of the exact one
    assert abs(row.metrics["mse_mc"] - row.metrics["mse_exact"]) <= 5 * row.metrics["mse_mc_se"]
    G = tiny.group_size
    w = narrow_width(G, G * whole_group_ratio(tiny, 0.5))
    assert f"width {w} of G = {G}" in row.notes[0]


def test_inclusion_is_the_subsets_share_times_the_inner_inclusion(tiny):
    """Inclusion of a candidate: P(i in S) E[pi_i(S) | i in S]; a finished one is in every
    subset that holds it, so its inclusion is exactly w / G."""
    cfg = AuditConfig(budget_ratio=0.5, pi_min=0.1)
    plan = ROWS["pair_dr_narrow"].plan(tiny, cfg, {})
    w = plan.stages.width
    assert w < tiny.group_size
    np.testing.assert_allclose(plan.pi[tiny.finished], w / tiny.group_size, rtol=1e-12)
    assert np.all(plan.pi[~tiny.finished] < w / tiny.group_size + 1e-12)


def test_full_width_is_the_inner_row(tiny):
    from pairht.audit.advice import two_stage_mse

    cfg = AuditConfig(budget_ratio=0.5, pi_min=0.1)
    mse, b_w = two_stage_mse(tiny, 0.5, tiny.group_size, row="pair_dr", pi_min=0.1)
    assert b_w == pytest.approx(0.5, rel=1e-12)
    ref = run_audit(tiny, rows=["pair_dr"], config=cfg, n_draws=0).row("pair_dr")
    np.testing.assert_allclose(mse, ref.per_prompt["mse_exact"], rtol=1e-12)


@pytest.mark.parametrize(("G", "g_prime", "want"),
                         [(16, 12.68, 14), (8, 5.1, 7), (16, 15.9, 16), (16, 15.0, 16),
                          (8, 7.2, 8), (8, 2.0, 5), (16, 1.0, 9)])
def test_narrow_width_is_half_way_and_above_g_prime(G, g_prime, want):
    w = narrow_width(G, g_prime)
    assert w == want
    assert g_prime < w <= G or (w == G and g_prime >= G - 1)


@pytest.mark.parametrize(("G", "g_prime", "match"),
                         [(1, 1.0, "G must be"), (16, 0.0, "g_prime must be"),
                          (16, 17.0, "g_prime must be"), (16, math.nan, "g_prime must be")])
def test_narrow_width_refuses_bad_input(G, g_prime, match):
    with pytest.raises(ValueError, match=match):
        narrow_width(G, g_prime)


def test_width_budget_spends_full_width_pairs_total(tiny):
    from pairht.audit.base import prefix_tokens, suffix_costs

    for w in range(2, tiny.group_size + 1):
        b_w = width_budget(tiny, 0.4, w)
        C = suffix_costs(tiny).sum()
        spent = w / tiny.group_size * (prefix_tokens(tiny) + b_w * C)
        assert spent == pytest.approx(prefix_tokens(tiny) + 0.4 * C, rel=1e-12)


def test_hindsight_narrow_width_beats_grpo_where_full_width_cannot():
    """The synthetic population with long prefixes (tau = 32) at budget 0.25: with
    hindsight-perfect predictions the narrower width has a lower exact MSE than the full
    width's difference estimator, at the same generated tokens."""
    pop = with_predictions(synthetic_population(12, 8, prefix_tokens=32, rng=0), "hindsight")
    res = run_audit(pop, rows=["pair_dr", "pair_dr_narrow", "grpo_small"],
                    config=AuditConfig(budget_ratio=0.25), n_draws=0)
    narrow, full = res.row("pair_dr_narrow"), res.row("pair_dr")
    assert narrow.ok and full.ok
    assert narrow.metrics["mse_exact"] < full.metrics["mse_exact"]


def test_width_advice_carries_the_narrower_widths_w_for_the_trainer(tiny):
    """WidthAdvice.prefix_width is the w the row ran (narrow_width at the population's G'),
    what AuditCallback passes to the trainer's width="subset"; None for a full-width rule."""
    from pairht.audit import narrow_rule, width_advice

    adv = width_advice(tiny, 0.5, options=("pair_dr_narrow", "pair"), seed=0)
    g_prime = 6 * whole_group_ratio(tiny, 0.5)
    assert adv.option == "pair_dr_narrow" or adv.prefix_width is None
    full = width_advice(tiny, 0.5, options=("pair",), seed=0)
    assert full.prefix_width is None
    narrow = width_advice(tiny, 0.5, options=("pair_dr_narrow",), seed=0)
    assert narrow.option == "pair_dr_narrow"
    assert narrow.prefix_width == narrow_width(6, g_prime) and narrow.prefix_width < 6
    assert narrow_rule("pair_dr_narrow") == "pair_dr"
    with pytest.raises(ValueError, match="option must be one of NARROW_OPTIONS"):
        narrow_rule("pair")
